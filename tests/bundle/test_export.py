"""dmlplug export: bundle.json tells the truth, the exported model embeds like PyTorch, failures write nothing."""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
import pytest
import torch
from e2e import BUNDLE_RUN_SETS as SETS

import dmlplug
from dmlplug.bundle.errors import BundleError


def _manifest(bundle):
    return json.loads((bundle / "bundle.json").read_text())


def _run_embeddings(run_dir, count):
    loaded = dmlplug.load_run(run_dir)
    images = torch.stack([loaded.test_transform(loaded.dataset.test.load_image(i)) for i in range(count)])
    return loaded.model.embed(images).numpy(), loaded


def test_bundle_json_records_source_preprocessing_and_model(run_dir, onnx_bundle):
    manifest = _manifest(onnx_bundle)
    checkpoint = run_dir / "checkpoints" / "best.pt"
    assert manifest["format"] == "dmlplug-bundle" and manifest["dmlplug_version"] == dmlplug.__version__
    assert manifest["source"]["checkpoint"] == str(checkpoint.resolve())
    assert manifest["source"]["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert manifest["model"]["file"] == "model.onnx"
    model = (onnx_bundle / "model.onnx").read_bytes()
    assert manifest["model"]["sha256"] == hashlib.sha256(model).hexdigest() and manifest["model"]["size"] == len(model)
    state = torch.load(checkpoint, weights_only=False)
    assert (manifest["source"]["epoch"], manifest["source"]["step"]) == (state["epoch"], state["step"]) == (1, 4)
    size = int(next(s for s in SETS if s.startswith("head.embedding_size")).split("=")[1])
    assert manifest["embedding_size"] == size and manifest["similarity"] == "cosine"
    # The tiny recipe: image_size 32, glyphs -> "light" augmentation -> test transform = resize to 32×32.
    pre = manifest["preprocessing"]
    assert manifest["input_size"] == pre["input_size"] == [3, 32, 32]
    assert pre["resize"] == [32, 32] and pre["crop"] is None
    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    assert pre["mean"] == list(IMAGENET_MEAN) and pre["std"] == list(IMAGENET_STD)
    from dmlplug.bundle.preprocess import describe_transform

    assert pre == describe_transform(dmlplug.load_run(run_dir).test_transform)


def _calibration_split(run_dir):
    """The run's calibration split (its test split: the tiny run has no validation split) and its labels."""
    loaded = dmlplug.load_run(run_dir)
    assert loaded.dataset.val is None
    return loaded, [loaded.dataset.test.load_image(i) for i in range(len(loaded.dataset.test))], \
        np.asarray(loaded.dataset.test.labels)


def test_thresholds_are_the_calibration_of_the_bundles_own_embeddings(run_dir, onnx_bundle):
    from dmlplug.bundle.calibrate import calibrate_loaded, calibrate_run

    manifest = _manifest(onnx_bundle)
    bundle = dmlplug.load_bundle(onnx_bundle)
    loaded, _, _ = _calibration_split(run_dir)
    expected = calibrate_loaded(loaded, runner=bundle.runner).to_dict()
    assert manifest["calibration"] == json.loads(json.dumps(expected))
    values = manifest["thresholds"]["values"]
    assert values == {**{f"far@{t['target_far']:g}": t["threshold"] for t in expected["thresholds"]},
                      "max_f1": expected["max_f1"]["threshold"]}
    assert manifest["thresholds"]["default"] == "far@0.001"
    assert bundle.threshold == values["far@0.001"]
    # PyTorch's calibration (`dmlplug calibrate`) differs only by the rounding of the exported model.
    pytorch = calibrate_run(run_dir).to_dict()
    for ours, theirs in zip(expected["thresholds"], pytorch["thresholds"], strict=True):
        assert abs(ours["threshold"] - theirs["threshold"]) <= 1e-4


def test_the_bundles_far_holds_for_its_float32_search_scores(run_dir, onnx_bundle):
    """Brute force over every pair of the calibration split, embedded by the bundle and scored by its exact index
    (faiss, float32) as `search` scores: no FAR threshold accepts more negative pairs than its target allows."""
    bundle = dmlplug.load_bundle(onnx_bundle)
    _, images, labels = _calibration_split(run_dir)
    vectors = bundle.embed(images)
    index = bundle.build_index(images, paths=[str(i) for i in range(len(images))])
    sims, rows = index.search(vectors, len(images))
    assert sims.dtype == np.float32
    scores = np.empty((len(images), len(images)), np.float32)
    for i in range(len(images)):
        scores[i, rows[i]] = sims[i]
    i, j = np.triu_indices(len(labels), k=1)
    negative = scores[i, j][labels[i] != labels[j]]
    for row in _manifest(onnx_bundle)["calibration"]["thresholds"]:
        allowed = int(np.floor(row["target_far"] * len(negative) + 1e-9))
        assert np.count_nonzero(negative >= row["threshold"]) <= allowed
        assert np.count_nonzero(negative.astype(np.float64) >= row["threshold"]) <= allowed


def test_verification_matches_the_runs_own_evaluation(run_dir, onnx_bundle):
    check = _manifest(onnx_bundle)["verification"]
    results = json.loads((run_dir / "results.json").read_text())
    test_size = len(dmlplug.load_run(run_dir).dataset.test)
    # The default 256 images cover the whole (small) test split, so PyTorch's recall@1 is the run's own.
    assert check["images"] == test_size
    assert check["recall@1_pytorch"] == pytest.approx(results["best_metrics"]["recall@1"])
    assert check["recall@1_exported"] == pytest.approx(check["recall@1_pytorch"])
    assert check["max_abs_diff"] <= check["tolerance"] == 1e-4


@pytest.mark.parametrize("fixture", ["onnx_bundle", "torchscript_bundle"])
def test_bundle_embeds_like_the_run_model(run_dir, fixture, request):
    bundle_dir = request.getfixturevalue(fixture)
    reference, loaded = _run_embeddings(run_dir, 12)
    bundle = dmlplug.load_bundle(bundle_dir)
    got = bundle.embed([loaded.dataset.test.load_image(i) for i in range(12)], batch_size=5)
    assert got.shape == reference.shape
    tolerance = _manifest(bundle_dir)["verification"]["tolerance"]
    assert np.abs(got - reference).max() <= tolerance
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_torchscript_bundle_has_model_pt_and_no_thresholds(torchscript_bundle):
    manifest = _manifest(torchscript_bundle)
    assert manifest["model"]["format"] == "torchscript" and (torchscript_bundle / "model.pt").is_file()
    assert not (torchscript_bundle / "model.onnx").exists()
    assert manifest["thresholds"] == {} and manifest["calibration"] is None
    assert dmlplug.load_bundle(torchscript_bundle).threshold is None


def test_a_model_that_embeds_differently_fails_and_writes_nothing(run_dir, tmp_path, monkeypatch):
    from dmlplug.bundle import export

    real = export._write_model

    def corrupted(*args, **kwargs):
        runner = real(*args, **kwargs)
        return lambda batch: runner(batch) + 1e-2  # a wrong graph: every coordinate off by 0.01

    monkeypatch.setattr(export, "_write_model", corrupted)
    out = tmp_path / "parent" / "bundle"
    with pytest.raises(BundleError, match=r"does not embed like the PyTorch model: max \|Δ embedding\| = 0\.01"):
        dmlplug.export(run_dir, out, format="torchscript", calibrate=False, images=16)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_tolerance_zero_fails_unless_the_export_is_bit_exact(run_dir, tmp_path):
    out = tmp_path / "bundle"
    try:
        manifest = dmlplug.export(run_dir, out, calibrate=False, images=16, tolerance=0.0)
    except BundleError as exc:
        assert "exceeds the tolerance 0" in str(exc) and not out.exists()
    else:
        assert manifest["verification"]["max_abs_diff"] == 0.0


def test_missing_onnx_says_what_to_install(run_dir, onnx_bundle, tmp_path, monkeypatch, cli):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    with pytest.raises(BundleError, match=r'(?s)onnxruntime.*pip install "dmlplug\[export\]"'):
        dmlplug.export(run_dir, tmp_path / "b")
    code, _, err = cli("export", run_dir, "--out", tmp_path / "c")
    assert code == 2 and 'pip install "dmlplug[export]"' in err and "--format torchscript" in err
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    with pytest.raises(BundleError, match="onnxruntime"):
        dmlplug.load_bundle(onnx_bundle)


def test_export_refuses_a_folder_that_is_not_empty(run_dir, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(BundleError, match="already exists"):
        dmlplug.export(run_dir, out, format="torchscript", calibrate=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_cli_export_prints_verification_and_thresholds(run_dir, tmp_path, cli):
    code, out, err = cli("export", run_dir, "--out", tmp_path / "b", "--format", "torchscript", "--images", "8")
    assert code == 0, err
    manifest = _manifest(tmp_path / "b")
    assert manifest["verification"]["images"] == 8
    assert "verified on 8 test images" in out and "search accepts at far@0.001" in out
    assert "Threshold calibration" in err  # the calibration table goes to stderr with the progress messages
