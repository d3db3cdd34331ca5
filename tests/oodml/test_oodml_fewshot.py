"""Few-shot adaptation (docs/fewshot.md): episodes, batches, head adaptation, cached features, weights untouched."""

import copy

import numpy as np
import pytest
import torch
from e2e import TINY_RECIPE, run_cli

from dmlplug.data import ArraySource
from dmlplug.errors import DataError
from dmlplug_builtins.oodml import FewShotSettings
from dmlplug_builtins.oodml.adaptation import adapt_head, class_random_batches, embed_features
from dmlplug_builtins.oodml.fewshot import episode_indices, retrieval_metrics, run_fewshot

pytestmark = pytest.mark.usefixtures("single_thread")


def test_episode_indices_split_support_and_queries():
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    ids = ["a", "b", "c", "a", "d", "e", "f"]  # ids are unique within a class only
    support, query = episode_indices(labels, ["x", "y"], ids, {"x": ["b"], "y": ["a", "f"]})
    assert support.tolist() == [1, 3, 6]
    assert query.tolist() == [0, 2, 4, 5]
    # Dataset-relative paths match stored basenames.
    support, _ = episode_indices(labels, ["x", "y"], [f"dir/{i}" for i in ids], {"x": ["c"], "y": ["d"]})
    assert support.tolist() == [2, 4]


def test_episode_indices_errors():
    labels, ids = np.array([0, 0, 1, 1]), ["a", "b", "c", "d"]
    with pytest.raises(DataError, match="no support images for test class 'y'"):
        episode_indices(labels, ["x", "y"], ids, {"x": ["a"]})
    with pytest.raises(DataError, match="'zz' is not an image of class 'x'"):
        episode_indices(labels, ["x", "y"], ids, {"x": ["zz"], "y": ["c"]})
    with pytest.raises(DataError, match="no query image left"):
        episode_indices(labels, ["x", "y"], ids, {"x": ["a", "b"], "y": ["c"]})


def test_class_random_batches_draw_distinct_classes_and_pairs():
    labels = np.repeat(np.arange(10), 5)
    rng = np.random.default_rng(0)
    for _ in range(20):
        batch = class_random_batches(labels, 8, 2, rng)
        counts = np.bincount(labels[batch], minlength=10)
        assert len(batch) == 8 and len(set(batch.tolist())) == 8
        assert sorted(set(counts.tolist())) == [0, 2] and (counts == 2).sum() == 4
    # Fewer classes than the batch asks for: every class, all of its (two) images.
    small = np.array([0, 0, 1, 1])
    assert sorted(class_random_batches(small, 112, 2, rng).tolist()) == [0, 1, 2, 3]


def clustered_features(classes=6, per_class=10, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    features = centres[labels] + 0.25 * rng.normal(0, 1, (len(labels), dim))
    return torch.tensor(features, dtype=torch.float32), labels


class NormalizedLinear(torch.nn.Module):
    def __init__(self, dim, out):
        super().__init__()
        self.fc = torch.nn.Linear(dim, out)

    def forward(self, x):
        return torch.nn.functional.normalize(self.fc(x), dim=1)


def test_adaptation_improves_a_bad_head_and_leaves_the_original_alone():
    # Classes are well separated in feature space, but a 2-d head squeezes them together: adapting the head
    # on three support images per class must raise recall@1 on the other images, far above zero-shot.
    torch.manual_seed(0)
    features, labels = clustered_features()
    head = NormalizedLinear(features.shape[1], 2)
    before = copy.deepcopy(head.state_dict())
    support = np.concatenate([np.flatnonzero(labels == c)[:3] for c in range(6)])
    query = np.setdiff1d(np.arange(len(labels)), support)
    settings = FewShotSettings(lr=3e-2, batch_size=18)
    state = torch.get_rng_state()
    adapted, losses = adapt_head(head, features[support], labels[support], settings, 150, seed=1)
    assert torch.equal(torch.get_rng_state(), state), "adaptation must not disturb the caller's generator"
    for key, value in head.state_dict().items():
        assert torch.equal(value, before[key]), "the original head changed"
    zero = retrieval_metrics(embed_features(head, features[query]), labels[query])["recall@1"]
    tuned = retrieval_metrics(embed_features(adapted, features[query]), labels[query])["recall@1"]
    assert tuned >= 0.9 and tuned > zero + 0.2, (zero, tuned)
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    again, _ = adapt_head(head, features[support], labels[support], settings, 150, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), adapted.state_dict().values(),
                                                     strict=True)), "same seed, same adaptation"


class CountingBackbone(torch.nn.Module):
    """Pooled 'features' = a fixed random projection of the image; counts forward calls and images."""

    num_features = 12

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3 * 8 * 8, self.num_features)
        self.calls = 0
        self.images = 0

    def forward(self, images):
        self.calls += 1
        self.images += len(images)
        return self.proj(images.flatten(1)), None


def tiny_model():
    from dmlplug.engine.model import EmbeddingModel

    torch.manual_seed(0)
    return EmbeddingModel(CountingBackbone(), NormalizedLinear(CountingBackbone.num_features, 4))


def to_tensor(image):
    return torch.tensor(np.asarray(image), dtype=torch.float32).permute(2, 0, 1) / 255.0


