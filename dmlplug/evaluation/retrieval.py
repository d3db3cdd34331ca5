"""Per-query retrieval metrics from the shared kNN graph: recall@k, MAP@R, R-precision, mAP@k and mAP@C.

All metrics are per-query values averaged over the kept (non-lone) queries, or per class first
(``average="classes"``, PML's ``avg_of_avgs``). Notation: ``rel_i`` is the relevance of the i-th
neighbour, ``P(i)`` the precision among the first i, ``R`` the number of relevant gallery items.

* ``recall@k``: 1 when a relevant item is among the first k.
* ``map@r``: ``Σ_{i≤R} P(i)·rel_i / R``; ``r_precision``: ``Σ_{i≤R} rel_i / R``.
* ``map@K`` (standard, = PML ``mean_average_precision`` with k=K): ``Σ_{i≤K} P(i)·rel_i / R``;
  ``map@K_revisiting`` divides by ``R+1`` (class size including the query) as the Revisiting-DML code does.
* ``map@c`` / ``map@c_revisiting``: the same with the cut-off ``R+1`` (the class size).

The evaluators that average them are the built-in plugin's (``dmlplug_builtins.evaluators.retrieval``); the
per-query values are the host's, because the worst-query pictures rank queries by them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlplug.evaluation.context import EvalContext

_ROW_BLOCK_ELEMENTS = 4_000_000  # rows × k elements handled per block (float64 cumsum)


def per_query_metrics(eval_context: EvalContext, specs: Sequence[tuple[str, Any]]) -> dict[str, np.ndarray]:
    """Compute per-query values (rows follow ``eval_context.knn_queries``) for metric specs, cached in ``eval_context``.

    Args:
        eval_context: The evaluation context.
        specs: ``(kind, arg)`` pairs: ``("recall", k)``, ``("map_r", None)``, ``("r_precision", None)``,
            ``("map_k", (k, "standard"|"revisiting"))``, ``("map_c", "standard"|"revisiting")``.

    Returns:
        One float64 array per spec, keyed by :func:`spec_key`.
    """
    todo = [s for s in specs if ("per_query", s) not in eval_context.cache]
    if todo:
        for s in todo:
            eval_context.request_k(spec_depth(eval_context, s))
        hits = eval_context.hits()
        relevant = eval_context.relevant[eval_context.knn_queries].astype(np.float64)
        out = {s: np.empty(len(relevant)) for s in todo}
        width = hits.shape[1]
        block = max(1, _ROW_BLOCK_ELEMENTS // max(1, width))
        ranks = np.arange(1, width + 1, dtype=np.float64)
        for start in range(0, len(relevant), block):
            h = hits[start:start + block]
            r = relevant[start:start + block]
            hf = h.astype(np.float64)
            precision_hits = _hit_counts(h) / ranks * hf  # P(i)·rel_i
            for spec in todo:
                out[spec][start:start + block] = _evaluate_spec(spec, h, hf, precision_hits, r, ranks)
        for spec, values in out.items():
            eval_context.cache[("per_query", spec)] = values
    return {spec_key(s): eval_context.cache[("per_query", s)] for s in specs}


def _hit_counts(h: np.ndarray) -> np.ndarray:
    """``Σ_{j≤i} rel_j`` for every row and rank as float64 (exact: small integers), like ``np.cumsum(h, axis=1)``.

    Accumulated one rank at a time over all rows at once: ``np.cumsum`` along rows of a few dozen columns makes
    one short inner loop per row, ~10× slower on the CUB-size set (6,000 × 34: ~2 ms against ~0.2 ms).
    """
    counts = h.T.astype(np.float64)  # ranks × rows in the memory order of h (no transposing copy)
    for i in range(1, len(counts)):
        counts[i] += counts[i - 1]
    # C order again (a view here, no copy): the sums over ranks that follow add in the same order as before.
    return np.ascontiguousarray(counts.T)


def spec_depth(eval_context: EvalContext, spec: tuple[str, Any]) -> int | np.ndarray:
    """Exact neighbours a metric needs: one int, or one per kept query (R_q for MAP@R)."""
    kind, arg = spec
    if kind == "recall":
        return int(arg)
    if kind in ("map_r", "r_precision"):
        return eval_context.relevant[eval_context.knn_queries]
    if kind == "map_k":
        return int(arg[0])
    if kind == "map_c":
        return eval_context.relevant[eval_context.knn_queries] + 1
    raise ValueError(f"unknown retrieval metric {kind!r}")


def _evaluate_spec(spec, h, hf, precision_hits, r, ranks) -> np.ndarray:
    kind, arg = spec
    if kind == "recall":
        return h[:, : int(arg)].any(1).astype(np.float64)
    if kind in ("map_r", "r_precision"):
        within = ranks[None, :] <= r[:, None]
        src = precision_hits if kind == "map_r" else hf
        return (src * within).sum(1) / r
    if kind == "map_k":
        k, norm = arg
        total = precision_hits[:, : int(k)].sum(1)
        return total / (r if norm == "standard" else r + 1)
    if kind == "map_c":
        within = ranks[None, :] <= (r + 1)[:, None]
        total = (precision_hits * within).sum(1)
        return total / (r if arg == "standard" else r + 1)
    raise ValueError(f"unknown retrieval metric {kind!r}")


def spec_key(spec: tuple[str, Any]) -> str:
    """The metric name of a spec (``recall@4``, ``map@r``, ``map@1000_revisiting`` ...)."""
    kind, arg = spec
    if kind == "recall":
        return f"recall@{int(arg)}"
    if kind == "map_r":
        return "map@r"
    if kind == "r_precision":
        return "r_precision"
    if kind == "map_k":
        k, norm = arg
        return f"map@{int(k)}" + ("" if norm == "standard" else "_revisiting")
    if kind == "map_c":
        return "map@c" + ("" if arg == "standard" else "_revisiting")
    raise ValueError(f"unknown retrieval metric {kind!r}")
