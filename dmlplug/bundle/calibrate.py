"""``calibrate_run``: embed a trained run's calibration split and calibrate its acceptance thresholds.

The split is the validation split when the run's dataset has one, else the test split (flagged in the result:
thresholds picked on the test data make the test metrics optimistic). The embedding is the one the run's
evaluation uses: the loaded model (:func:`dmlplug.load_run`), the test transform, and the engine's embedding
helper (:func:`dmlplug.engine.distributed.embed_dataset`), in full precision. ``dmlplug export`` calibrates
the same split on the exported model's embeddings instead (:func:`calibrate_loaded` with a ``runner``): the
vectors the bundle produces, for which its thresholds must hold in float32. The maths is
:func:`dmlplug.evaluation.calibration.calibrate`; see docs/calibration.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.errors import DataError
from dmlplug.evaluation.calibration import OPIS_DEFAULTS, Calibration, calibrate

SPLITS = ("val", "test")


def calibrate_run(run_dir: str | Path, *, checkpoint: str = "best", split: str | None = None,
                  far_targets: Sequence[float] = (1e-3, 1e-2), device: str = "cpu",
                  batch_size: int | None = None) -> Calibration:
    """Calibrate the thresholds of a trained run on its validation split (else its test split).

    Args:
        run_dir: A run directory (or a checkpoint file) as :func:`dmlplug.load_run` takes.
        checkpoint: ``"best"`` or ``"last"``.
        split: ``"val"`` or ``"test"``; ``None`` picks ``"val"`` when the dataset has one, else ``"test"``.
        far_targets: Target false-accept rates, each in (0, 1).
        device: Where the model embeds the images.
        batch_size: Images per batch; the recipe's ``data.eval_batch_size`` by default.

    Returns:
        The :class:`~dmlplug.evaluation.calibration.Calibration` (``split`` and ``test_split`` recorded).

    Raises:
        DataError: No loadable run at ``run_dir``, an unknown split, a ``"val"`` request for a dataset without
            a validation split, or a split without positive or negative pairs.
    """
    from dmlplug.engine.trained_run import load_run

    loaded = load_run(run_dir, checkpoint=checkpoint, device=device)
    return calibrate_loaded(loaded, split=split, far_targets=far_targets, device=device, batch_size=batch_size)


def calibrate_loaded(loaded: Any, *, split: str | None = None, far_targets: Sequence[float] = (1e-3, 1e-2),
                     device: str = "cpu", batch_size: int | None = None,
                     runner: Callable[[Any], np.ndarray] | None = None) -> Calibration:
    """:func:`calibrate_run` on a run already loaded, embedding with the run's model or with ``runner``.

    Args:
        loaded: A :class:`~dmlplug.engine.trained_run.LoadedRun`.
        split: As in :func:`calibrate_run`.
        far_targets: As in :func:`calibrate_run`.
        device: Where the model embeds the images.
        batch_size: As in :func:`calibrate_run`.
        runner: ``B×3×H×W`` preprocessed batch -> ``B×D`` numpy embeddings (an exported model's runner,
            :mod:`dmlplug.bundle.runtime`); ``None``: the run's PyTorch model, as its evaluation embeds.

    Raises:
        DataError: As in :func:`calibrate_run`.
    """
    from dmlplug.engine.data import TransformedSource, eval_loader
    from dmlplug.engine.distributed import embed_dataset

    dataset, recipe = loaded.dataset, loaded.recipe
    if split is None:
        split = "val" if dataset.val is not None else "test"
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}", where="calibrate split", fix="use 'val' or 'test'")
    if getattr(dataset, split) is None:
        raise DataError(f"the run's dataset has no {split!r} split", where=f"{loaded.run_dir or loaded.checkpoint}",
                        fix="calibrate on split='test', or train with a validation split "
                            "(the dataset's val_fraction or val_classes)")
    source = TransformedSource(getattr(dataset, split), loaded.test_transform)
    batch_size = batch_size or recipe.data.eval_batch_size
    embeddings: Any
    if runner is None:
        embeddings, labels = embed_dataset(loaded.model, source, batch_size=batch_size,
                                           workers=recipe.data.workers, device=device)
    else:
        chunks, label_chunks = [], []
        for images, batch_labels, _ in eval_loader(source, batch_size=batch_size, workers=recipe.data.workers,
                                                   device=device):
            chunks.append(runner(images))
            label_chunks.append(_numpy(batch_labels))
        embeddings, labels = np.concatenate(chunks), np.concatenate(label_chunks)
    return calibrate(_numpy(embeddings), _numpy(labels), far_targets=far_targets, split=split,
                     test_split=split == "test", memory_budget_mb=recipe.evaluation.memory_budget_mb or 256.0,
                     opis_options=opis_options(recipe.evaluators), seed=recipe.run.seed)


def opis_options(evaluators: list[dict[str, Any]]) -> dict[str, Any]:
    """OPIS settings of the run's own ``opis`` (or ``eps_opis``) evaluator table, else the defaults.

    The keys follow the evaluator's parameters (``pairs``, ``max_all_pairs``, ``far_range``, ``grid_size``,
    ``utility`` …), so the calibration's OPIS is the one the run reports.
    """
    table = next((e for e in evaluators if e.get("name") == "opis"), None) or next(
        (e for e in evaluators if e.get("name") == "eps_opis"), None) or {}
    pairs = dict(OPIS_DEFAULTS["pairs"])
    pairs.update({k: table[k] for k in ("max_all_pairs", "negative_ratio", "max_positives_per_class") if k in table})
    if "pairs" in table:
        pairs["mode"] = table["pairs"]
    options: dict[str, Any] = {"pairs": pairs}
    for key, name in (("grid_size", "grid_size"), ("far_range", "far_range"), ("distance_range", "distance_range"),
                      ("kind", "utility"), ("epsilon", "epsilon"), ("pooling", "pooling")):
        if name in table:
            options[key] = tuple(table[name]) if isinstance(table[name], list) else table[name]
    return options


def _numpy(values: Any) -> np.ndarray:
    """A CPU numpy array from a numpy array or a (possibly CUDA) tensor."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu() if values.is_floating_point() else values.detach().cpu()
        return values.numpy()
    return np.asarray(values)
