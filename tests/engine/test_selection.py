"""Model selection and what a run reports (issue 26): select on val, report on test, in one run; the untrained
model is a baseline, not a candidate; a quiet run prints nothing. Issue 41: nothing selects on the test split
unless the recipe says so, and then every place that shows the numbers says so."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
import torch

import dmlplug
from dmlplug import Params
from dmlplug.errors import RecipeError, RunError
from dmlplug.plugins import PluginHost

#: 4 batches of 8 per epoch; 10 of the 40 glyph classes validate with VAL.
SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=2"]
VAL = ["data.dataset.val_fraction=0.25"]
#: Selection on the test split, said explicitly (``auto`` never selects on test).
TEST = ['evaluation.select_on="test"']
#: The recall evaluator and the countdown below; the countdown selects.
EVALUATORS = ['evaluators=[{name="recall", k=[1, 2]}, {name="countdown"}]', 'evaluation.metric="countdown"']


class CountdownParams(Params):
    def metric_names(self):
        return ("countdown",)


class Countdown:
    """``countdown`` = 1 / (how often a split of this size was evaluated): every split's best is its first
    evaluation, so the untrained model wins unless it is no candidate, and epoch 1 wins among trained ones."""

    def __init__(self):
        self.calls: Counter[int] = Counter()

    def evaluate(self, ctx):
        self.calls[len(ctx.query_labels)] += 1
        return {"countdown": 1.0 / self.calls[len(ctx.query_labels)]}


def _host() -> PluginHost:
    host = PluginHost().load(entry_points=False)
    host.registry.register_callback("evaluators", "test")("countdown", lambda p, c: Countdown(),
                                                          params=CountdownParams)
    glyphs = host.registry.get("datasets", "glyphs")

    class UnknownValParams(glyphs.params):  # parameters that cannot tell (a CSV list): the data decides
        def has_validation_split(self):
            return None

    host.registry.register_callback("datasets", "test")("unknown_val", glyphs.factory, params=UnknownValParams)
    return host


@pytest.fixture(scope="module")
def host():
    return _host()


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _metrics(record):
    return {k: v for k, v in record.items() if k not in ("epoch", "step", "split", "time", "report")}


def test_one_run_selects_on_val_and_reports_the_selected_checkpoint_on_test(tiny_recipe, tmp_path, host):
    run_dir = tmp_path / "r"
    result = dmlplug.run(tiny_recipe, overrides=[*SMALL, *VAL, *EVALUATORS], out=run_dir, quiet=True, host=host)
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["selected_on"], results["reported_on"], results["best_epoch"]) == ("val", "test", 1)
    records = _records(run_dir)
    # Val at every evaluation (it selects), test before training and after the last epoch, then best.pt on test.
    assert [(r["epoch"], r["split"], r.get("report")) for r in records] == [
        (0, "test", None), (0, "val", None), (1, "val", None), (2, "test", None), (2, "val", None),
        (1, "test", "selected")]
    # Selecting on test would have taken epoch 2, the only trained test evaluation: epoch 1 is val's choice.
    assert results["selection_metrics"] == _metrics(records[2])
    assert results["best_metrics"] == _metrics(records[-1]) == result.best_metrics
    assert results["metrics"] == _metrics(records[3]) and results["metrics_epoch"] == 2
    assert results["initial_metrics"] == _metrics(records[0])
    assert torch.load(run_dir / "checkpoints" / "best.pt", weights_only=False)["epoch"] == 1
    # best_metrics are best.pt's test numbers: evaluate its weights on the test split independently.
    recalls = evaluate_best_on_test(run_dir)
    for key in ("recall@1", "recall@2"):
        assert results["best_metrics"][key] == pytest.approx(recalls[key], abs=1e-9)


def evaluate_best_on_test(run_dir):
    """recall@1/2 of ``best.pt`` on the test split, computed here, image by image."""
    loaded = dmlplug.load_run(run_dir, overrides=['evaluators=[{name="recall"}]', 'evaluation.metric="recall@1"'])
    test = loaded.dataset.test
    with torch.no_grad():
        embeddings = torch.cat([loaded.model.embed(loaded.test_transform(test.load_image(i))[None])
                                for i in range(len(test))])
    return dmlplug.evaluate(embeddings.numpy(), np.asarray(test.labels), evaluators=[{"name": "recall", "k": [1, 2]}])


def test_the_untrained_model_is_a_baseline_unless_the_recipe_makes_it_a_candidate(tiny_recipe, tmp_path, host):
    baseline = dmlplug.run(tiny_recipe, overrides=[*SMALL, *EVALUATORS, *TEST], out=tmp_path / "b", quiet=True,
                           host=host)
    assert baseline.best_epoch == 1 and baseline.best_metrics["countdown"] == 0.5
    assert baseline.initial_metrics["countdown"] == 1.0  # the better value, recorded but not selectable
    assert torch.load(tmp_path / "b" / "checkpoints" / "best.pt", weights_only=False)["epoch"] == 1
    chosen = dmlplug.run(tiny_recipe, overrides=[*SMALL, *EVALUATORS, *TEST, "evaluation.select_initial=true"],
                         out=tmp_path / "c", quiet=True, host=host)
    assert chosen.best_epoch == 0 and chosen.best_metrics["countdown"] == 1.0
    results = json.loads((tmp_path / "c" / "results.json").read_text())
    assert results["select_initial"] is True and results["selected_on"] == results["reported_on"] == "test"
    # Nothing trained, nothing selected: no best.pt, no best metrics (the evaluation is in initial_metrics).
    untrained = dmlplug.run(tiny_recipe, overrides=[*SMALL, *EVALUATORS, "run.epochs=0"], out=tmp_path / "u",
                            quiet=True, host=host)
    assert (untrained.best_epoch, untrained.best_metrics) == (None, {}) and untrained.initial_metrics
    assert not (tmp_path / "u" / "checkpoints" / "best.pt").exists()


def test_continuing_a_run_reports_its_selected_checkpoint_once(tiny_recipe, tmp_path, host):
    run_dir = tmp_path / "r"
    dmlplug.run(tiny_recipe, overrides=[*SMALL, *VAL, *EVALUATORS, "evaluation.initial=false"], out=run_dir,
                quiet=True, host=host)
    dmlplug.run(run_dir, overrides=["run.epochs=3"], resume=True, force=True, quiet=True, host=host)
    records = _records(run_dir)
    # The first end's report of best.pt was dropped on resume; the new end reports it again, once.
    assert [(r["epoch"], r["split"]) for r in records if "report" in r] == [(1, "test")]
    assert [(r["epoch"], r["split"]) for r in records if "report" not in r] == [
        (1, "val"), (2, "test"), (2, "val"), (3, "test"), (3, "val")]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["best_epoch"] == 1 and results["metrics_epoch"] == 3


def test_quiet_prints_nothing_and_a_run_that_is_not_quiet_names_its_selected_checkpoint(tiny_recipe, tmp_path,
                                                                                          host, capfd):
    overrides = [*SMALL, "run.epochs=1"]
    dmlplug.run(tiny_recipe, overrides=overrides, out=tmp_path / "q", quiet=True, host=host)
    quiet = capfd.readouterr()
    assert "epoch" not in quiet.err + quiet.out and "dmlplug:" not in quiet.err + quiet.out
    dmlplug.run(tiny_recipe, overrides=overrides, out=tmp_path / "l", quiet=False, host=host)
    loud = capfd.readouterr().err
    assert "epoch 0 test:" in loud and "epoch 1 test loss=" in loud  # no split selects: no "(selects best.pt)"
    assert "best.pt = epoch 1, last epoch; test: recall@1=" in loud


def test_selecting_or_reporting_on_val_needs_a_validation_split(tiny_recipe, tmp_path, host):
    for key in ("select_on", "report_on"):
        with pytest.raises(RecipeError, match="no validation split"):
            dmlplug.validate(tiny_recipe, [*SMALL, f'evaluation.{key}="val"'])
    dmlplug.validate(tiny_recipe, [*SMALL, *VAL, 'evaluation.select_on="val"', 'evaluation.report_on="val"'])
    with pytest.raises(RecipeError, match="split is its former name"):
        dmlplug.validate(tiny_recipe, [*SMALL, 'evaluation.split="val"', 'evaluation.select_on="val"'])
    with pytest.raises(RecipeError, match="chosen on the test split"):
        dmlplug.validate(tiny_recipe, [*SMALL, *VAL, 'evaluation.select_on="test"', 'evaluation.report_on="val"'])
    # A dataset whose parameters cannot tell: validate passes, the run refuses it before any training step.
    unknown = [*SMALL, 'data.dataset.name="unknown_val"', 'evaluation.report_on="val"', "evaluation.initial=false"]
    from dmlplug.recipe import load_recipe

    load_recipe(tiny_recipe, unknown, registry=host.registry)
    with pytest.raises(RunError, match="no validation split"):
        dmlplug.run(tiny_recipe, overrides=unknown, out=tmp_path / "u", quiet=True, host=host)
    assert not (tmp_path / "u").exists()


def test_the_former_split_key_keeps_its_meaning():
    from dmlplug.recipe.schema import EvaluationSection

    assert EvaluationSection(split="test").select_on == "test"
    assert EvaluationSection(split="val").select_on == "val"
    assert EvaluationSection().select_on == "auto"
    assert not hasattr(EvaluationSection(), "split")  # one name: the former one is read into select_on


def test_split_roles_follow_the_options_and_the_dataset():
    from dmlplug.engine.selection import check_declared_splits, evaluated_splits, resolve_splits
    from dmlplug.recipe.schema import EvaluationSection

    auto = EvaluationSection()
    assert (resolve_splits(auto, has_val=True).select, resolve_splits(auto, has_val=False).select) == ("val", "last")
    roles = resolve_splits(EvaluationSection(report_curve=True), has_val=True)
    assert roles.report == "test" and roles.report_due(1, 5, initial=False)
    roles = resolve_splits(auto, has_val=True)
    assert [roles.report_due(e, 3, initial=e == 0) for e in range(4)] == [True, False, False, True]
    assert not resolve_splits(auto, has_val=False).report_due(3, 3, initial=True)  # test is evaluated anyway
    with pytest.raises(RunError, match="report_on = \"val\", but dataset .* has no validation split"):
        resolve_splits(EvaluationSection(report_on="val"), has_val=False)
    assert evaluated_splits(auto, None) == ("test", "val") and evaluated_splits(auto, False) == ("test",)
    assert evaluated_splits(EvaluationSection(select_on="val", report_on="val"), True) == ("val",)
    with pytest.raises(RecipeError, match='select_on = "val", but dataset'):
        check_declared_splits(EvaluationSection(select_on="val"), False, "glyphs", "r.toml")
    check_declared_splits(EvaluationSection(select_on="val"), None, "csv", "r.toml")  # the data decides


def test_a_checkpoint_that_selected_the_untrained_model_is_no_longer_read_as_best():
    from dmlplug.engine.selection import BestTracker

    older = {"value": 0.9, "epoch": 0, "metrics": {"recall@1": 0.9}}  # an older dmlplug's checkpointed tracker
    tracker = BestTracker("recall@1", "max")
    tracker.load(older)
    assert (tracker.epoch, tracker.metrics) == (None, {})
    assert tracker.update({"recall@1": 0.2}, 1, step=4)  # the first trained evaluation is selected
    allowed = BestTracker("recall@1", "max", select_initial=True)
    allowed.load(older)
    assert allowed.epoch == 0 and not allowed.update({"recall@1": 0.9}, 1)  # a tie keeps the earlier one


def test_load_run_and_export_take_the_checkpoint_every_command_calls_best(tmp_path):
    from dmlplug.engine.trained_run import find_checkpoint

    run = tmp_path / "old"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("best.pt", "last.pt"):
        (run / "checkpoints" / name).write_bytes(b"")
    records = [{"epoch": 0, "split": "test", "recall@1": 0.9}, {"epoch": 1, "split": "test", "recall@1": 0.2},
               {"epoch": 2, "split": "test", "recall@1": 0.4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # An older dmlplug recorded the untrained model as best (best.pt = epoch 0): the trained best is epoch 2,
    # which last.pt holds.
    (run / "results.json").write_text(json.dumps({"status": "completed", "best_epoch": 0, "epochs_completed": 2,
                                                  "best_metrics": records[0], "metrics": records[2]}))
    assert find_checkpoint(run) == (run / "checkpoints" / "last.pt", run)
    assert find_checkpoint(run, "last")[0].name == "last.pt"
    (run / "results.json").write_text(json.dumps({"status": "completed", "selected_on": "test", "best_epoch": 2,
                                                  "reported_on": "test", "best_metrics": records[2]}))
    assert find_checkpoint(run)[0].name == "best.pt"


# ------------------------------------------------------------------- issue 41: never on the test split unless said
def test_auto_without_a_validation_split_keeps_the_last_epoch_not_the_best_test_epoch(tiny_recipe, tmp_path, host):
    run_dir = tmp_path / "r"
    result = dmlplug.run(tiny_recipe, overrides=[*SMALL, *EVALUATORS], out=run_dir, quiet=True, host=host)
    results = json.loads((run_dir / "results.json").read_text())
    # The countdown is best at the first trained test evaluation (epoch 1): selecting on test would take it.
    assert (results["selected_on"], results["best_epoch"], result.best_epoch) == ("last", 2, 2)
    assert results["best_metrics"] == results["metrics"] and results["best_metrics"]["countdown"] == 1 / 3
    assert torch.load(run_dir / "checkpoints" / "best.pt", weights_only=False)["epoch"] == 2
    # The test split is evaluated for its curve; nothing is evaluated again for best.pt.
    assert [(r["epoch"], r["split"], r.get("report")) for r in _records(run_dir)] == [
        (0, "test", None), (1, "test", None), (2, "test", None)]


def test_a_metric_following_schedule_never_follows_the_test_metric_unless_said(tiny_recipe, tmp_path, host):
    plateau = [*SMALL, 'scheduler.name="plateau"']
    with pytest.raises(RecipeError, match="follows the selection metric") as refused:
        dmlplug.validate(tiny_recipe, plateau)
    assert "--set data.dataset.val_fraction=0.25" in refused.value.fix and 'select_on = "test"' in refused.value.fix
    dmlplug.validate(tiny_recipe, [*plateau, *VAL])  # validation classes select, and the schedule follows them
    dmlplug.validate(tiny_recipe, [*plateau, *TEST])  # said explicitly (and labelled everywhere)
    # A dataset whose parameters cannot tell: the run refuses it once the data shows no validation split.
    unknown = [*plateau, 'data.dataset.name="unknown_val"']
    with pytest.raises(RunError, match="follows the selection metric"):
        dmlplug.run(tiny_recipe, overrides=unknown, out=tmp_path / "u", quiet=True, host=host)
    assert not (tmp_path / "u").exists()


def test_a_run_that_selects_on_test_says_so_everywhere_its_numbers_show(tiny_recipe, tmp_path, host, capfd):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "t"
    loggers = 'loggers=[{name="console"}, {name="tensorboard", projector=false, histograms=false, figures=false}]'
    dmlplug.run(tiny_recipe, overrides=[*SMALL, *TEST, "run.epochs=1", "evaluation.pictures=false", loggers],
                out=run_dir, quiet=False, host=host)
    err = capfd.readouterr().err
    assert 'best.pt is selected on the TEST split (select_on = "test" in the recipe)' in err
    assert "epoch 1 test (selects best.pt) loss=" in err and "best.pt = epoch 1, selected on TEST; test:" in err
    assert json.loads((run_dir / "results.json").read_text())["selected_on"] == "test"
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    text = events.Tensors("run/selection/text_summary")[0].tensor_proto.string_val[0].decode()
    assert text.startswith("best.pt is selected on the TEST split")
    manifest = dmlplug.export(run_dir, tmp_path / "bundle", format="torchscript", images=8, calibrate=False)
    assert manifest["source"]["selected_on"] == "test"


def test_validate_says_which_split_selects_and_why(capsys, monkeypatch):
    from e2e import ROOT

    from dmlplug.cli import main

    monkeypatch.setenv("DMLPLUG_DATA", "/data")
    cub = str(ROOT / "recipes" / "cub_margin.toml")
    main(["validate", cub])
    out = capsys.readouterr().out
    assert "selection: no split selects: best.pt is the last epoch's model" in out
    assert "dataset 'cub200' has no validation classes" in out and "--set data.dataset.val_classes=0.25" in out
    main(["validate", cub, "--set", "data.dataset.val_classes=0.25"])
    assert "selection: the validation split selects best.pt by recall@1 (max)" in capsys.readouterr().out
    main(["validate", cub, "--set", 'evaluation.select_on="test"'])
    assert "selection: the TEST split selects best.pt" in capsys.readouterr().out


#: The paper-protocol recipes (no validation classes of their own).
PAPER_RECIPES = ["cub_margin", "cars_multisimilarity", "sop_arcface", "sop_arcface_tcm", "cub_proxyanchor_nir",
                 "cub_diva", "cub_s2sd"]


def _shipped_recipes():
    from e2e import ROOT

    return sorted(path for path in (ROOT / "recipes").rglob("*.toml") if path.name.count(".") == 1)


@pytest.mark.parametrize("path", _shipped_recipes(), ids=lambda path: path.stem)
def test_no_shipped_recipe_selects_on_the_test_split_without_saying_so(path, monkeypatch):
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe
    from dmlplug.recipe.checks import describe_recipe_selection

    monkeypatch.setenv("DMLPLUG_DATA", "/data")
    said = describe_recipe_selection(load_recipe(path, registry=get_host().registry))
    written = re.search(r'^select_on\s*=\s*"test"', path.read_text(), flags=re.M) is not None  # not a comment
    assert ("TEST" in said) == written, said


@pytest.mark.parametrize("name", PAPER_RECIPES)
def test_each_paper_recipe_states_its_choice_and_selects_on_validation_with_one_override(name, monkeypatch):
    from e2e import ROOT

    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe
    from dmlplug.recipe.checks import describe_recipe_selection

    monkeypatch.setenv("DMLPLUG_DATA", "/data")
    path = ROOT / "recipes" / f"{name}.toml"
    text = path.read_text()
    override = "data.dataset.val_classes=0.25"
    assert f"#   dmlplug run recipes/{name}.toml --set {override}\n" in text and 'select_on = "auto"\n' in text
    registry = get_host().registry
    assert describe_recipe_selection(load_recipe(path, registry=registry)).startswith("no split selects")
    carved = load_recipe(path, [override], registry=registry)
    assert describe_recipe_selection(carved).startswith("the validation split selects best.pt")


def test_the_quickstart_selects_on_validation_classes():
    from e2e import ROOT

    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe
    from dmlplug.recipe.checks import describe_recipe_selection, has_validation_split

    quickstart = load_recipe(ROOT / "recipes" / "quickstart.toml", registry=get_host().registry)
    assert has_validation_split(quickstart) is True  # so export calibrates its thresholds there, not on test
    assert describe_recipe_selection(quickstart).startswith("the validation split selects best.pt")
