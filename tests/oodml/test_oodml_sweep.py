"""ooDML sweeps: class-name re-splitting, split generation from features, sweep/summary maths, and the whole
``dmlplug oodml splits -> run -> summarize`` chain on the embedded glyph dataset."""

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from e2e import TINY_RECIPE, run_cli

from dmlplug.data import ArraySource, DatasetBundle
from dmlplug.data.splits import image_ids, split_by_class_names
from dmlplug.errors import DataError, RunError
from dmlplug_builtins.oodml.ags import ags
from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, load_published_pickle, save_splits
from dmlplug_builtins.oodml.summary import run_metrics, summarize_sweep, write_outputs
from dmlplug_builtins.oodml.sweep import run_directory, run_sweep, split_recipe, wrapped_overrides

PUBLISHED_CARS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "oodml" / "cars196_splits.pkl"


def toy_bundle():
    """Classes a..f, 3 images each; train a, b, c and test d, e, f. Pixel value = 10 * class + image."""
    images = np.array([[[10 * c + i]] for c in range(6) for i in range(3)], dtype=np.uint8).repeat(4, 1).repeat(4, 2)
    labels = np.repeat(np.arange(6), 3)
    names = list("abcdef")
    train = ArraySource(images[:9], labels[:9], names[:3], name="toy/train")
    test = ArraySource(images[9:], labels[9:] - 3, names[3:], name="toy/test")
    return DatasetBundle(train=train, test=test, default_augment="light", info={"n": 18})


def pixel(source, index):
    return int(np.asarray(source.load_image(index))[0, 0, 0])


