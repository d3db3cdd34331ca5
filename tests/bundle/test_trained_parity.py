"""Export parity on a TRAINED quickstart run (docs/deploy.md's shrunk quickstart, really trained): the ONNX
bundle embeds the whole test split like PyTorch and has the run's own recall@1."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow

#: "Trained": recall@1 at least this much above the untrained model's (20 of the 400 test queries).
LEARNED = 0.05


def _recall_at_1(embeddings, labels, seed):
    import dmlplug

    return dmlplug.evaluate(embeddings, labels, [{"name": "recall", "k": [1]}], seed=seed)["recall@1"]


def test_the_run_is_trained(trained_run):
    results = json.loads((trained_run[0] / "results.json").read_text())
    assert results["best_metrics"]["recall@1"] >= results["initial_metrics"]["recall@1"] + LEARNED


def test_onnx_bundle_embeds_like_pytorch_with_the_same_recall_at_1(trained_run, trained_evaluation):
    import dmlplug

    run_dir, bundle_dir = trained_run
    reference, labels, loaded = trained_evaluation
    test = loaded.dataset.test
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    assert manifest["model"]["format"] == "onnx"
    exported = dmlplug.load_bundle(bundle_dir).embed([test.load_image(i) for i in range(len(test))])
    assert exported.shape == reference.shape
    assert float(np.abs(exported - reference).max()) <= manifest["verification"]["tolerance"]
    seed = loaded.recipe.run.seed
    pytorch, onnx = _recall_at_1(reference, labels, seed), _recall_at_1(exported, labels, seed)
    # Oracle: PyTorch's recall@1 here is the run's own evaluation of best.pt (exactly so when the run evaluated
    # on the CPU as this test does; a GPU's TF32 convolutions may flip a near-tie query).
    best = json.loads((run_dir / "results.json").read_text())["best_metrics"]["recall@1"]
    on_cpu = json.loads((run_dir / "environment.json").read_text())["device"] == "cpu"
    assert pytorch == pytest.approx(best, abs=1e-12 if on_cpu else 1 / len(test) + 1e-12)
    assert abs(onnx - pytorch) <= 1 / len(test) + 1e-12  # at most one query flips on a float32 near-tie


def test_export_recorded_its_own_parity_check(trained_run, trained_evaluation):
    _, bundle_dir = trained_run
    check = json.loads((bundle_dir / "bundle.json").read_text())["verification"]
    assert check["images"] == min(256, len(trained_evaluation[1]))
    assert check["max_abs_diff"] <= check["tolerance"] == 1e-4
    assert abs(check["recall@1_exported"] - check["recall@1_pytorch"]) <= 1 / check["images"] + 1e-12
