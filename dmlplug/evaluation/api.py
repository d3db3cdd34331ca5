"""Python and command-line entry points: ``dmlplug.evaluate`` and ``dmlplug evaluate FILE.npz``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.errors import ComponentError, DataError, RecipeError
from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.runner import run_evaluators, write_all_artifacts
from dmlplug.recipe.overrides import read_value

#: Evaluators used when none are named: recall@1/2/4/8, map@r and r_precision.
DEFAULT_EVALUATORS: tuple[str, ...] = ("retrieval",)


def build_evaluators(specs: list[Any] | None, host: Any) -> list[Any]:
    """Build evaluators from names or ``{"name": ..., **params}`` dicts through ``host``'s registry.

    ``specs`` ``None`` gives :data:`DEFAULT_EVALUATORS`.

    Raises:
        ComponentError: A name is unknown or a spec is neither a string nor a dict with ``name``.
        RecipeError: Parameters do not validate.
    """
    from dmlplug.context import BuildContext
    from dmlplug.tables import validate_table

    built = []
    for i, spec in enumerate(DEFAULT_EVALUATORS if specs is None else specs):
        table = {"name": spec} if isinstance(spec, str) else spec
        if not (isinstance(table, dict) and isinstance(table.get("name"), str)):
            raise ComponentError(f"evaluator spec {spec!r} is neither a name nor a dict with a 'name' key",
                                 where=f"evaluators[{i}]", fix='use "recall" or {"name": "recall", "k": [1, 5]}')
        name = table["name"]
        validated = validate_table("evaluators", table, where=f"evaluators[{i}] ({name})", registry=host.registry)
        evaluator = validated.build(BuildContext(host=host))
        if not hasattr(evaluator, "name"):
            evaluator.name = name
        built.append(evaluator)
    return built


def evaluate(embeddings: Any, labels: Any, evaluators: list[Any] | None = None, *,
             artifacts_dir: str | Path | None = None, rerank: Any = None, **options: Any) -> dict[str, float]:
    """Evaluate embeddings with registered evaluators; one flat ``{metric: value}`` dict.

    Args:
        embeddings: ``N×D`` array or tensor.
        labels: ``N`` integer labels.
        evaluators: Names or ``{"name": ..., **params}`` dicts (default: :data:`DEFAULT_EVALUATORS`).
        artifacts_dir: When given, evaluators write their artifacts (curves, per-class tables) there.
        rerank: Re-rankers (``"aqe"``, ``"krnn:k1=20"``, ``{"name": "dba", "n": 5}``, a
            :class:`~dmlplug.evaluation.rerank_spec.RerankSpec` or a list), as ``[evaluation] rerank``: the kNN
            metrics are added again as ``<metric>+<label>`` (docs/reranking.md).
        **options: :class:`EvalContext` options: ``query_mask``, ``gallery_mask``, ``backend``,
            ``memory_budget_mb``, ``seed``.

    Raises:
        DataError: The input is invalid, or a kNN evaluator is selected and no query has another item of
            its class in the gallery (see :func:`check_valid_queries`).
        ComponentError: An evaluator or a re-ranker is unknown.
        RecipeError: A re-ranker has bad parameters or labels.
    """
    from dmlplug.evaluation.rerank_spec import parse_rerank_list
    from dmlplug.plugins import get_host

    host = get_host()  # the entry point of a Python caller: the process-wide plugins, as dmlplug.create
    specs = parse_rerank_list(rerank, registry=host.registry) if rerank else []  # a bad one fails before any work
    built = build_evaluators(evaluators, host)
    eval_context = EvalContext(embeddings, labels, **options)
    check_valid_queries(built, eval_context, where="evaluation input")
    metrics = run_evaluators(built, eval_context)
    if specs:
        from dmlplug.evaluation.rerank_eval import rerank_metrics

        metrics.update(rerank_metrics(built, eval_context, specs))
    if artifacts_dir is not None:
        write_all_artifacts(built, eval_context, Path(artifacts_dir))
    return metrics


#: How to write a file ``dmlplug evaluate`` reads.
NPZ_FIX = "save it with numpy.savez(path, embeddings=E (N×D float), labels=y (N ints))"


def load_npz(path: str | Path) -> dict[str, Any]:
    """Read ``embeddings``, ``labels`` and optional ``query_mask`` / ``gallery_mask`` from an ``.npz`` file.

    Only these arrays are read (others in the file are ignored), never with pickle.

    Raises:
        DataError: The file is missing or not an ``.npz`` archive, an array is missing, holds Python
            objects or non-finite values (the first bad rows are named), or shapes disagree. Every message
            names the file and the array.
    """
    path = Path(path)
    fix = NPZ_FIX
    if not path.is_file():
        raise DataError(f"embeddings file {str(path)!r} does not exist", where=str(path), fix=fix)
    _check_is_npz(path)
    try:
        data = np.load(path, allow_pickle=False)
        names = list(data.files)
    except Exception as exc:  # a damaged archive: zip directory readable, contents not
        raise DataError(f"cannot read {str(path)!r} as an .npz file ({type(exc).__name__}: {exc})",
                        where=str(path), fix=fix) from None
    with data:
        if "labels" not in names and "paths" in names:  # an .npz of `dmlplug embed` of a folder without classes
            raise DataError(f"{str(path)!r} has no 'labels' array: it was written by `dmlplug embed` of a folder "
                            "whose images are not all in class subfolders (at least two), so no image has a class",
                            where=str(path), fix="embed a folder with one subfolder per class (FOLDER/CLASS/IMAGE): "
                            "dmlplug embed BUNDLE_DIR FOLDER --out EMB.npz; or add labels: " + NPZ_FIX)
        for key in ("embeddings", "labels"):
            if key not in names:
                raise DataError(f"{str(path)!r} has no {key!r} array (it has: {', '.join(sorted(names)) or 'nothing'})",
                                where=str(path), fix=fix)
        arrays = {k: _read_array(data, path, k) for k in ("embeddings", "labels", "query_mask", "gallery_mask")
                  if k in names}
    emb, lab = arrays["embeddings"], arrays["labels"]
    if emb.ndim != 2:
        raise DataError(f"'embeddings' must be 2-D (N×D), got shape {emb.shape}", where=f"{path}:embeddings",
                        fix=fix)
    if lab.ndim != 1 or len(lab) != len(emb):
        raise DataError(f"'labels' must be 1-D with one label per embedding ({len(emb)}), got shape {lab.shape}",
                        where=f"{path}:labels", fix=fix)
    _check_finite_rows(path, "embeddings", emb)
    _check_finite_rows(path, "labels", lab)
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


def _check_is_npz(path: Path) -> None:
    """An ``.npz`` is a zip archive; say what the file is instead when it is not (numpy would talk of pickles)."""
    import zipfile

    if zipfile.is_zipfile(path):
        return
    with path.open("rb") as handle:
        head = handle.read(6)
    what = ("a single .npy array (written by numpy.save), not an .npz archive" if head == b"\x93NUMPY"
            else "not an .npz file (an .npz is a zip archive of .npy arrays)")
    raise DataError(f"cannot read {str(path)!r}: it is {what}", where=str(path), fix=NPZ_FIX)


def _read_array(data: Any, path: Path, key: str) -> np.ndarray:
    try:
        return np.asarray(data[key])
    except ValueError:  # numpy refuses object arrays without pickle; say which array and what to store
        raise DataError(f"array {key!r} in {str(path)!r} holds Python objects, not numbers",
                        where=f"{path}:{key}",
                        fix=f"store {key} as a numeric array, e.g. numpy.asarray({key}, dtype=float32)") from None
    except Exception as exc:
        raise DataError(f"array {key!r} in {str(path)!r} cannot be read ({type(exc).__name__}: {exc})",
                        where=f"{path}:{key}", fix=NPZ_FIX) from None


def _check_finite_rows(path: Path, key: str, array: np.ndarray) -> None:
    """Name the first rows of ``array`` that hold NaN or infinite values."""
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating)):
        return
    finite = np.isfinite(array)
    bad = np.flatnonzero(~finite.reshape(len(array), -1).all(axis=1)) if array.size else np.array([], int)
    if not len(bad):
        return
    shown = ", ".join(str(int(i)) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
    rows = "row" if len(bad) == 1 else "rows"
    verb = "holds" if len(bad) == 1 else "hold"
    raise DataError(f"{str(path)!r}: {key!r} {rows} {shown} ({len(bad)} of {len(array)}) {verb} NaN or infinite "
                    "values", where=f"{path}:{key}[{int(bad[0])}]",
                    fix=f"re-export the {key} (the model that produced them diverged or the export is broken), "
                        "or drop those rows from every array of the file")


def check_valid_queries(evaluators: list[Any], eval_context: EvalContext, where: str) -> None:
    """Refuse a kNN evaluation in which no query has another item of its class in the gallery.

    Lone queries are left out of kNN metrics and counted in ``excluded_queries``; when every query is
    lone, every kNN metric is undefined (NaN), which is a mistake in the split, not a result.

    Args:
        evaluators: The built evaluators; those with ``required_k`` use the kNN graph.
        eval_context: The evaluation context.
        where: Where the data came from, for the message.

    Raises:
        DataError: A kNN evaluator is selected and no query can be evaluated.
    """
    from dmlplug.protocols import HasRequiredK

    knn = [getattr(e, "name", type(e).__name__) for e in evaluators if isinstance(e, HasRequiredK)]
    if not knn or len(eval_context.knn_queries):
        return
    # (an empty query set is refused earlier, by EvalContext)
    what = (f"none of the {eval_context.num_queries} queries has another item of its class in the gallery "
            f"(excluded_queries = {eval_context.excluded_queries})")
    raise DataError(f"no valid query for the kNN evaluators ({', '.join(knn)}): {what}, so every kNN metric is "
                    "undefined", where=where,
                    fix="check query_mask / gallery_mask: each query's class needs at least one other item in the "
                        "gallery (query and gallery share classes; without masks, every class needs two items)")


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
        out.setdefault(name, {})[param] = read_value(raw)
    return out


def evaluate_file(path: str | Path, evaluators: list[str] | None = None, sets: list[str] | None = None, *,
                  host: Any, backend: str = "auto", memory_budget_mb: float | None = None, seed: int = 0,
                  artifacts_dir: str | Path | None = None) -> tuple[dict[str, float], EvalContext]:
    """What ``dmlplug evaluate FILE.npz`` does: load, build the evaluators in ``host``, evaluate, write artifacts.

    Raises:
        DataError: The file is unreadable or invalid (see :func:`load_npz`), or no query can be evaluated
            by the selected kNN evaluators (see :func:`check_valid_queries`).
    """
    names = list(evaluators) if evaluators else list(DEFAULT_EVALUATORS)
    params = parse_set_options(list(sets or []), names)
    specs = [{"name": n, **params.get(n, {})} for n in names]
    built = build_evaluators(specs, host)
    data = load_npz(path)
    eval_context = EvalContext(data["embeddings"], data["labels"], query_mask=data.get("query_mask"),
                      gallery_mask=data.get("gallery_mask"), backend=backend,
                      memory_budget_mb=memory_budget_mb, seed=seed)
    check_valid_queries(built, eval_context, where=str(path))
    metrics = run_evaluators(built, eval_context)
    if artifacts_dir is not None:
        write_all_artifacts(built, eval_context, Path(artifacts_dir))
    return metrics, eval_context


def format_table(metrics: dict[str, float]) -> str:
    """Two aligned columns, metric and value."""
    width = max([len("metric"), *(len(k) for k in metrics)])
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 8}"]
    for key, value in metrics.items():
        shown = str(int(value)) if key == "excluded_queries" and math.isfinite(value) else f"{value:.4f}"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(lines)


def to_json(metrics: dict[str, float]) -> str:
    """One flat JSON object; NaN is written as ``null`` so the output is valid JSON."""
    return json.dumps({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
