"""Python and command-line entry points: ``dmlplug.evaluate`` and ``dmlplug evaluate FILE.npz``."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.errors import ComponentError, DataError, RecipeError
from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.runner import run_evaluators, write_all_artifacts

#: Evaluators used when none are named: recall@1/2/4/8, map@r and r_precision.
DEFAULT_EVALUATORS: tuple[str, ...] = ("retrieval",)


def build_evaluators(specs: list[Any] | None = None, host: Any = None) -> list[Any]:
    """Build evaluators from names or ``{"name": ..., **params}`` dicts through the registry.

    Raises:
        ComponentError: A name is unknown or a spec is neither a string nor a dict with ``name``.
        RecipeError: Parameters do not validate.
    """
    from dmlplug.context import BuildContext
    from dmlplug.plugins import get_host

    host = host or get_host()
    built = []
    for i, spec in enumerate(DEFAULT_EVALUATORS if specs is None else specs):
        if isinstance(spec, str):
            name, params = spec, {}
        elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
            params = {k: v for k, v in spec.items() if k != "name"}
            name = spec["name"]
        else:
            raise ComponentError(f"evaluator spec {spec!r} is neither a name nor a dict with a 'name' key",
                                 where=f"evaluators[{i}]", fix='use "recall" or {"name": "recall", "k": [1, 5]}')
        info = host.registry.get("evaluators", name)
        evaluator = info.build(info.validate(params, where=f"evaluators[{i}] ({name})"), BuildContext(host=host))
        if not hasattr(evaluator, "name"):
            evaluator.name = name
        built.append(evaluator)
    return built


def evaluate(embeddings: Any, labels: Any, evaluators: list[Any] | None = None, *,
             artifacts_dir: str | Path | None = None, **options: Any) -> dict[str, float]:
    """Evaluate embeddings with registered evaluators; one flat ``{metric: value}`` dict.

    Args:
        embeddings: ``N×D`` array or tensor.
        labels: ``N`` integer labels.
        evaluators: Names or ``{"name": ..., **params}`` dicts (default: :data:`DEFAULT_EVALUATORS`).
        artifacts_dir: When given, evaluators write their artifacts (curves, per-class tables) there.
        **options: :class:`EvalContext` options: ``query_mask``, ``gallery_mask``, ``backend``,
            ``memory_budget_mb``, ``seed``.
    """
    built = build_evaluators(evaluators)
    ctx = EvalContext(embeddings, labels, **options)
    metrics = run_evaluators(built, ctx)
    if artifacts_dir is not None:
        write_all_artifacts(built, ctx, Path(artifacts_dir))
    return metrics


def load_npz(path: str | Path) -> dict[str, Any]:
    """Read ``embeddings``, ``labels`` and optional ``query_mask`` / ``gallery_mask`` from an ``.npz`` file.

    Raises:
        DataError: The file is missing or unreadable, a key is missing, or shapes disagree.
    """
    path = Path(path)
    fix = "save it with numpy.savez(path, embeddings=E (N×D float), labels=y (N ints))"
    if not path.is_file():
        raise DataError(f"embeddings file {str(path)!r} does not exist", where=str(path), fix=fix)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise DataError(f"cannot read {str(path)!r} as an .npz file: {exc}", where=str(path), fix=fix) from None
    for key in ("embeddings", "labels"):
        if key not in arrays:
            raise DataError(f"the file has no {key!r} array (it has: {', '.join(sorted(arrays)) or 'nothing'})",
                            where=str(path), fix=fix)
    emb, lab = arrays["embeddings"], arrays["labels"]
    if emb.ndim != 2:
        raise DataError(f"'embeddings' must be 2-D (N×D), got shape {emb.shape}", where=f"{path}:embeddings",
                        fix=fix)
    if lab.ndim != 1 or len(lab) != len(emb):
        raise DataError(f"'labels' must be 1-D with one label per embedding ({len(emb)}), got shape {lab.shape}",
                        where=f"{path}:labels", fix=fix)
    out = {"embeddings": emb, "labels": lab}
    masks = [k for k in ("query_mask", "gallery_mask") if k in arrays]
    if len(masks) == 1:
        raise DataError(f"the file has {masks[0]!r} but not the other mask", where=str(path),
                        fix="store both query_mask and gallery_mask, or neither")
    for key in masks:
        mask = arrays[key]
        if mask.shape != (len(emb),) or mask.dtype != bool:
            raise DataError(f"{key!r} must be {len(emb)} booleans, got dtype {mask.dtype} shape {mask.shape}",
                            where=f"{path}:{key}", fix=f"store {key} as a boolean array of length N")
        out[key] = mask
    return out


def parse_set_options(items: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """Turn ``evaluator.param=value`` strings into per-evaluator parameter dicts.

    Values are read as TOML values (``[1, 5]``, ``0.1``, ``true``, ``"text"``); anything else is a string.

    Raises:
        RecipeError: An item is malformed or names an evaluator that is not selected.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        target, sep, raw = item.partition("=")
        name, dot, param = target.strip().partition(".")
        if not sep or not dot or not name or not param:
            raise RecipeError(f"cannot read --set {item!r}", where="--set",
                              fix="write --set evaluator.param=value, e.g. --set recall.k=[1,5]")
        if name not in names:
            raise RecipeError(f"--set {item!r} names evaluator {name!r}, which is not selected",
                              where="--set", fix="selected evaluators: " + ", ".join(names))
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out.setdefault(name, {})[param] = value
    return out


def evaluate_file(path: str | Path, evaluators: list[str] | None = None, sets: list[str] | None = None, *,
                  backend: str = "auto", memory_budget_mb: float | None = None, seed: int = 0,
                  artifacts_dir: str | Path | None = None) -> tuple[dict[str, float], EvalContext]:
    """What ``dmlplug evaluate FILE.npz`` does: load, build the evaluators, evaluate, write artifacts."""
    names = list(evaluators) if evaluators else list(DEFAULT_EVALUATORS)
    params = parse_set_options(list(sets or []), names)
    specs = [{"name": n, **params.get(n, {})} for n in names]
    built = build_evaluators(specs)
    data = load_npz(path)
    ctx = EvalContext(data["embeddings"], data["labels"], query_mask=data.get("query_mask"),
                      gallery_mask=data.get("gallery_mask"), backend=backend,
                      memory_budget_mb=memory_budget_mb, seed=seed)
    metrics = run_evaluators(built, ctx)
    if artifacts_dir is not None:
        write_all_artifacts(built, ctx, Path(artifacts_dir))
    return metrics, ctx


def format_table(metrics: dict[str, float]) -> str:
    """Two aligned columns, metric and value."""
    width = max((len(k) for k in metrics), default=6)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 8}"]
    for key, value in metrics.items():
        shown = str(int(value)) if key == "excluded_queries" and math.isfinite(value) else f"{value:.4f}"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(lines)


def to_json(metrics: dict[str, float]) -> str:
    """One flat JSON object; NaN is written as ``null`` so the output is valid JSON."""
    return json.dumps({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