def test_split_by_class_names_rebuilds_sources_from_the_union():
    bundle = split_by_class_names(toy_bundle(), ["e", "a", "c"], ["b", "f"], ["d"])
    assert bundle.train.class_names == ["e", "a", "c"] and bundle.test.class_names == ["b", "f"]
    assert bundle.val.class_names == ["d"]
    # Labels follow the given order and the images are the right ones.
    assert bundle.train.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [pixel(bundle.train, i) for i in range(9)] == [40, 41, 42, 0, 1, 2, 20, 21, 22]
    assert [pixel(bundle.test, i) for i in range(6)] == [10, 11, 12, 50, 51, 52]
    assert image_ids(bundle.test) == ["img00000", "img00001", "img00002"] * 2
    assert bundle.info["class_split"]["test"] == {"classes": 2, "images": 6} and bundle.info["n"] == 18
    # Per-image attributes every split has (SOP super-classes) follow their images.
    toy = toy_bundle()
    toy.train.attributes = {"super_labels": np.arange(9) // 3, "only_train": np.zeros(9)}
    toy.test.attributes = {"super_labels": 10 + np.arange(9) // 3}
    moved = split_by_class_names(toy, ["e", "a"], ["b"])
    assert moved.train.attributes["super_labels"].tolist() == [11, 11, 11, 0, 0, 0]
    assert sorted(moved.test.attributes) == ["super_labels"]


def test_split_by_class_names_errors():
    with pytest.raises(DataError, match="unknown class name 'x'"):
        split_by_class_names(toy_bundle(), ["a", "x"], ["d"])
    with pytest.raises(DataError, match="listed twice"):
        split_by_class_names(toy_bundle(), ["a", "b"], ["b"])
    with pytest.raises(DataError, match="empty"):
        split_by_class_names(toy_bundle(), [], ["b"])


class MeanPixel(torch.nn.Module):
    """'Backbone' whose pooled features are (mean pixel, its square): class means are known exactly."""

    num_features = 2

    def __init__(self):
        super().__init__()
        self.images = 0

    def forward(self, images):
        self.images += len(images)
        m = images[:, 0].flatten(1).mean(1, dtype=torch.float64)
        return torch.stack([m, m**2], 1).float(), None


def test_generate_splits_uses_every_image_once_and_exact_class_means():
    from dmlplug_builtins.oodml.features import ExtractorSpec, dataset_class_means, generate_splits
    from dmlplug_builtins.oodml.swapping import class_means

    bundle, backbone = toy_bundle(), MeanPixel()
    spec = ExtractorSpec(image_size=4, batch_size=5)
    table = dataset_class_means(bundle, backbone, spec)
    assert backbone.images == 18 and table["train"] == [0, 1, 2] and table["test"] == [3, 4, 5]
    assert table["counts"].tolist() == [3] * 6
    # The test transform normalises each channel as (x/255 - mean) / std; recompute the features directly.
    from dmlplug.data.transforms import build_transform

    transform = build_transform("test", augment="light", image_size=4)
    feats = []
    for source in (bundle.train, bundle.test):
        for i in range(len(source)):
            m = float(transform(source.load_image(i))[0].double().mean())
            feats.append([m, m * m])
    expected, _ = class_means(np.array(feats), np.repeat(np.arange(6), 3))
    np.testing.assert_allclose(table["means"], expected, rtol=1e-5)
    split_file = generate_splits("toy", bundle=bundle, backbone=MeanPixel(), extractor=spec, num_splits=2,
                                 swaps_per_iter=1, iterations=3, removal=False, shots=(1,), episodes=2)
    assert [s.id for s in split_file.splits] == [1, 2]
    assert split_file.splits[0].fid <= split_file.splits[1].fid
    assert split_file.info["backbone"] == "resnet50" and split_file.dataset == "toy"
    for split in split_file.splits:
        assert sorted(split.train + split.test) == list("abcdef")
        assert set(split.episodes[1][0]) == set(split.test)


def fake_sweep(root, results):
    """A sweep directory with given per-run metric histories: {(split, seed): [(epoch, {metric: value})]}."""
    fids = {1: 10.0, 2: 30.0, 3: 20.0}
    splits = [OodSplit(id=i, fid=f, train=[f"t{i}a", f"t{i}b"], test=[f"s{i}a", f"s{i}b"],
                       split_train=[f"t{i}a"], split_val=[f"t{i}b"], episodes={}) for i, f in fids.items()]
    save_splits(root / "splits.json", SplitFile(splits=splits))
    seeds = sorted({seed for _, seed in results})
    (root / "sweep.json").write_text(json.dumps({"seeds": seeds, "split_ids": [1, 2, 3]}))
    for (split, seed), history in results.items():
        run = run_directory(root, split, seed)
        run.mkdir(parents=True)
        lines = [json.dumps({"epoch": e, "split": "test", **m}) for e, m in history]
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (run / "results.json").write_text(json.dumps({"status": "completed", "metrics": history[-1][1],
                                                      "best_metrics": history[1][1]}))


def test_summary_statistics_and_ags_oracle(tmp_path):
    runs = {
        # Split 1: recall max over trained epochs 0.8 and 0.6 -> mean 0.7, sample std 0.14142.
        (1, 0): [(0, {"recall@1": 0.9}), (1, {"recall@1": 0.8}), (2, {"recall@1": 0.5})],
        (1, 1): [(0, {"recall@1": 0.1}), (1, {"recall@1": 0.4}), (2, {"recall@1": 0.6})],
        (3, 0): [(0, {"recall@1": 0.0}), (1, {"recall@1": 0.5}), (2, {"recall@1": 0.3})],
        (3, 1): [(0, {"recall@1": 0.0}), (1, {"recall@1": 0.5}), (2, {"recall@1": 0.5})],
        (2, 0): [(0, {"recall@1": 0.0}), (1, {"recall@1": 0.2}), (2, {"recall@1": 0.4})],
    }
    fake_sweep(tmp_path, runs)
    assert run_metrics(run_directory(tmp_path, 1, 0), "max") == {"recall@1": 0.8}
    assert run_metrics(run_directory(tmp_path, 1, 0), "final") == {"recall@1": 0.5}
    assert run_metrics(run_directory(tmp_path, 1, 0), "best") == {"recall@1": 0.8}
    summary = summarize_sweep(tmp_path)
    rows = {r.split_id: r for r in summary.rows}
    assert rows[1].mean("recall@1") == pytest.approx(0.7)
    assert rows[1].std("recall@1") == pytest.approx(np.std([0.8, 0.6], ddof=1))
    assert rows[3].std("recall@1") == 0.0 and rows[2].seeds == [0] and rows[2].std("recall@1") is None
    # FIDs 10, 20, 30 -> x 0, .5, 1; scores 0.7, 0.5, 0.4 -> trapezoids (0.6 + 0.45) / 2 = 0.525.
    assert summary.ags["recall@1"] == pytest.approx(0.525)
    assert summary.ags["recall@1"] == pytest.approx(ags([10, 30, 20], [0.7, 0.4, 0.5]))
    # The units of results.json and `dmlplug report`; one seed has no spread to show.
    lines = {line.split()[0]: line for line in summary.table().splitlines()}
    assert "0.7000 ± 0.1414" in lines["1"] and "0.5000 ± 0.0000" in lines["3"]
    assert lines["2"].rstrip().endswith(" 0.4000") and "±" not in lines["2"]
    assert lines["AGS"].rstrip().endswith("0.5250")
    assert summary.missing == [(2, 1)]
    files = write_outputs(summary, tensorboard=False)
    assert (tmp_path / "ags.png").stat().st_size > 1000 and tmp_path / "summary.json" in files
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["ags"]["recall@1"] == pytest.approx(0.525)
    assert {r["id"]: r["std"]["recall@1"] for r in saved["splits"]}[2] is None  # one seed: no std, not 0
    with pytest.raises(DataError, match="'map@1000' is not in the runs"):
        summarize_sweep(tmp_path, metrics=["map@1000"])


def test_report_and_summarize_read_the_same_best_of_runs_whose_untrained_model_won(tmp_path):
    """The audit's sweep: runs of an older dmlplug recorded the untrained model (epoch 0) as best; `dmlplug report`
    (best values) and `dmlplug oodml summarize` (max over trained epochs) then gave different AGS."""
    import tomli_w

    from dmlplug.plugins import get_host
    from dmlplug.report import build_report
    from dmlplug_builtins.oodml.report import group_fids, split_ags

    runs = {
        (1, 0): [(0, {"recall@1": 0.95}), (1, {"recall@1": 0.8}), (2, {"recall@1": 0.5})],
        (1, 1): [(0, {"recall@1": 0.1}), (1, {"recall@1": 0.4}), (2, {"recall@1": 0.6})],
        (2, 0): [(0, {"recall@1": 0.9}), (1, {"recall@1": 0.2}), (2, {"recall@1": 0.4})],
        (2, 1): [(0, {"recall@1": 0.0}), (1, {"recall@1": 0.3}), (2, {"recall@1": 0.3})],
        (3, 0): [(0, {"recall@1": 0.7}), (1, {"recall@1": 0.5}), (2, {"recall@1": 0.3})],
        (3, 1): [(0, {"recall@1": 0.0}), (1, {"recall@1": 0.5}), (2, {"recall@1": 0.5})],
    }
    fake_sweep(tmp_path, runs)
    for (split, seed), history in runs.items():
        run = run_directory(tmp_path, split, seed)
        best = max(range(len(history)), key=lambda e: (history[e][1]["recall@1"], -e))  # the old rule: epoch 0 too
        (run / "results.json").write_text(json.dumps({
            "status": "completed", "name": "sweep", "epochs_completed": 2, "metrics": history[-1][1],
            "best_metrics": history[best][1], "best_epoch": best}))
        recipe = {"run": {"name": "sweep", "seed": seed, "epochs": 2}, "evaluation": {"metric": "recall@1"},
                  "data": {"dataset": {"name": "oodml_split", "split_file": str(tmp_path / "splits.json"),
                                       "split_id": split, "part": "zero_shot", "dataset": {"name": "glyphs"}}}}
        (run / "recipe.resolved.toml").write_text(tomli_w.dumps(recipe))
    report = build_report(host=get_host(), paths=[tmp_path])
    reported = split_ags(report.groups, group_fids(report.groups), ["recall@1"])["recall@1"]
    best, most = (summarize_sweep(tmp_path, reduce=reduce).ags["recall@1"] for reduce in ("best", "max"))
    # Trained epochs only: split 1 (0.8 + 0.6) / 2, split 2 (0.4 + 0.3) / 2, split 3 (0.5 + 0.5) / 2.
    assert reported == best == most == pytest.approx(ags([10, 30, 20], [0.7, 0.35, 0.5]))
    assert [r.best_epoch for r in report.groups[0].runs] == [1, 2]


def test_a_run_selected_on_val_has_no_max_over_test_epochs_but_its_best(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"epoch": 0, "split": "test", "recall@1": 0.1}, {"epoch": 0, "split": "val", "recall@1": 0.2}]
    records += [{"epoch": e, "split": "val", "recall@1": v} for e, v in ((1, 0.5), (2, 0.7), (3, 0.6))]
    records += [{"epoch": 3, "split": "test", "recall@1": 0.45},
                {"epoch": 2, "split": "test", "report": "selected", "recall@1": 0.4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "results.json").write_text(json.dumps({
        "status": "completed", "selected_on": "val", "reported_on": "test", "best_epoch": 2,
        "best_metrics": {"recall@1": 0.4}, "metrics": {"recall@1": 0.45}, "selection_metrics": {"recall@1": 0.7}}))
    assert run_metrics(run, "best") == {"recall@1": 0.4} and run_metrics(run, "final") == {"recall@1": 0.45}
    with pytest.raises(DataError, match=r"test split at only some epochs \(not at \[1, 2\]\)") as info:
        run_metrics(run, "max")
    assert "report_curve" in info.value.fix
    # With the report split's curve (a test evaluation at every epoch), max is over the epochs again.
    curve = [r for r in records if "report" not in r] + [{"epoch": e, "split": "test", "recall@1": v}
                                                          for e, v in ((1, 0.3), (2, 0.4))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    assert run_metrics(run, "max") == {"recall@1": 0.45}


def test_sweep_skips_finished_runs_and_restarts_unfinished_ones(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    splits = [OodSplit(id=i, fid=float(i), train=["a", "b"], test=["c", "d"], split_train=["a"], split_val=["b"],
                       episodes={}) for i in (1, 2)]
    split_path = save_splits(tmp_path / "s.json", SplitFile(splits=splits))
    calls = []

    def runner(recipe_path, overrides, *, out, device, quiet):
        dataset = tomllib.loads(Path(recipe_path).read_text())["data"]["dataset"]
        assert dataset["name"] == "oodml_split" and dataset["dataset"]["name"] == "glyphs"
        assert dataset["split_file"] == str((sweep / "splits.json").resolve())
        assert overrides[:-1] == ["data.dataset.dataset.num_classes=40"]
        seed = int(overrides[-1].removeprefix("run.seed="))
        calls.append((dataset["split_id"], seed))
        Path(out).mkdir(parents=True)
        status = "failed" if (dataset["split_id"], seed) == (2, 1) else "completed"
        (Path(out) / "results.json").write_text(json.dumps({"status": status}))

    sweep = tmp_path / "sweep"
    # The toy class names a..d are not glyph classes: the data check (tested below) is off for the fake runner.
    lines = []
    report = run_sweep(recipe, split_path, seeds=[0, 1], sweep_dir=sweep, runner=runner, echo=lines.append,
                       overrides=["data.dataset.num_classes=40"], check_data=False)
    assert calls == [(1, 0), (1, 1), (2, 0), (2, 1)] and report.ran == calls and len(report.seconds) == 4
    finished = [line for line in lines if "finished in" in line]
    assert len(finished) == 4 and "s left" in finished[0] and "left" not in finished[-1]
    calls.clear()
    report = run_sweep(recipe, split_path, seeds=[0, 1], sweep_dir=sweep, runner=runner, echo=lambda _: None,
                       overrides=["data.dataset.num_classes=40"], check_data=False)
    assert calls == [(2, 1)] and report.restarted == [(2, 1)] and len(report.skipped) == 3
    with pytest.raises(RunError, match="different --part"):
        run_sweep(recipe, split_path, seeds=[0], sweep_dir=sweep, runner=runner, part="few_shot_base",
                  overrides=["data.dataset.num_classes=40"])
    recipe.write_text(TINY_RECIPE.replace("epochs = 1", "epochs = 2"))
    with pytest.raises(RunError, match="different recipe"):
        run_sweep(recipe, split_path, seeds=[0], sweep_dir=sweep, runner=runner)


def test_split_recipes_wrap_the_dataset_and_move_its_overrides(tmp_path):
    base = tomllib.loads(TINY_RECIPE)
    wrapped = split_recipe(base, tmp_path / "splits.json", 3, "few_shot_base")
    assert wrapped["data"]["dataset"] == {"name": "oodml_split", "split_file": str(tmp_path / "splits.json"),
                                          "split_id": 3, "part": "few_shot_base", "dataset": base["data"]["dataset"]}
    assert base["data"]["dataset"]["name"] == "glyphs"  # the base recipe is not changed
    assert wrapped_overrides(["data.dataset.root=/x", " data.dataset = {name = 'cub200'}", "data.batch_size=8",
                              "run.seed"]) == ["data.dataset.dataset.root=/x",
                                               "data.dataset.dataset= {name = 'cub200'}", "data.batch_size=8",
                                               "run.seed"]
    # A recipe that already selects a split cannot be swept (the sweep does the wrapping).
    recipe = tmp_path / "r.toml"
    import tomli_w

    recipe.write_text(tomli_w.dumps(wrapped))
    with pytest.raises(RunError, match="already selects an ooDML split"):
        run_sweep(recipe, tmp_path / "splits.json", sweep_dir=tmp_path / "sweep", runner=None)


@pytest.mark.skipif(not PUBLISHED_CARS.is_file(), reason="published CARS196 split file not available")
def test_published_cars_pickle_drives_class_splits_and_episodes():
    from dmlplug_builtins.oodml.fewshot import episode_indices

    published = load_published_pickle(PUBLISHED_CARS)
    split = published.by_id(8)
    # A stand-in CARS bundle: every class of the split, its support basenames plus one extra image each.
    classes = sorted(set(split.train) | set(split.test))
    paths, labels = [], []
    for label, cls in enumerate(classes):
        names = sorted({n for k in split.episodes for e in split.episodes[k].values() for n in e.get(cls, [])})
        for name in names + [f"extra_{label}.jpg"]:
            paths.append(f"/data/cars/{cls}/{name}")
            labels.append(label)

    class Files(ArraySource):
        def __init__(self, paths, labels, names, name):
            super().__init__(np.zeros((len(paths), 1, 1), np.uint8), labels, names, name)
            self.paths = paths

    half = len(classes) // 2
    is_train = np.isin(labels, np.arange(half))
    labels = np.asarray(labels)
    train_paths = [p for p, t in zip(paths, is_train, strict=True) if t]
    test_paths = [p for p, t in zip(paths, is_train, strict=True) if not t]
    bundle = DatasetBundle(train=Files(train_paths, labels[is_train], classes[:half], "cars/train"),
                           test=Files(test_paths, labels[~is_train] - half, classes[half:], "cars/test"))
    resplit = split_by_class_names(bundle, split.train, split.test)
    assert resplit.test.num_classes == 62 and resplit.train.num_classes == 62
    ids = image_ids(resplit.test)
    support, query = episode_indices(resplit.test.labels, resplit.test.class_names, ids, split.episodes[5][3])
    assert len(support) == 5 * 62 and len(query) == len(resplit.test) - 5 * 62


def test_oodml_cli_splits_run_summarize(tmp_path):
    """The complete chain on glyphs: 2 generated splits, one run each (with the few-shot evaluator on the
    split file's stored episodes), a rerun that skips them, and the summary with AGS and plot."""
    splits = tmp_path / "splits.json"
    result = run_cli("oodml", "splits", "--dataset", "glyphs", "--set", "dataset.num_classes=40",
                     "--set", "dataset.images_per_class=8", "--out", splits, "--num-splits", "2",
                     "--backbone", "resnet10t", "--image-size", "32", "--shots", "2", "--episodes", "2",
                     "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "random" in result.stderr  # random extractor weights are announced
    from dmlplug_builtins.oodml.splitfile import load_splits

    generated = load_splits(splits)
    assert [s.id for s in generated.splits] == [1, 2] and generated.info["backbone"] == "resnet10t"
    assert generated.splits[0].fid < generated.splits[1].fid

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE.replace(
        "[[loggers]]",
        '[[evaluators]]\nname = "map_at_1000"\n[[evaluators]]\nname = "fewshot"\nshots = [2]\nepisodes = 2\n'
        "batch_size = 16\niterations = {2 = 3}\n[evaluation]\ninitial = false\n[[loggers]]"))
    sweep = tmp_path / "sweep"
    result = run_cli("oodml", "run", recipe, "--splits", splits, "--seeds", "0", "--out", sweep, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "2 run(s) trained" in result.stdout
    for split in generated.splits:
        run = run_directory(sweep, split.id, 0)
        resolved = tomllib.loads((run / "recipe.resolved.toml").read_text())
        assert resolved["data"]["dataset"]["split_id"] == split.id and resolved["run"]["seed"] == 0
        assert resolved["data"]["dataset"]["dataset"]["name"] == "glyphs"
        results = json.loads((run / "results.json").read_text())
        assert results["status"] == "completed" and "fewshot/2shot/adapted/recall@1" in results["fewshot"]
        assert json.loads((run / "fewshot.json").read_text())["info"]["episodes_from"] == "split file"
    result = run_cli("oodml", "run", recipe, "--splits", splits, "--seeds", "0", "--out", sweep)
    assert result.returncode == 0 and "0 run(s) trained, 2 skipped" in result.stdout

    result = run_cli("oodml", "summarize", sweep)
    assert result.returncode == 0, result.stderr
    assert "AGS" in result.stdout and "recall@1" in result.stdout and "map@1000" in result.stdout
    summary = json.loads((sweep / "summary.json").read_text())
    means = [s["mean"]["recall@1"] for s in summary["splits"]]
    assert summary["ags"]["recall@1"] == pytest.approx(ags([s.fid for s in generated.splits], means))
    assert (sweep / "ags.png").is_file() and any((sweep / "tb").iterdir())


def test_splits_from_a_trained_run_use_its_backbone_and_test_transform(tmp_path):
    """`--extractor-run`: the class means are those of the run's own backbone on its test transform (oracle:
    the features recomputed through `dmlplug.load_run`), and the split file names the checkpoint by hash."""
    import hashlib

    import dmlplug
    from dmlplug_builtins.oodml.features import ExtractorSpec, build_extractor, dataset_class_means, generate_splits
    from dmlplug_builtins.oodml.swapping import class_means

    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    run_dir = tmp_path / "extractor"
    dmlplug.run(recipe, ["data.dataset.num_classes=24", "data.dataset.images_per_class=4",
                         'data.dataset.families=["braille", "arrows"]'], out=run_dir, device="cpu", quiet=True)
    study = dmlplug.create("dataset", "glyphs", num_classes=20, images_per_class=4, families=["greek", "lao"])
    spec = ExtractorSpec(run=str(run_dir), batch_size=7)
    extractor = build_extractor(spec)
    table = dataset_class_means(study, extractor.backbone, spec, transform=extractor.transform)

    loaded = dmlplug.load_run(run_dir)
    features, labels = [], []
    with torch.no_grad():
        for offset, source in ((0, study.train), (study.train.num_classes, study.test)):
            for i in range(len(source)):
                image = loaded.test_transform(source.load_image(i))[None]
                features.append(loaded.model.backbone(image)[0][0].double().numpy())
                labels.append(offset + int(source.labels[i]))
    expected, _ = class_means(np.array(features), np.array(labels))
    np.testing.assert_allclose(table["means"], expected, rtol=1e-4, atol=1e-6)

    split_file = generate_splits("glyphs", extractor=spec, bundle=study, num_splits=2, swaps_per_iter=1,
                                 iterations=3, removal=False, shots=(1,), episodes=1)
    info = split_file.info
    assert info["backbone"] == "run" and info["extractor_checkpoint"] == "best.pt"
    checkpoint = run_dir / "checkpoints" / "best.pt"
    assert info["extractor_checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()


def test_splits_refuse_two_sources_of_extractor_weights(tmp_path):
    result = run_cli("oodml", "splits", "--dataset", "glyphs", "--out", tmp_path / "s.json",
                     "--extractor-run", tmp_path, "--weights", tmp_path / "w.pth")
    assert result.returncode != 0 and "--extractor-run and --weights" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "s.json").exists()


def test_a_split_the_sampler_cannot_fill_stops_the_sweep_before_any_run(tmp_path):
    """Found by the glyph study: split 2 of a small dataset had 15 training classes, fewer than the 16 a batch of 32
    with m = 2 needs, and the sweep failed only after the runs of split 1. Now no run starts."""
    import dmlplug

    bundle = dmlplug.create("dataset", "glyphs", num_classes=40, images_per_class=8)
    names = bundle.train.class_names + bundle.test.class_names
    splits = [OodSplit(id=1, fid=1.0, train=names[:20], test=names[20:], split_train=names[:15],
                       split_val=names[15:20], episodes={}),
              OodSplit(id=2, fid=2.0, train=names[:15], test=names[15:], split_train=names[:11],
                       split_val=names[11:15], episodes={})]
    split_path = save_splits(tmp_path / "s.json", SplitFile(splits=splits))
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE.replace("m = 4", "m = 2"))
    ran = []
    with pytest.raises(Exception) as caught:
        run_sweep(recipe, split_path, seeds=[0], sweep_dir=tmp_path / "sweep", echo=lambda _: None,
                  overrides=["data.dataset.num_classes=40", "data.dataset.images_per_class=8"],
                  runner=lambda *args, **kwargs: ran.append(args))
    message = str(caught.value)
    assert "split 2 cannot be trained" in message and "needs 16 distinct classes per batch" in message
    assert "fix:" in message and ran == [] and not (tmp_path / "sweep").exists()  # a fixed --set can reuse --out


def test_the_sweep_validates_the_wrapped_recipes_before_making_its_directory(tmp_path):
    """Found by the glyph study: `--part few_shot_base --set evaluation.split=val` (the documented few-shot base
    sweep) was refused because the plain recipe, not the wrapped one, was validated. `split` is the former name of
    `select_on`, still accepted."""
    splits = [OodSplit(id=1, fid=1.0, train=["a", "b"], test=["c", "d"], split_train=["a"], split_val=["b"],
                       episodes={})]
    split_path = save_splits(tmp_path / "s.json", SplitFile(splits=splits))
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    ran = []

    def runner(recipe_path, overrides, *, out, device, quiet):
        ran.append(overrides)
        Path(out).mkdir(parents=True)
        (Path(out) / "results.json").write_text(json.dumps({"status": "completed"}))

    run_sweep(recipe, split_path, seeds=[0], sweep_dir=tmp_path / "base", part="few_shot_base", runner=runner,
              overrides=["evaluation.select_on=val"], check_data=False, echo=lambda _: None)
    assert ran == [["evaluation.select_on=val", "run.seed=0"]]
    from dmlplug.errors import RecipeError

    # no validation split (named either way); an invalid value
    for overrides in (["evaluation.select_on=val"], ["evaluation.split=val"], ["data.batch_size=0"]):
        with pytest.raises(RecipeError):
            run_sweep(recipe, split_path, seeds=[0], sweep_dir=tmp_path / "zero", runner=runner,
                      overrides=overrides, check_data=False, echo=lambda _: None)
        assert not (tmp_path / "zero").exists()  # nothing written: the same --out stays usable