def test_backbone_runs_once_per_image_and_model_is_untouched():
    rng = np.random.default_rng(0)
    source = ArraySource(rng.integers(0, 255, (48, 8, 8, 3), dtype=np.uint8), np.repeat(np.arange(6), 8),
                         [f"c{i}" for i in range(6)], name="toy/test")
    model = tiny_model()
    before = copy.deepcopy(model.state_dict())
    settings = FewShotSettings(shots=[2, 5], episodes=3, iterations={2: 7, 5: 4}, batch_size=8)
    report = run_fewshot(model, source, to_tensor, settings, eval_batch_size=16)
    # 48 images in batches of 16: three backbone calls in total, whatever the episodes and iterations.
    assert model.backbone.calls == 3 and model.backbone.images == 48
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} changed"
    assert sorted(report.summary) == [2, 5]
    for k, rows in report.episodes.items():
        assert len(rows) == 3
        assert all(r["support"] == 6 * k and r["queries"] == 48 - 6 * k for r in rows)
    stats = report.summary[2]["adapted"]["recall@1"]
    values = [r["adapted"]["recall@1"] for r in report.episodes[2]]
    assert stats["mean"] == pytest.approx(np.mean(values))
    assert stats["ci"] == pytest.approx(np.std(values, ddof=1) / np.sqrt(3) * 4.302652729911275, rel=1e-6)
    assert "fewshot/5shot/zero_shot/map@1000" in report.flat_metrics()


def test_missing_shot_count_in_stored_episodes():
    source = ArraySource(np.zeros((12, 8, 8, 3), dtype=np.uint8), np.repeat(np.arange(3), 4), ["a", "b", "c"])
    episodes = {2: {0: {"a": ["img00000", "img00001"], "b": ["img00000", "img00001"],
                        "c": ["img00002", "img00003"]}}}
    with pytest.raises(DataError, match="no 5-shot episodes"):
        run_fewshot(tiny_model(), source, to_tensor, FewShotSettings(shots=[2, 5], episodes=1), episodes=episodes)
    with pytest.raises(DataError, match="positive pair"):
        run_fewshot(tiny_model(), source, to_tensor, FewShotSettings(shots=[1], episodes=1))


def test_fewshot_command_end_to_end(tmp_path):
    import json
    import tomllib

    import dmlplug

    run_dir = tmp_path / "run"
    recipe = tomllib.loads(TINY_RECIPE)
    recipe["evaluation"] = {"initial": False}
    assert dmlplug.run(recipe, out=run_dir, quiet=True).status == "completed"
    checkpoint = run_dir / "checkpoints" / "best.pt"
    weights = checkpoint.read_bytes()
    result = run_cli("fewshot", run_dir, "--shots", "2,5", "--episodes", "2", "--iterations", "2=5,5=3",
                     "--batch-size", "16", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "zero-shot" in result.stdout and "recall@1" in result.stdout
    assert checkpoint.read_bytes() == weights, "the run's checkpoint must not change"
    report = json.loads((run_dir / "fewshot.json").read_text())
    assert sorted(report["summary"]) == ["2", "5"]
    assert report["info"]["episodes_from"].startswith("sampled")
    assert len(report["episodes"]["5"]) == 2
    with pytest.raises(DataError, match="no run directory or checkpoint"):
        dmlplug.load_run(tmp_path / "nowhere")
    missing = run_cli("fewshot", tmp_path / "nowhere")
    assert missing.returncode == 2 and "no run directory or checkpoint" in missing.stderr


def test_fewshot_evaluator_refuses_saved_embeddings():
    from dmlplug import BuildContext
    from dmlplug.errors import ComponentError
    from dmlplug.evaluation import EvalContext
    from dmlplug.plugins import get_host

    info = get_host().registry.get("evaluators", "fewshot")
    evaluator = info.build(info.validate({"shots": [2]}, where="test"), BuildContext())
    with pytest.raises(ComponentError, match="cannot evaluate saved embeddings"):
        evaluator.evaluate(EvalContext(np.eye(4, dtype=np.float32), np.array([0, 0, 1, 1])))


def test_the_report_table_uses_report_units_and_no_interval_for_one_episode():
    from dmlplug_builtins.oodml.fewshot import FewShotReport

    stats = {"recall@1": {"mean": 0.61234, "ci": 0.0456, "values": [0.6, 0.62468]},
             "map@1000": {"mean": 0.5, "ci": float("nan"), "values": [0.5]}}
    report = FewShotReport(summary={2: {"zero_shot": stats, "adapted": stats}})
    recall, map_line = report.table().splitlines()[1:]
    assert recall.split()[-3:] == ["0.6123", "±", "0.0456"] and "61.23" not in recall
    assert map_line.split()[-2:] == ["0.5000", "0.5000"]  # one episode: a mean, no "± nan"


def test_the_fewshot_evaluator_of_a_quiet_run_prints_no_table():
    from dmlplug.context import BuildContext
    from dmlplug_builtins.oodml import FewShotParams, build_fewshot

    assert build_fewshot(FewShotParams(), BuildContext(quiet=True)).quiet is True
    assert build_fewshot(FewShotParams(), BuildContext()).quiet is False
