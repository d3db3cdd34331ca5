"""Few-shot adaptation of a trained embedding model (ooDML protocol, METHODS §6).

For every episode: ``k`` support images per test class, the remaining test images are the queries.
The model is evaluated zero-shot on the queries; then a *copy* of its embedding head is trained on the
support images (Margin loss with distance-weighted mining, Adam) and evaluated on the same queries.

The backbone is never trained here, so its pooled features of every test image are computed once
(:func:`backbone_features`) and reused by every iteration and every episode: only the head runs during
adaptation. This is also why support images go through the *test* transform, not the training
augmentation of the reference code (a cached feature cannot be re-augmented).

torch is imported inside the functions, so plugins can import :class:`FewShotSettings` at start-up.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, field_validator

from dmlplug.errors import DataError
from dmlplug.params import Params

if TYPE_CHECKING:
    import torch

#: Metrics reported per episode (keys of :class:`dmlplug.evaluation.retrieval.RetrievalEvaluator`).
METRIC_SPECS: tuple[tuple[str, Any], ...] = (
    ("recall", 1), ("map_k", (1000, "standard")), ("map_k", (1000, "revisiting")),
)


class FewShotSettings(Params):
    """How episodes are adapted (defaults: METHODS §6, the ooDML few-shot tables)."""

    shots: list[int] = Field(default_factory=lambda: [2, 5], description="Support images per test class.")
    episodes: int = Field(10, ge=1, description="Episodes per shot count (the first N of a split file).")
    iterations: dict[int, int] = Field(
        default_factory=lambda: {2: 1000, 5: 1500},
        description="Adaptation iterations per shot count (ooDML: 1000 for 2-shot, 1500 for 5-shot).")
    default_iterations: int = Field(1000, ge=0, description="Iterations for shot counts not in `iterations`.")
    lr: float = Field(1e-4, gt=0, description="Adam learning rate of the head (ooDML: 10 × 1e-5).")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay (ooDML: none).")
    batch_size: int = Field(112, ge=2, description="Support images per adaptation batch (ooDML: 112).")
    samples_per_class: int = Field(2, ge=2, description="Images per class in a batch (class-random SPC-2).")
    margin: float = Field(0.2, gt=0, description="Margin loss α.")
    beta: float = Field(1.2, gt=0, description="Margin loss β, fixed during adaptation (ooDML: β₀ = 1.2).")
    lower_cutoff: float = Field(0.5, gt=0, description="Distance-weighted miner's lower distance cut-off λ.")
    seed: int = Field(0, ge=0, description="Seed of the batches and the miner (reseeded per episode).")
    confidence: float = Field(0.95, gt=0, lt=1, description="Level of the reported confidence interval.")
    cpu_threads: int = Field(1, ge=0, description="torch CPU threads while adapting (0: leave as is).")

    @field_validator("shots")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(k < 1 for k in value):
            raise ValueError("give at least one shot count, each >= 1")
        return sorted(set(value))

    def iterations_for(self, shots: int) -> int:
        """Adaptation iterations for ``shots``-shot episodes."""
        return int(self.iterations.get(shots, self.default_iterations))


# ---------------------------------------------------------------------------------------------- features


def backbone_features(model: Any, source: Any, transform: Any, *, batch_size: int = 256, device: str = "cpu",
                      workers: int = 0) -> torch.Tensor:
    """Pooled backbone features of every image of ``source`` (eval mode, no gradients), on ``device``.

    Args:
        model: An :class:`~dmlplug.engine.model.EmbeddingModel` (only ``model.backbone`` is run).
        source: An :class:`~dmlplug.data.base.ImageSource`.
        transform: Image transform (the test transform).
        batch_size: Images per forward pass.
        device: Where the backbone runs and the features stay.
        workers: DataLoader workers.

    Returns:
        ``N×F`` float32 tensor, rows in source order.
    """
    import torch

    from dmlplug.engine.data import TransformedSource, eval_loader

    backbone = model.backbone
    was_training = backbone.training
    backbone.eval()
    chunks = []
    try:
        loader = eval_loader(TransformedSource(source, transform), batch_size=batch_size, workers=workers,
                             device=device)
        with torch.no_grad():
            for images, _, _ in loader:
                features, _ = backbone(images.to(device, non_blocking=True))
                chunks.append(features.float())
    finally:
        backbone.train(was_training)
    return torch.cat(chunks)


def head_embedding(head: Any, features: torch.Tensor) -> torch.Tensor:
    """The evaluation embedding the head gives for ``features`` (multi-heads: their weighted concat)."""
    out = head(features)
    if isinstance(out, dict):
        return head.eval_embedding(out)
    return out


def embed_features(head: Any, features: torch.Tensor, batch_size: int = 4096) -> np.ndarray:
    """Head embeddings of cached features in eval mode, as a float32 numpy array."""
    import torch

    was_training = head.training
    head.eval()
    try:
        with torch.no_grad():
            parts = [head_embedding(head, features[i:i + batch_size]).float().cpu()
                     for i in range(0, len(features), batch_size)]
    finally:
        head.train(was_training)
    return torch.cat(parts).numpy()


# ---------------------------------------------------------------------------------------------- episodes


def episode_indices(labels: np.ndarray, class_names: Sequence[str], ids: Sequence[str],
                    support: Mapping[str, Sequence[str]], *, where: str = "episode") -> tuple[np.ndarray, np.ndarray]:
    """Positions of the support and query images of one episode in the test split.

    Args:
        labels: Test labels.
        class_names: Test class names (``class_names[label]``).
        ids: Image id of every test image (:func:`dmlplug.data.splits.image_ids`).
        support: Class name -> support image ids (must cover every test class).
        where: Names the episode in messages.

    Returns:
        ``(support, query)`` sorted int64 positions; queries are every other image of the test classes.

    Raises:
        DataError: A test class has no support entry, a support id is not an image of its class, or a
            class would be left without a query image.
    """
    labels = np.asarray(labels)
    lookup: dict[tuple[int, str], int] = {}
    for pos, (label, image_id) in enumerate(zip(labels.tolist(), ids, strict=True)):
        lookup[(label, str(image_id))] = pos
        lookup.setdefault((label, str(image_id).replace("\\", "/").rsplit("/", 1)[-1]), pos)
    index = {name: i for i, name in enumerate(class_names)}
    missing = [c for c in class_names if c not in support]
    if missing:
        raise DataError(f"{where}: no support images for test class {missing[0]!r} ({len(missing)} classes)",
                        fix="use the split file the model was trained with, or let dmlplug sample episodes")
    chosen = []
    for cls, image_ids in support.items():
        if cls not in index:
            continue  # a class outside the evaluated test split (e.g. the file lists more) is ignored
        for image_id in image_ids:
            pos = lookup.get((index[cls], str(image_id)))
            if pos is None:
                raise DataError(f"{where}: support image {image_id!r} is not an image of class {cls!r}",
                                fix="check that the split file belongs to this dataset (image ids are file "
                                    "basenames, or img<k> for in-memory datasets)")
            chosen.append(pos)
    support_pos = np.unique(np.asarray(chosen, dtype=np.int64))
    is_query = np.ones(len(labels), dtype=bool)
    is_query[support_pos] = False
    left = np.bincount(labels[is_query], minlength=len(class_names))
    if (left == 0).any():
        cls = class_names[int(np.argmin(left))]
        raise DataError(f"{where}: class {cls!r} has no query image left after taking its support images",
                        fix="use fewer shots")
    return support_pos, np.flatnonzero(is_query)


def sampled_episodes(labels: np.ndarray, class_names: Sequence[str], ids: Sequence[str], settings: FewShotSettings
                     ) -> dict[int, dict[int, dict[str, list[str]]]]:
    """Episodes drawn from the test split itself (when no split file provides them)."""
    from dmlplug.oodml.episodes import sample_episodes

    by_class: dict[str, list[str]] = {}
    for label, image_id in zip(np.asarray(labels).tolist(), ids, strict=True):
        by_class.setdefault(class_names[label], []).append(str(image_id))
    return sample_episodes(by_class, shots=settings.shots, episodes=settings.episodes, seed=settings.seed)


# ---------------------------------------------------------------------------------------------- adaptation


def class_random_batches(labels: np.ndarray, batch_size: int, samples_per_class: int,
                         rng: np.random.Generator, members: list[np.ndarray] | None = None) -> np.ndarray:
    """One class-random batch: up to ``batch_size // samples_per_class`` classes, that many images each.

    Classes are drawn without replacement; a class with fewer support images gives all of them.
    ``members`` (positions of every class's images, from :func:`class_members`) saves recomputing them.
    """
    groups = class_members(labels) if members is None else members
    take = min(len(groups), max(1, batch_size // samples_per_class))
    batch = []
    for cls in rng.choice(len(groups), size=take, replace=False):
        group = groups[cls]
        if len(group) <= samples_per_class:
            batch.extend(group.tolist())
        else:
            batch.extend(group[rng.choice(len(group), size=samples_per_class, replace=False)].tolist())
    return np.asarray(batch, dtype=np.int64)


def class_members(labels: np.ndarray) -> list[np.ndarray]:
    """Positions of the images of every distinct label, in label order."""
    labels = np.asarray(labels)
    return [np.flatnonzero(labels == cls) for cls in np.unique(labels)]


def adapt_head(head: Any, features: torch.Tensor, labels: np.ndarray, settings: FewShotSettings,
               iterations: int, *, seed: int) -> tuple[Any, list[float]]:
    """Train a deep copy of ``head`` on support features; ``head`` itself is not modified.

    Margin loss (fixed β, not optimised) on distance-weighted triplets, Adam on the head's parameters
    only (METHODS §6 step 4). Randomness (batches, miner) is seeded with ``seed`` and does not disturb
    the caller's torch generator.

    Returns:
        ``(adapted head in eval mode, loss of every iteration)``.
    """
    import torch

    from dmlplug_builtins.revisiting_margin import RevisitingMarginLoss
    from dmlplug_builtins.revisiting_miners import DistanceWeightedMiner

    adapted = copy.deepcopy(head)
    for param in adapted.parameters():
        param.requires_grad_(True)
    adapted.train()
    labels = np.asarray(labels, dtype=np.int64)
    num_classes = int(labels.max()) + 1
    loss_fn = RevisitingMarginLoss(num_classes, margin=settings.margin, beta=settings.beta, learn_beta=False)
    loss_fn.to(features.device)
    miner = DistanceWeightedMiner(lower_cutoff=settings.lower_cutoff, anchors="with_positive")
    optimizer = torch.optim.Adam(adapted.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    label_tensor = torch.as_tensor(labels, device=features.device)
    rng = np.random.default_rng([settings.seed, seed])
    members = class_members(labels)
    losses: list[Any] = []
    devices = [features.device] if features.device.type == "cuda" else []
    threads = torch.get_num_threads()
    if features.device.type == "cpu" and settings.cpu_threads:
        # Batches of ~100 small vectors: extra threads only add synchronisation (10x slower when the
        # cores are shared with other jobs).
        torch.set_num_threads(settings.cpu_threads)
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(rng.integers(2**31)))
            for _ in range(iterations):
                batch = torch.as_tensor(class_random_batches(labels, settings.batch_size,
                                                             settings.samples_per_class, rng, members),
                                        device=features.device)
                embeddings = head_embedding(adapted, features[batch]).float()
                batch_labels = label_tensor[batch]
                loss = loss_fn(embeddings, batch_labels, miner(embeddings, batch_labels))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.detach())  # no .item() per step: it would synchronise a GPU every step
    finally:
        torch.set_num_threads(threads)
    adapted.eval()
    return adapted, (torch.stack(losses).float().cpu().tolist() if losses else [])


def retrieval_metrics(embeddings: np.ndarray, labels: np.ndarray, *, backend: str = "auto",
                      seed: int = 0) -> dict[str, float]:
    """recall@1, map@1000 and map@1000_revisiting of a leave-one-out evaluation (shared EvalContext)."""
    from dmlplug.evaluation import EvalContext, run_evaluators
    from dmlplug.evaluation.retrieval import RetrievalEvaluator

    ctx = EvalContext(embeddings, labels, backend=backend, seed=seed)
    metrics = run_evaluators([RetrievalEvaluator(list(METRIC_SPECS), name="fewshot")], ctx)
    metrics.pop("excluded_queries", None)
    return metrics


# ---------------------------------------------------------------------------------------------- protocol


@dataclass
class FewShotReport:
    """Per-episode metrics and their summaries.

    Attributes:
        episodes: ``{shots: [{"episode", "support", "queries", "zero_shot": {...}, "adapted": {...},
            "final_loss"}, ...]}``.
        summary: ``{shots: {"zero_shot" | "adapted": {metric: {"mean", "ci", "values"}}}}`` (metrics in
            the evaluators' units, fractions in [0, 1]).
        info: Settings and timings.
    """

    episodes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    summary: dict[int, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (shot counts as strings)."""
        return {"info": self.info, "summary": {str(k): v for k, v in self.summary.items()},
                "episodes": {str(k): v for k, v in self.episodes.items()}}

    def flat_metrics(self) -> dict[str, float]:
        """``fewshot/<k>shot/<zero_shot|adapted>/<metric>`` (mean) and ``.../<metric>_ci`` entries."""
        flat = {}
        for k, modes in self.summary.items():
            for mode, metrics in modes.items():
                for metric, stats in metrics.items():
                    flat[f"fewshot/{k}shot/{mode}/{metric}"] = stats["mean"]
                    flat[f"fewshot/{k}shot/{mode}/{metric}_ci"] = stats["ci"]
        return flat

    def table(self, metrics: Sequence[str] = ("recall@1", "map@1000")) -> str:
        """A text table: mean ± confidence half-width in %, zero-shot and adapted, per shot count."""
        lines = [f"{'shots':>5}  {'metric':<22} {'zero-shot':>18} {'adapted':>18}"]
        for k, modes in sorted(self.summary.items()):
            for metric in metrics:
                cells = []
                for mode in ("zero_shot", "adapted"):
                    stats = modes.get(mode, {}).get(metric)
                    cells.append("-" if stats is None else
                                 f"{100 * stats['mean']:.2f} ± {100 * stats['ci']:.2f}")
                lines.append(f"{k:>5}  {metric:<22} {cells[0]:>18} {cells[1]:>18}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON, atomically."""
        from dmlplug.engine.atomic import write_json

        write_json(Path(path), self.to_json())
        return Path(path)


def run_fewshot(
    model: Any,
    source: Any,
    transform: Any,
    settings: FewShotSettings,
    *,
    episodes: Mapping[int, Mapping[int, Mapping[str, Sequence[str]]]] | None = None,
    device: str = "cpu",
    eval_batch_size: int = 256,
    workers: int = 0,
    backend: str = "auto",
    features: torch.Tensor | None = None,
) -> FewShotReport:
    """The few-shot protocol on one test split.

    The model is only read: its head is deep-copied for every episode, and ``model``'s parameters are
    unchanged afterwards.

    Args:
        model: A trained :class:`~dmlplug.engine.model.EmbeddingModel` (on ``device``).
        source: The test split (an :class:`~dmlplug.data.base.ImageSource`).
        transform: The test transform.
        settings: Protocol settings.
        episodes: ``{shots: {episode: {class: [support ids]}}}`` (from a split file); ``None`` samples them
            from ``source`` with ``settings.seed``.
        device: Where the model runs.
        eval_batch_size: Images per backbone forward pass.
        workers: DataLoader workers.
        backend: kNN backend of the metrics.
        features: Precomputed backbone features of ``source`` (skips the backbone pass).

    Returns:
        The :class:`FewShotReport`.

    Raises:
        DataError: Episodes do not match the test split, or a requested shot count has no episodes.
    """
    import torch

    from dmlplug.data.splits import image_ids
    from dmlplug.oodml.fewshot_stats import mean_confidence_interval

    if settings.shots[0] < 2:
        raise DataError(f"{settings.shots[0]}-shot episodes cannot be adapted: the Margin loss needs two support "
                        "images of a class to form a positive pair", fix="use shots of 2 or more")
    start = time.perf_counter()
    labels = np.asarray(source.labels, dtype=np.int64)
    ids = image_ids(source)
    if episodes is None:
        episodes = sampled_episodes(labels, source.class_names, ids, settings)
        origin = f"sampled (seed {settings.seed})"
    else:
        origin = "split file"
    for k in settings.shots:
        if k not in episodes or not episodes[k]:
            raise DataError(f"no {k}-shot episodes available (have shots {sorted(episodes)})",
                            fix=f"use --shots {','.join(map(str, sorted(episodes)))} or another split file")
    if features is None:
        features = backbone_features(model, source, transform, batch_size=eval_batch_size, device=device,
                                     workers=workers)
    feature_time = time.perf_counter() - start
    zero_shot = embed_features(model.head, features)
    report = FewShotReport()
    for k in settings.shots:
        rows = []
        for episode in sorted(episodes[k])[: settings.episodes]:
            where = f"{k}-shot episode {episode}"
            support, query = episode_indices(labels, source.class_names, ids, episodes[k][episode], where=where)
            row: dict[str, Any] = {"episode": int(episode), "support": int(len(support)), "queries": int(len(query))}
            row["zero_shot"] = retrieval_metrics(zero_shot[query], labels[query], backend=backend,
                                                 seed=settings.seed)
            adapted, losses = adapt_head(model.head, features[torch.as_tensor(support, device=features.device)],
                                         labels[support], settings, settings.iterations_for(k),
                                         seed=k * 1000 + int(episode))
            row["adapted"] = retrieval_metrics(embed_features(adapted, features[torch.as_tensor(
                query, device=features.device)]), labels[query], backend=backend, seed=settings.seed)
            row["final_loss"] = losses[-1] if losses else None
            rows.append(row)
        report.episodes[k] = rows
        report.summary[k] = {}
        for mode in ("zero_shot", "adapted"):
            report.summary[k][mode] = {}
            for metric in rows[0][mode]:
                values = [r[mode][metric] for r in rows]
                mean, half = mean_confidence_interval(values, settings.confidence)
                report.summary[k][mode][metric] = {"mean": mean, "ci": half, "values": values}
    report.info = {
        "settings": settings.model_dump(mode="json"),
        "episodes_from": origin,
        "test_images": int(len(labels)),
        "test_classes": int(len(source.class_names)),
        "feature_seconds": feature_time,
        "total_seconds": time.perf_counter() - start,
    }
    return report


# ---------------------------------------------------------------------------------------------- runs


@dataclass
class LoadedRun:
    """What the few-shot command needs from a finished run."""

    recipe: Any
    model: Any
    dataset: Any
    test_transform: Any
    checkpoint: Path
    run_dir: Path | None


def find_checkpoint(path: str | Path, which: str = "best") -> tuple[Path, Path | None]:
    """``(checkpoint file, run directory or None)`` for a run directory or a checkpoint file.

    Raises:
        DataError: Nothing usable at ``path``.
    """
    target = Path(path)
    if target.is_file():
        run_dir = target.parent.parent if target.parent.name == "checkpoints" else None
        return target, run_dir
    if target.is_dir():
        for name in (which, "best", "last"):
            candidate = target / "checkpoints" / f"{name}.pt"
            if candidate.is_file():
                return candidate, target
        raise DataError(f"no checkpoint in run directory {target}", where=str(target / "checkpoints"),
                        fix="give a finished run directory or a .pt checkpoint file")
    raise DataError(f"no run directory or checkpoint at {target}", fix="check the path")


def load_run(path: str | Path, *, which: str = "best", device: str = "cpu",
             overrides: Sequence[str] = ()) -> LoadedRun:
    """Rebuild a run's dataset (with its class split), model and test transform, and load its weights.

    Only the dataset, backbone and head are built (no loss, evaluators or loggers).

    Raises:
        DataError: No checkpoint or recipe can be found.
    """
    import tomllib

    from dmlplug.context import BuildContext
    from dmlplug.data.splits import apply_recipe_classes
    from dmlplug.data.transforms import build_transform
    from dmlplug.engine.build import build_component
    from dmlplug.engine.checkpoint import load_checkpoint
    from dmlplug.engine.model import EmbeddingModel
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe

    checkpoint, run_dir = find_checkpoint(path, which)
    state = load_checkpoint(checkpoint, map_location="cpu")
    text = state.get("recipe") if isinstance(state, dict) else None
    if not text and run_dir is not None and (run_dir / "recipe.resolved.toml").is_file():
        text = (run_dir / "recipe.resolved.toml").read_text(encoding="utf-8")
    if not text or "model" not in state:
        raise DataError(f"{checkpoint} is not a dmlplug checkpoint with a recipe and model weights",
                        fix="give a run directory or a checkpoint written by `dmlplug run`")
    host = get_host()
    recipe = load_recipe(tomllib.loads(text), list(overrides), registry=host.registry)
    r = recipe.recipe
    ctx = BuildContext(device=device, seed=r.run.seed, host=host, run_dir=run_dir)
    dataset = build_component(recipe.components["data.dataset"], ctx)
    dataset = apply_recipe_classes(dataset, r.data)
    ctx.train_labels = dataset.train.labels
    ctx.num_classes = int(dataset.train.num_classes)
    ctx.batch_size = r.data.batch_size
    backbone = build_component(recipe.components["backbone"], ctx)
    ctx.feature_dim = int(backbone.num_features)
    head = build_component(recipe.components["head"], ctx)
    model = EmbeddingModel(backbone, head)
    model.load_state_dict(state["model"])
    model.to(device).eval()
    augment = r.data.augment if r.data.augment != "auto" else getattr(dataset, "default_augment", "dml")
    transform = build_transform("test", augment=augment, image_size=r.data.image_size,
                                resize_size=r.data.resize_size)
    return LoadedRun(recipe, model, dataset, transform, checkpoint, run_dir)


def split_file_episodes(split_file: str | Path, split_id: int) -> dict[int, dict[int, dict[str, list[str]]]]:
    """The stored episodes of one split of a split file (JSON or published pickle)."""
    from dmlplug.oodml.splitfile import load_published_pickle, load_splits

    path = str(split_file)
    loaded = load_published_pickle(path) if path.endswith(".pkl") else load_splits(path)
    return loaded.by_id(split_id).episodes


def report_json(report: FewShotReport) -> str:
    """The report as indented JSON text."""
    return json.dumps(report.to_json(), indent=2)
