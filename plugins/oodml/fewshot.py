"""The few-shot protocol of ooDML (docs/fewshot.md) on one test split: episodes, metrics, report.

For every episode: ``k`` support images per test class, the remaining test images are the queries.
The model is evaluated zero-shot on the queries; then a *copy* of its embedding head is trained on the
support images (:mod:`.adaptation`: Margin loss with distance-weighted mining, Adam) and evaluated on the
same queries. Episodes come from a split file (:func:`stored_episodes`) or are sampled from the test split.

torch is imported inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug.errors import DataError
from dmlplug.evaluation.formatting import format_mean_spread
from dmlplug_builtins.oodml import FewShotSettings

if TYPE_CHECKING:
    import torch

    from dmlplug_builtins.oodml.splitfile import Episodes

#: Metrics reported per episode (keys of :class:`dmlplug_builtins.evaluators.retrieval.RetrievalEvaluator`).
METRIC_SPECS: tuple[tuple[str, Any], ...] = (
    ("recall", 1), ("map_k", (1000, "standard")), ("map_k", (1000, "revisiting")),
)


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
            found = lookup.get((index[cls], str(image_id)))
            if found is None:
                raise DataError(f"{where}: support image {image_id!r} is not an image of class {cls!r}",
                                fix="check that the split file belongs to this dataset (image ids are file "
                                    "basenames, or img<k> for in-memory datasets)")
            chosen.append(found)
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
    from dmlplug_builtins.oodml.episodes import sample_episodes

    by_class: dict[str, list[str]] = {}
    for label, image_id in zip(np.asarray(labels).tolist(), ids, strict=True):
        by_class.setdefault(class_names[label], []).append(str(image_id))
    return sample_episodes(by_class, shots=settings.shots, episodes=settings.episodes, seed=settings.seed)


def retrieval_metrics(embeddings: np.ndarray, labels: np.ndarray, *, backend: str = "auto",
                      seed: int = 0) -> dict[str, float]:
    """recall@1, map@1000 and map@1000_revisiting of a leave-one-out evaluation (shared EvalContext)."""
    from dmlplug.evaluation import EvalContext, run_evaluators
    from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

    eval_context = EvalContext(embeddings, labels, backend=backend, seed=seed)
    metrics = run_evaluators([RetrievalEvaluator(list(METRIC_SPECS), name="fewshot")], eval_context)
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
        """A text table: mean ± 95% confidence half-width (none for one episode), zero-shot and adapted."""
        lines = [f"{'shots':>5}  {'metric':<22} {'zero-shot':>18} {'adapted':>18}"]
        for k, modes in sorted(self.summary.items()):
            for metric in metrics:
                cells = []
                for mode in ("zero_shot", "adapted"):
                    stats = modes.get(mode, {}).get(metric)
                    cells.append("–" if stats is None else
                                 format_mean_spread(stats["mean"], stats["ci"], len(stats["values"])))
                lines.append(f"{k:>5}  {metric:<22} {cells[0]:>18} {cells[1]:>18}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON, atomically."""
        from dmlplug.files import write_json

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
        model: A trained embedding model with ``backbone`` and ``head`` (on ``device``).
        source: The test split (an :class:`~dmlplug.data.ImageSource`).
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
    from dmlplug_builtins.oodml.adaptation import adapt_head, backbone_features, embed_features
    from dmlplug_builtins.oodml.fewshot_stats import mean_confidence_interval

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



def stored_episodes(dataset: Any, split_file: str | Path | None = None, split_id: int | None = None
                    ) -> Episodes | None:
    """The episodes stored with a split: ``split_file``/``split_id``, else the dataset's own ooDML split.

    Args:
        dataset: The run's :class:`~dmlplug.data.DatasetBundle`; a bundle built by dataset ``oodml_split``
            records its split file and id in ``info["oodml_split"]``.
        split_file: A split file (JSON or published ``.pkl``) that overrides the dataset's.
        split_id: The split id in it (default: the dataset's).

    Returns:
        ``{shots: {episode: {class: [image ids]}}}``, or ``None`` when no split file is known (episodes are
        then sampled from the test split).

    Raises:
        DataError: The split file cannot be read or has no split with that id.
    """
    from dmlplug_builtins.oodml.splitfile import read_split_file

    own = (getattr(dataset, "info", None) or {}).get("oodml_split") or {}
    split_file = split_file or own.get("split_file")
    split_id = split_id or own.get("split_id")
    if not split_file or not split_id:
        return None
    return read_split_file(split_file).by_id(int(split_id)).episodes
