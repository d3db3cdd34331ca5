"""Threshold calibration: which cosine-similarity threshold to deploy, what it accepts, how evenly per class.

:func:`calibrate` takes the embeddings of a labelled split and, over every unordered pair of it (positive:
same label; negative: different labels), finds

* for each target false-accept rate F, the global threshold ``t`` with FAR(t) ≤ F, also for float32 scores,
  and the highest TAR, the TAR there, and how that TAR spreads over classes;
* the threshold with the highest F1 over pairs (precision = accepted positives / accepted pairs);
* the OPIS threshold-inconsistency of the split (Zhang et al., ICLR 2024; ``docs/methods/tcm.md``), computed
  by the ``opis`` evaluator's own code with its defaults.

**Convention.** A pair is accepted when ``similarity ≥ threshold``. FAR(t) is the share of negative pairs
accepted, TAR(t) the share of positive pairs accepted. With ``n`` negative pairs, at most ``k = ⌊F·n⌋`` may
be accepted; if ``v`` is the (k+1)-th largest negative similarity, every threshold above ``v`` accepts at most
k of them in exact arithmetic. A deployed search scores pairs in float32 (ONNX Runtime, faiss, numpy), whose
rounding moves a score by up to a margin ``m`` (:func:`score_margin`, about ``D·2⁻²⁴``), so a negative tied or
nearly tied with ``v`` could score above a threshold just above ``v`` and be the (k+1)-th accepted. The
threshold is therefore the smallest float32 value above ``v + m``: no negative pair with similarity ``≤ v``
reaches it in float32, whatever the summation order, so FAR ≤ F holds for the float32 scores of the
embeddings calibrated on; being a float32 value, comparing a score with it in float32 or float64 agrees.
TAR, FAR and the per-class spread are counted at that threshold. The max-F1 threshold is a positive pair's
similarity (F1 can only peak there); among equal F1 the highest threshold wins.

The result's dataclasses (:class:`Calibration` …) live in :mod:`dmlplug.evaluation.calibration_table` beside
their printed table, and are importable from here.

**Scale.** Counting is exact for any split size in bounded memory (:mod:`dmlplug.evaluation.pair_scan`): a
chunked pass histograms all pair similarities into ``bins`` fine bins, a second pass collects the exact values
of the few bins where a threshold lies. 6 000 items (18 M pairs) take seconds; 60 000 items (1.8 G pairs) take
two passes of a 60k×60k float64 matrix product in blocks (minutes on a few CPU cores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlplug.errors import DataError
from dmlplug.evaluation.calibration_table import WORST_SHOWN, Calibration, ClassSpread, F1Threshold, FarThreshold
from dmlplug.evaluation.pair_scan import PairScan, Refined, bin_index, normalize

#: The ``opis`` evaluator's defaults (plugins/evaluators OpisParams and PairParams; a test keeps them equal).
OPIS_DEFAULTS: dict[str, Any] = {
    "pairs": {"mode": "auto", "max_all_pairs": 20_000_000, "negative_ratio": 10.0,
              "max_positives_per_class": 100_000},
    "grid_size": 100, "far_range": (1e-2, 1e-1), "distance_range": None, "kind": "roc",
    "epsilon": 0.1, "pooling": "average",
}
#: Unit roundoff of float32: a rounding moves a float32 value by at most this share of it.
F32_UNIT = 2.0**-24
#: Rows whose L2 norm is this close to 1 are scored as given (a bundle's embeddings); others are normalised.
UNIT_NORM_TOLERANCE = 1e-4


def calibrate(embeddings: Any, labels: Any, *, far_targets: Sequence[float] = (1e-3, 1e-2),
              split: str | None = None, test_split: bool = False, bins: int = 2**20,
              memory_budget_mb: float = 256.0, max_refine_pairs: int = 20_000_000, opis: bool = True,
              opis_options: dict[str, Any] | None = None, seed: int = 0) -> Calibration:
    """Calibrate acceptance thresholds on the embeddings of a labelled split (see the module docstring).

    Args:
        embeddings: ``N×D`` array (or anything ``np.asarray`` reads; move CUDA tensors to the CPU first): the
            vectors a deployment scores, as a bundle embeds them (unit length, float32). The FAR thresholds
            hold for float32 inner products of these rows (of their float32 L2 normalisation when a row is
            not of unit length).
        labels: ``N`` integer labels.
        far_targets: Target false-accept rates, each in (0, 1).
        split: Name of the split, recorded in the result.
        test_split: Whether the split is the test split, recorded and shown as a warning.
        bins: Histogram bins over [-1, 1] of the exact scan (more bins: less to refine, more memory).
        memory_budget_mb: Working memory of one block of the scan.
        max_refine_pairs: Most exact pair similarities held at once for refinement.
        opis: Compute OPIS and ε-OPIS (with the ``opis`` evaluator's code).
        opis_options: Overrides of :data:`OPIS_DEFAULTS` (e.g. a run's own ``opis`` evaluator settings).
        seed: Seed of OPIS's pair sampling (large splits only).

    Returns:
        The :class:`Calibration`.

    Raises:
        DataError: Bad shapes, non-finite values, a zero embedding, a target outside (0, 1), a split without
            positive or without negative pairs, or a threshold bin too full to refine (raise ``bins``).
    """
    x_raw, y = _check_inputs(embeddings, labels, far_targets)
    labels_sorted, dense = np.unique(y, return_inverse=True)
    exact = normalize(x_raw)
    margin = score_margin(x_raw, exact)
    scan = PairScan(exact, dense, memory_budget_mb)
    pos_hist, neg_hist = scan.histograms(bins)
    n_pos, n_neg = int(pos_hist.sum()), int(neg_hist.sum())
    if n_pos == 0 or n_neg == 0:
        kind = "positive (two items of one label)" if n_pos == 0 else "negative (two labels)"
        raise DataError(f"the split has no {kind} pair, so no threshold can be calibrated",
                        where=f"calibration on split {split!r}", fix="calibrate on a split with several "
                        "classes and at least two items in some class")
    pos_gt = _above(pos_hist)
    neg_gt = _above(neg_hist)
    # The bins from the one holding v up to the highest one the threshold (above v + margin) can fall in.
    far_intervals = [(b, _margin_bin(b, margin, bins)) for b in
                     (_far_bin(neg_hist, neg_gt, _allowed(f, n_neg)) for f in far_targets)]
    for lo, hi in far_intervals:
        held = int(pos_hist[lo:hi + 1].sum() + neg_hist[lo:hi + 1].sum())
        if held > max_refine_pairs:
            raise DataError(f"{held} pairs share the histogram bins at a threshold", where="calibration",
                            fix="raise `bins` or `max_refine_pairs`")
    f1_interval, f1_bound = _f1_interval(pos_hist, neg_hist, pos_gt, neg_gt, n_pos, max_refine_pairs)
    refined = scan.refine([*far_intervals, f1_interval], bins)
    class_pairs = np.bincount(dense, minlength=len(labels_sorted)).astype(np.int64)
    class_pairs = class_pairs * (class_pairs - 1) // 2
    thresholds = [_far_threshold(f, r, pos_gt[r.hi], neg_gt[r.hi], margin, n_pos, n_neg, class_pairs,
                                 labels_sorted) for f, r in zip(far_targets, refined[:-1], strict=True)]
    r = refined[-1]
    max_f1 = _max_f1(r, pos_gt[r.hi], neg_gt[r.hi], n_pos, n_neg, class_pairs, labels_sorted, f1_bound)
    values = _opis(x_raw, y, {**OPIS_DEFAULTS, **(opis_options or {})}, seed, memory_budget_mb) if opis else {}
    return Calibration(split, bool(test_split), len(y), len(labels_sorted), n_pos, n_neg, thresholds, max_f1,
                       values.get("opis"), values.get("eps_opis"), bins=bins, score_margin=margin)


def score_margin(embeddings: np.ndarray, exact: np.ndarray) -> float:
    """Bound on the gap between a float32 score of two rows and the exact similarity ``ŝ`` the scan counts.

    A deployment scores float32 rows ``e`` (the rows as given when of unit length, as a bundle's embeddings
    are; else their float32 L2 normalisation) by a float32 inner product in any summation order; the scan
    counts ``ŝ = q_a·q_b`` of the rows ``q`` = :func:`~dmlplug.evaluation.pair_scan.normalize` (``exact``). With
    ``M = max‖e‖``, ``Q = max‖q‖``, ``r = max‖e − q‖`` and ``γ = D·u/(1 − D·u)``, ``u = 2⁻²⁴``:
    ``|fl32(e_a·e_b) − ŝ| ≤ γ·M² + r·(M + Q)`` (Higham's bound for a D-term float32 dot product, FMA or not,
    plus the distance of the scored rows from the counted ones); ``D·2⁻⁵⁰`` more covers float64 rounding.
    That is about ``4·10⁻⁶`` for D = 64 and ``3·10⁻⁵`` for D = 512.
    """
    x = np.asarray(embeddings, dtype=np.float64)  # float32 values, exactly
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    scored = x if np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOLERANCE) else (
        (x / norms).astype(np.float32).astype(np.float64))
    d = x.shape[1]
    largest = float(np.linalg.norm(scored, axis=1).max())
    gap = float(np.linalg.norm(scored - exact, axis=1).max())
    gamma = d * F32_UNIT / (1.0 - d * F32_UNIT)
    return gamma * largest**2 + gap * (largest + float(np.linalg.norm(exact, axis=1).max())) + d * 2.0**-50


def float32_above(value: float) -> float:
    """The smallest float32 number strictly greater than ``value``, as a Python float."""
    t = np.float32(value)
    if float(t) <= value:
        t = np.nextafter(t, np.float32(np.inf))
    return float(t)


# ------------------------------------------------------------------------------------------ thresholds
def _allowed(far: float, n_neg: int) -> int:
    """Negative pairs a threshold may accept at ``far`` (the verification evaluator's rounding)."""
    return int(math.floor(far * n_neg + 1e-9))


def _above(hist: np.ndarray) -> np.ndarray:
    """Pairs in bins strictly above each bin."""
    total = np.cumsum(hist[::-1])[::-1]  # pairs in bins ≥ b
    return total - hist


def _far_bin(neg_hist: np.ndarray, neg_gt: np.ndarray, allowed: int) -> int:
    """The bin holding the (allowed+1)-th largest negative similarity."""
    at_or_above = neg_gt + neg_hist
    return int(np.flatnonzero(at_or_above >= allowed + 1)[-1])


def _margin_bin(b: int, margin: float, bins: int) -> int:
    """The highest bin a threshold above ``v + margin`` can fall in, for ``v`` in bin ``b``.

    ``v`` lies below the bin's upper edge; the threshold is at most one float32 step (≤ 2⁻²³ below 2) above
    ``v + margin``, so a point 2⁻²² above ``edge + margin`` bounds it.
    """
    upper = -1.0 + (b + 1) * 2.0 / bins + margin + 2.0**-22
    return max(b, min(bins - 1, int(bin_index(np.array([upper]), bins)[0])))


def _far_threshold(target: float, r: Refined, pos_gt: int, neg_gt: int, margin: float, n_pos: int, n_neg: int,
                   class_pairs: np.ndarray, labels: np.ndarray) -> FarThreshold:
    """The FAR threshold from the exact values of bins ``r.lo..r.hi`` (``pos_gt``/``neg_gt``: pairs above)."""
    neg = np.sort(r.neg)[::-1]
    v = neg[_allowed(target, n_neg) - neg_gt]  # the (allowed+1)-th largest negative overall
    threshold = float32_above(float(v) + margin)
    accepted_neg = int(neg_gt + np.count_nonzero(neg >= threshold))
    hit = r.pos >= threshold
    accepted_pos = int(pos_gt + np.count_nonzero(hit))
    per_class = r.pos_above + np.bincount(r.pos_class[hit], minlength=len(class_pairs))
    return FarThreshold(float(target), threshold, accepted_pos / n_pos, accepted_neg / n_neg,
                        accepted_pos, accepted_neg, _spread(per_class, class_pairs, labels))


def _f1(tp: Any, fp: Any, n_pos: int) -> Any:
    return 2.0 * tp / (tp + fp + n_pos)


def _f1_interval(pos_hist: np.ndarray, neg_hist: np.ndarray, pos_gt: np.ndarray, neg_gt: np.ndarray,
                 n_pos: int, budget: int) -> tuple[tuple[int, int], float | None]:
    """The bins that can hold the max-F1 threshold, as one interval within ``budget`` pairs.

    A threshold inside bin b accepts between ``pos_gt[b]`` and ``pos_gt[b] + pos_hist[b]`` positives and at
    least ``neg_gt[b]`` negatives, which bounds its F1 from above; accepting the whole bin and everything
    above is a real threshold whose F1 bounds the maximum from below. Only bins whose upper bound reaches
    the best lower bound can hold the maximum.
    """
    upper = _f1(pos_gt + pos_hist, neg_gt, n_pos)
    lower = _f1(pos_gt + pos_hist, neg_gt + neg_hist, n_pos)
    best = float(lower.max())
    candidates = np.flatnonzero((pos_hist > 0) & (upper >= best * (1 - 1e-12)))
    lo, hi = int(candidates[0]), int(candidates[-1])
    size = np.cumsum(pos_hist + neg_hist)
    if size[hi] - (size[lo - 1] if lo else 0) <= budget:
        return (lo, hi), None
    # Too many pairs: grow an interval from the most promising bin while the budget allows.
    lo = hi = int(candidates[np.argmax(upper[candidates])])
    count = int(pos_hist[lo] + neg_hist[lo])
    while True:
        options = [b for b in (lo - 1, hi + 1) if 0 <= b < len(pos_hist) and
                   count + pos_hist[b] + neg_hist[b] <= budget]
        if not options:
            break
        b = max(options, key=lambda k: upper[k] if pos_hist[k] else -1.0)
        count += int(pos_hist[b] + neg_hist[b])
        lo, hi = min(lo, b), max(hi, b)
    left_out = candidates[(candidates < lo) | (candidates > hi)]
    return (lo, hi), (float(upper[left_out].max()) if len(left_out) else None)


def _max_f1(r: Refined, pos_gt: int, neg_gt: int, n_pos: int, n_neg: int, class_pairs: np.ndarray,
            labels: np.ndarray, bound: float | None) -> F1Threshold:
    pos, neg = np.sort(r.pos), np.sort(r.neg)
    values = np.unique(pos)  # candidate thresholds, ascending
    tp = pos_gt + len(pos) - np.searchsorted(pos, values, side="left")  # positives ≥ value
    fp = neg_gt + len(neg) - np.searchsorted(neg, values, side="left")
    f1 = _f1(tp, fp, n_pos)
    i = len(values) - 1 - int(np.argmax(f1[::-1]))  # highest threshold among equal F1
    t = float(values[i])
    hit = r.pos >= t
    per_class = r.pos_above + np.bincount(r.pos_class[hit], minlength=len(class_pairs))
    # Bins left out of the search can only matter when their upper bound reaches the F1 found.
    exact = bool(bound is None or bound < f1[i])
    return F1Threshold(t, float(tp[i] / (tp[i] + fp[i])), float(tp[i] / n_pos), float(f1[i]), float(tp[i] / n_pos),
                       float(fp[i] / n_neg), _spread(per_class, class_pairs, labels), exact,
                       None if exact else bound)


def _spread(accepted: np.ndarray, class_pairs: np.ndarray, labels: np.ndarray) -> ClassSpread:
    """Per-class TAR statistics over the classes with positive pairs."""
    keep = class_pairs > 0
    tar = accepted[keep] / class_pairs[keep]
    order = np.lexsort((labels[keep], tar))[:WORST_SHOWN]
    worst = [{"label": int(labels[keep][i]), "tar": float(tar[i]), "positive_pairs": int(class_pairs[keep][i])}
             for i in order]
    p10, median, p90 = (float(v) for v in np.quantile(tar, [0.1, 0.5, 0.9]))
    return ClassSpread(int(keep.sum()), float(tar.mean()), float(tar.std()), float(tar.min()), p10, median, p90,
                       float(tar.max()), worst)


# ------------------------------------------------------------------------------------------- helpers
def _opis(x: np.ndarray, y: np.ndarray, options: dict[str, Any], seed: int,
          budget_mb: float) -> dict[str, float | None]:
    """OPIS and ε-OPIS by the code the ``opis`` evaluator runs, on the embeddings as given (like a run's evaluation).

    An undefined (NaN) value is None.
    """
    from dmlplug.evaluation.context import EvalContext
    from dmlplug.evaluation.opis import context_curves, opis_metrics

    eval_context = EvalContext(x, y, backend="torch", memory_budget_mb=budget_mb, seed=seed)
    curve_options = {"grid_size": options["grid_size"], "far_range": tuple(options["far_range"]),
                     "distance_range": tuple(options["distance_range"]) if options["distance_range"] else None,
                     "kind": options["kind"]}
    curves = context_curves(eval_context, dict(options["pairs"]), curve_options)
    values = opis_metrics(curves, ["opis", "eps_opis"], options["epsilon"], options["pooling"])
    return {k: (None if math.isnan(v) else float(v)) for k, v in values.items()}


def _check_inputs(embeddings: Any, labels: Any, far_targets: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    try:
        x = np.asarray(embeddings, dtype=np.float32)
        y = np.asarray(labels)
    except (TypeError, ValueError) as exc:
        raise DataError(f"embeddings/labels cannot be read as arrays: {exc}", where="calibration input",
                        fix="pass an N×D float array and N integer labels (CPU numpy)") from None
    if x.ndim != 2 or len(x) < 2 or x.shape[1] == 0:
        raise DataError(f"embeddings must be an N×D array with N ≥ 2, got shape {x.shape}",
                        where="calibration input", fix="pass one embedding per row")
    if y.shape != (len(x),) or y.dtype.kind not in "iu":
        raise DataError(f"labels must be {len(x)} integers, got dtype {y.dtype} shape {y.shape}",
                        where="calibration input", fix="pass one integer label per embedding")
    if not np.isfinite(x).all():
        raise DataError("the embeddings contain NaN or infinite values", where="calibration input",
                        fix="check the model for a numerical failure")
    bad = [f for f in far_targets if not 0 < f < 1]
    if not far_targets or bad:
        raise DataError(f"target false-accept rates must lie in (0, 1), got {list(far_targets)}",
                        where="calibration far_targets", fix="pass e.g. far_targets=(1e-3, 1e-2)")
    return x, y.astype(np.int64)
