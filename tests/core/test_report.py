"""`dmlplug report`: grouping by recipe, mean ± std over seeds, CSV, figures, plugin sections (ooDML: metric vs FID)."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest
import tomli_w
from e2e import run_cli

from dmlplug.errors import DataError
from dmlplug.plugins import get_host
from dmlplug.report import build_report, write_report


def fake_run(directory, *, name="exp", seed=0, lr=1e-3, final=None, best=None, curve=(), split=None,
             status="completed", recipe_changes=None, selected_on="val"):
    """A run directory as `dmlplug run` writes it (only the files the report reads); ``selected_on=None`` writes
    a results.json of a dmlplug older than the field."""
    directory.mkdir(parents=True)
    recipe = {"run": {"name": name, "seed": seed, "output_dir": "runs", "epochs": len(curve)},
              "optimizer": {"lr": lr}, "evaluation": {"metric": "recall@1"},
              "loss": {"name": "multi_similarity"}, "evaluators": [{"name": "recall", "k": [1, 2]}]}
    if split is not None:
        recipe["data"] = {"dataset": {"name": "oodml_split", "split_file": str(split[0]), "split_id": split[1],
                                      "part": "zero_shot", "dataset": {"name": "glyphs"}}}
    for dotted, value in (recipe_changes or {}).items():
        *parents, leaf = dotted.split(".")
        table = recipe
        for part in parents:
            table = table.setdefault(part, {})
        table[leaf] = value
    (directory / "recipe.resolved.toml").write_text(tomli_w.dumps(recipe))
    final = final or {}
    results = {"status": status, "name": name, "metrics": final, "best_metrics": best or final, "best_epoch": 1}
    if selected_on is not None:
        results["selected_on"] = selected_on
    (directory / "results.json").write_text(json.dumps(results))
    lines = [json.dumps({"epoch": e, "step": 10 * e, "split": "test", "time": 0.0, **m}) for e, m in enumerate(curve)]
    (directory / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return directory


def test_groups_seeds_and_reports_mean_and_sample_std(tmp_path):
    finals = [0.50, 0.60, 0.70]
    for seed, value in enumerate(finals):
        fake_run(tmp_path / "a" / f"s{seed}", seed=seed, final={"recall@1": value, "map@r": value / 2},
                 best={"recall@1": value + 0.1, "map@r": value / 2})
    fake_run(tmp_path / "b", seed=0, lr=1e-2, final={"recall@1": 0.4, "map@r": 0.2})
    report = build_report(host=get_host(), paths=[tmp_path])
    assert report.metrics == ["recall@1", "map@r"]  # the selection metric first
    assert len(report.groups) == 2
    seeds = next(g for g in report.groups if len(g.runs) == 3)
    mean, std, n = seeds.stat("final", "recall@1")
    assert n == 3 and mean == pytest.approx(statistics.mean(finals))
    assert std == pytest.approx(statistics.stdev(finals))  # sample std (n - 1)
    assert seeds.stat("best", "recall@1")[0] == pytest.approx(0.7)
    # Same run name, different recipes: labels tell them apart by the differing value.
    labels = sorted(g.label for g in report.groups)
    assert labels == ["exp (optimizer.lr=0.001)", "exp (optimizer.lr=0.01)"]
    text = report.markdown()
    assert "| exp (optimizer.lr=0.001) | 3 | 0.6000 ± 0.1000 | 0.3000 ± 0.0500 | 0.7000 ± 0.1000 |" in text
    assert "| exp (optimizer.lr=0.01) | 1 | 0.4000 | 0.2000 | 0.4000 | 0.2000 |" in text
    rows = list(csv.DictReader(io.StringIO(report.csv())))
    row = next(r for r in rows if r["runs"] == "3")
    assert float(row["final/recall@1/mean"]) == pytest.approx(0.6) and row["seeds"] == "0 1 2"
    assert float(row["final/recall@1/std"]) == pytest.approx(0.1)


def test_writes_markdown_csv_and_learning_curves(tmp_path):
    for seed in range(2):
        fake_run(tmp_path / "runs" / f"s{seed}", seed=seed, final={"recall@1": 0.5},
                 curve=[{"recall@1": 0.1}, {"recall@1": 0.3 + seed / 10}, {"recall@1": 0.5}])
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "runs" / "s0" / "tb")) as writer:
        for step in range(1, 4):
            writer.add_scalar("train/loss/total", 1.0 / step, step)
    out = tmp_path / "out" / "report.md"
    report, text = write_report([tmp_path / "runs"], out, host=get_host())
    assert out.read_text() == text
    assert (tmp_path / "out" / "report.csv").is_file()
    assert [r.loss_curve for r in report.groups[0].runs] == [[(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))], []]
    curve = tmp_path / "out" / "report_figures" / "curve_recall_1.png"
    loss = tmp_path / "out" / "report_figures" / "train_loss.png"
    assert curve.read_bytes().startswith(b"\x89PNG") and report.figures == [curve, loss]
    assert "![curve_recall_1](report_figures/curve_recall_1.png)" in text
    assert not (tmp_path / "out" / "report_figures" / "metric_vs_fid.png").exists()  # no FIDs
    assert report.sections == [] and "FID" not in text


def test_metric_vs_fid_and_ags_from_split_files(tmp_path):
    from dmlplug_builtins.oodml.ags import ags
    from dmlplug_builtins.oodml.report import group_fids, split_ags
    from dmlplug_builtins.oodml.splitfile import OodSplit, save_splits

    def split(i, fid):
        return OodSplit(id=i, fid=fid, train=["a", "b"], test=["c"], split_train=["a"], split_val=["b"])

    splits = save_splits(tmp_path / "splits.json", [split(1, 20.0), split(2, 60.0), split(3, 120.0)])
    best = {1: [0.8, 0.6], 2: [0.5, 0.5], 3: [0.2, 0.4]}
    for split_id, values in best.items():
        for seed, value in enumerate(values):
            fake_run(tmp_path / "runs" / f"split{split_id}_seed{seed}", name="sweep", seed=seed,
                     final={"recall@1": value}, split=(splits, split_id))
    out = tmp_path / "report.md"
    report, text = write_report([tmp_path / "runs"], out, host=get_host())
    fids = group_fids(report.groups)
    assert [fids[g.key] for g in report.groups] == [20.0, 60.0, 120.0]  # ordered by shift (split id)
    expected = ags([20, 60, 120], [0.7, 0.5, 0.3])  # fractions, like every value in the report
    assert split_ags(report.groups, fids, report.metrics)["recall@1"] == pytest.approx(expected)
    assert f"recall@1 {expected:.4f}" in text and "## ooDML" in text
    assert text.splitlines()[2].startswith("| run | seeds | FID | final recall@1 |")
    assert [line.split(" | ")[2] for line in text.splitlines()[4:7]] == ["20.00", "60.00", "120.00"]
    figure = tmp_path / "report_figures" / "metric_vs_fid.png"
    assert figure.read_bytes().startswith(b"\x89PNG") and figure in report.figures
    assert "split_id=1" in " ".join(g.label for g in report.groups)
    assert [r["FID"] for r in csv.DictReader(io.StringIO(report.csv()))] == ["20.00", "60.00", "120.00"]
    # The split file is also found relative to the run directory (runs moved with their split file).
    moved = tmp_path / "moved"
    fake_run(moved / "run", name="sweep", final={"recall@1": 0.5}, split=("../splits.json", 2))
    (moved / "splits.json").write_bytes(splits.read_bytes())
    assert list(group_fids(build_report(host=get_host(), paths=[moved]).groups).values()) == [60.0]


def test_a_failing_plugin_section_does_not_break_the_report(tmp_path):
    from dmlplug import hookimpl
    from dmlplug.plugins import get_host

    class Broken:
        @staticmethod
        @hookimpl
        def report_section(groups, metrics):
            raise RuntimeError("boom")

    fake_run(tmp_path / "run", final={"recall@1": 0.25})
    host = get_host()
    host.pm.register(Broken, name="broken-report")
    try:
        text = build_report(host=get_host(), paths=[tmp_path / "run"]).markdown()
    finally:
        host.pm.unregister(name="broken-report")
    assert "## broken-report (failed)" in text and "RuntimeError: boom" in text


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        build_report(host=get_host(), paths=[tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no run directory"):
        build_report(host=get_host(), paths=[tmp_path / "empty"])
    fake_run(tmp_path / "run", final={"recall@1": 0.5})
    with pytest.raises(DataError, match="recall@9"):
        build_report(host=get_host(), paths=[tmp_path / "run"], metrics=["recall@9"])


def test_cli_prints_the_report(tmp_path):
    fake_run(tmp_path / "run", final={"recall@1": 0.25})
    proc = run_cli("report", tmp_path / "run", "--csv", tmp_path / "t.csv")
    assert proc.returncode == 0, proc.stderr
    assert "| exp | 1 | 0.2500 | 0.2500 |" in proc.stdout
    assert (tmp_path / "t.csv").read_text().startswith("run,runs,seeds,selected_on,reported_on,final/recall@1/mean")
    bad = run_cli("report", tmp_path / "nope")
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_labels_show_every_difference_in_full(tmp_path):
    # Five keys differ between the first two groups: a label cut after three would read the same for both.
    common = {"a.k1": 1, "a.k2": 2, "a.k3": 3, "a.k4": 4}
    fake_run(tmp_path / "x", final={"recall@1": 0.1}, recipe_changes={**common, "evaluation.every": 1})
    fake_run(tmp_path / "y", final={"recall@1": 0.2}, recipe_changes={**common, "evaluation.every": 2})
    fake_run(tmp_path / "z", final={"recall@1": 0.3}, recipe_changes={"a.k1": 9, "a.k2": 9, "a.k3": 9, "a.k4": 9,
                                                                      "evaluation.every": 1})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    assert labels == ["exp (a.k1=1, a.k2=2, a.k3=3, a.k4=4, evaluation.every=1)",
                      "exp (a.k1=1, a.k2=2, a.k3=3, a.k4=4, evaluation.every=2)",
                      "exp (a.k1=9, a.k2=9, a.k3=9, a.k4=9, evaluation.every=1)"]


def test_two_oodml_splits_read_differently(tmp_path):
    for split_id in (1, 2):
        fake_run(tmp_path / f"s{split_id}", name="sweep", final={"recall@1": 0.5},
                 split=(tmp_path / "f.json", split_id))
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    assert labels == ["sweep (data.dataset.split_id=1)", "sweep (data.dataset.split_id=2)"]


def test_labels_that_would_print_alike_are_numbered(tmp_path):
    fake_run(tmp_path / "a", final={"recall@1": 0.1}, recipe_changes={"head.x": 1})
    fake_run(tmp_path / "b", final={"recall@1": 0.2}, recipe_changes={"head.x": "1"})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    assert labels == ["exp (head.x=1) #1", "exp (head.x=1) #2"]


def test_failed_and_interrupted_runs_are_marked_and_not_averaged(tmp_path):
    fake_run(tmp_path / "s0", seed=0, final={"recall@1": 0.6})
    fake_run(tmp_path / "s1", seed=1, final={"recall@1": 0.8})
    fake_run(tmp_path / "s2", seed=2, final={"recall@1": 0.1}, status="interrupted")
    fake_run(tmp_path / "s3", seed=3, final={"recall@1": 0.05}, status="failed")
    report = build_report(host=get_host(), paths=[tmp_path])
    by_label = {g.label: g for g in report.groups}
    assert set(by_label) == {"exp", "exp [interrupted]", "exp [failed]"}
    done = by_label["exp"]
    assert done.status == "completed" and done.seeds == [0, 1]
    assert done.stat("final", "recall@1")[0] == pytest.approx(0.7)  # the unfinished runs are not in the mean
    assert by_label["exp [interrupted]"].seeds == [2] and by_label["exp [failed]"].status == "failed"
    text = report.markdown()
    assert "| exp | 2 | 0.7000 ± 0.1414 |" in text and "| exp [interrupted] | 1 | 0.1000 |" in text
    assert "Not completed" in text and "exp [failed]" in text.split("Not completed")[1]
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(report.csv()))}
    assert {label: r["status"] for label, r in rows.items()} == {
        "exp": "completed", "exp [interrupted]": "interrupted", "exp [failed]": "failed"}


def test_runs_that_repeat_a_seed_count_once_and_show_no_spread(tmp_path):
    # Two runs of seed 0 are one sample of the seed: "seeds 1", their mean, no "± 0.0000" pretending a spread.
    fake_run(tmp_path / "a" / "r1", seed=0, final={"recall@1": 0.50})
    fake_run(tmp_path / "a" / "r2", seed=0, final={"recall@1": 0.50})
    report = build_report(host=get_host(), paths=[tmp_path / "a"])
    (group,) = report.groups
    assert group.distinct_seeds == [0] and group.repeated_seeds == {0: 2}
    assert group.stat("final", "recall@1") == (pytest.approx(0.5), 0.0, 1)
    text = report.markdown()
    rows = [line for line in text.splitlines() if line.startswith("| exp")]
    assert rows == ["| exp | 1 (2 runs) | 0.5000 | 0.5000 |"]
    assert "exp: seed 0 ran 2 times" in text
    row = next(csv.DictReader(io.StringIO(report.csv())))
    assert (row["runs"], row["seeds"], row["final/recall@1/std"]) == ("2", "0", "")


def test_repeats_of_a_seed_are_averaged_before_the_spread_over_seeds(tmp_path):
    for name, seed, value in (("r1", 0, 0.4), ("r2", 0, 0.6), ("r3", 1, 0.7)):
        fake_run(tmp_path / name, seed=seed, final={"recall@1": value})
    (group,) = build_report(host=get_host(), paths=[tmp_path]).groups
    mean, std, n = group.stat("final", "recall@1")
    # seed 0 -> 0.5, seed 1 -> 0.7: two samples, not three
    assert n == 2 and mean == pytest.approx(0.6) and std == pytest.approx(statistics.stdev([0.5, 0.7]))
    assert "| exp | 2 (3 runs) | 0.6000 ± 0.1414 |" in build_report(host=get_host(), paths=[tmp_path]).markdown()


def test_labels_leave_out_what_the_component_name_or_a_default_already_says(tmp_path):
    # Another loss: its parameters (margin here, alpha there) follow from loss.name and are not labels.
    fake_run(tmp_path / "arc", final={"recall@1": 0.1},
             recipe_changes={"loss.name": "arcface", "loss.margin": 28.6, "loss.scale": 64.0})
    fake_run(tmp_path / "ms", final={"recall@1": 0.2}, recipe_changes={"loss.alpha": 2.0})
    # Clipping set in one run, unset (None, not written to TOML) in the other: a real difference.
    fake_run(tmp_path / "clip", final={"recall@1": 0.3}, recipe_changes={"loss.alpha": 2.0, "run.grad_clip": 1.0})
    # A key of a newer dmlplug at its default, absent from an older run's recipe: not a difference.
    fake_run(tmp_path / "newer", final={"recall@1": 0.4},
             recipe_changes={"loss.name": "arcface", "loss.margin": 28.6, "loss.scale": 64.0,
                             "evaluation.select_on": "auto", "evaluation.report_curve": False})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    # Only the two arcface runs, which would read the same, show the keys that tell them apart.
    assert labels == ["exp (evaluation.report_curve=false, evaluation.select_on=auto, loss.name=arcface, "
                      "run.grad_clip=none)",
                      "exp (evaluation.report_curve=none, evaluation.select_on=none, loss.name=arcface, "
                      "run.grad_clip=none)",
                      "exp (loss.name=multi_similarity, run.grad_clip=1.0)",
                      "exp (loss.name=multi_similarity, run.grad_clip=none)"]


def test_a_parameter_that_differs_within_one_component_is_a_label(tmp_path):
    fake_run(tmp_path / "a", final={"recall@1": 0.1}, recipe_changes={"loss.name": "arcface", "loss.margin": 28.6})
    fake_run(tmp_path / "b", final={"recall@1": 0.2}, recipe_changes={"loss.name": "arcface", "loss.margin": 10.0})
    fake_run(tmp_path / "c", final={"recall@1": 0.3}, recipe_changes={"loss.alpha": 2.0})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    assert labels == ["exp (loss.margin=10.0, loss.name=arcface)", "exp (loss.margin=28.6, loss.name=arcface)",
                      "exp (loss.margin=none, loss.name=multi_similarity)"]


def test_an_older_run_that_selected_its_untrained_model_is_read_with_the_current_rule(tmp_path):
    # results.json of an older dmlplug: best_epoch 0 (the untrained model won on recall@1).
    run = fake_run(tmp_path / "old", final={"recall@1": 0.30}, best={"recall@1": 0.90},
                   curve=[{"recall@1": 0.90}, {"recall@1": 0.20}, {"recall@1": 0.35}, {"recall@1": 0.30}],
                   selected_on=None)
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "best_epoch": 0, "epochs_completed": 3}))
    report = build_report(host=get_host(), paths=[run])
    (record,) = report.groups[0].runs
    assert (record.best_epoch, record.best) == (2, {"recall@1": 0.35})
    assert "selected again among the trained evaluations: epoch 2" in report.markdown()


def test_a_key_only_a_newer_dmlplug_writes_is_not_a_label_when_it_holds_its_default(tmp_path):
    fake_run(tmp_path / "old", final={"recall@1": 0.1})
    fake_run(tmp_path / "new", lr=1e-2, final={"recall@1": 0.2},
             recipe_changes={"evaluation.select_on": "auto", "evaluation.select_initial": False})
    fake_run(tmp_path / "changed", lr=1e-2, final={"recall@1": 0.3}, recipe_changes={"evaluation.select_on": "val"})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path]).groups)
    assert labels == ["exp (evaluation.select_on=auto, optimizer.lr=0.01)",
                      "exp (evaluation.select_on=none, optimizer.lr=0.001)",
                      "exp (evaluation.select_on=val, optimizer.lr=0.01)"]
    fake_run(tmp_path / "b" / "old", final={"recall@1": 0.1})
    fake_run(tmp_path / "b" / "new", lr=1e-2, final={"recall@1": 0.2},
             recipe_changes={"evaluation.select_on": "auto", "evaluation.select_initial": False})
    labels = sorted(g.label for g in build_report(host=get_host(), paths=[tmp_path / "b"]).groups)
    assert labels == ["exp (optimizer.lr=0.001)", "exp (optimizer.lr=0.01)"]


def test_best_values_the_test_split_selected_are_labelled_so(tmp_path):
    # issue 41: a best value chosen by the test classes never shows unlabelled; the last epoch says so too.
    for name, selected_on, lr in (("tested", "test", 1e-3), ("honest", "last", 1e-2)):
        run = fake_run(tmp_path / name, name=name, lr=lr, final={"recall@1": 0.5})
        results = json.loads((run / "results.json").read_text())
        (run / "results.json").write_text(json.dumps({**results, "selected_on": selected_on,
                                                      "reported_on": "test"}))
    text = build_report(host=get_host(), paths=[tmp_path]).markdown()
    rows = {line.split(" ")[1]: line for line in text.splitlines() if line.startswith("| ")}
    assert "†test-selected" in rows["tested"] and "†test-selected" not in rows["honest"]
    assert "best values selected on the TEST split" in text
    assert "best at epoch 1, selected on TEST" in text and "best at epoch 1, last epoch" in text
