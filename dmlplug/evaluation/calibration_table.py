"""The record of a threshold calibration: its dataclasses, their JSON form and the printed table.

:func:`dmlplug.evaluation.calibration.calibrate` computes a :class:`Calibration` (re-exported there);
``Calibration.to_dict()`` is the ``calibration`` record of ``bundle.json``, ``format_table()`` what
``dmlplug calibrate`` prints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: Classes listed by name in :attr:`ClassSpread.worst`.
WORST_SHOWN = 5


@dataclass
class ClassSpread:
    """How the TAR at one threshold spreads over classes (classes with at least one positive pair).

    Attributes:
        classes: Number of classes taking part.
        mean: Mean per-class TAR (each class weighs the same; the global TAR weighs pairs).
        std: Population standard deviation of the per-class TAR.
        min: Lowest per-class TAR.
        p10: 10th percentile (linear interpolation): 90 % of classes do at least this well.
        median: Median per-class TAR.
        p90: 90th percentile.
        max: Highest per-class TAR.
        worst: Up to five ``{"label", "tar", "positive_pairs"}`` of the lowest TAR (ties by label).
    """

    classes: int
    mean: float
    std: float
    min: float
    p10: float
    median: float
    p90: float
    max: float
    worst: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FarThreshold:
    """The threshold for one target FAR (accept ``similarity ≥ threshold``).

    Attributes:
        target_far: The requested false-accept rate.
        threshold: The smallest float32 value above the (k+1)-th largest negative similarity plus the float32
            score margin, so FAR ≤ ``target_far`` holds for float32 scores too (see the module docstring).
        tar: Share of positive pairs accepted.
        far: Share of negative pairs accepted (≤ ``target_far``).
        accepted_positive: Positive pairs accepted.
        accepted_negative: Negative pairs accepted.
        per_class: Spread of the per-class TAR at this threshold.
    """

    target_far: float
    threshold: float
    tar: float
    far: float
    accepted_positive: int
    accepted_negative: int
    per_class: ClassSpread


@dataclass
class F1Threshold:
    """The threshold of highest pair F1.

    Attributes:
        threshold: The threshold (a positive pair's similarity; accept ``≥``).
        precision: Accepted positive pairs / accepted pairs.
        recall: Accepted positive pairs / positive pairs (= TAR).
        f1: Their harmonic mean.
        tar: Same as ``recall``.
        far: Share of negative pairs accepted.
        per_class: Spread of the per-class TAR at this threshold.
        exact: False when the refinement budget cut the search; then ``f1_bound`` bounds what was missed.
        f1_bound: Upper bound of the F1 of thresholds not searched (``None`` when exact).
    """

    threshold: float
    precision: float
    recall: float
    f1: float
    tar: float
    far: float
    per_class: ClassSpread
    exact: bool = True
    f1_bound: float | None = None


@dataclass
class Calibration:
    """Calibrated thresholds of one split; see :func:`calibrate`.

    Attributes:
        split: Name of the split calibrated on (``"val"``, ``"test"`` …), or ``None``.
        test_split: Whether that split is the test split (the thresholds then come from the data the test
            metrics are measured on; prefer a validation split).
        items: Embeddings calibrated on.
        classes: Distinct labels.
        positive_pairs: Same-label pairs (each unordered pair once).
        negative_pairs: Different-label pairs.
        thresholds: One entry per target FAR, in the order given.
        max_f1: The max-F1 threshold.
        opis: OPIS of the split (``None`` when not computed or undefined).
        eps_opis: ε-OPIS of the split (``None`` likewise).
        similarity: Always ``"cosine"`` (of the L2-normalised embeddings).
        bins: Histogram bins used by the exact scan.
        score_margin: Bound on how far a float32 score of two embeddings can lie from the exact similarity the
            thresholds were counted on (:func:`score_margin`); every FAR threshold sits above it.
    """

    split: str | None
    test_split: bool
    items: int
    classes: int
    positive_pairs: int
    negative_pairs: int
    thresholds: list[FarThreshold]
    max_f1: F1Threshold
    opis: float | None = None
    eps_opis: float | None = None
    similarity: str = "cosine"
    bins: int = 2**20
    score_margin: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain floats and ints; ``None`` for undefined values)."""
        return json_ready(asdict(self))

    def format_table(self) -> str:
        """A readable table of the thresholds, their TAR/FAR, the per-class TAR spread, max-F1 and OPIS."""
        return format_calibration(self)




def _num(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _spread(s: Any) -> str:
    return "".join(f"{v:>7.3f}" for v in (s.min, s.p10, s.median, s.p90, s.max, s.std))


def format_calibration(c: Any) -> str:
    """Header, one row per target FAR, the max-F1 row, OPIS, the worst classes and a test-split warning."""
    split = "unnamed split" if c.split is None else f"split {c.split!r}"
    lines = [
        f"Threshold calibration on {split}{' (TEST split)' if c.test_split else ''}: {c.items} items, "
        f"{c.classes} classes, {c.positive_pairs} positive / {c.negative_pairs} negative pairs",
        "cosine similarity of L2-normalised embeddings; a pair is accepted when similarity >= threshold",
        f"FAR thresholds: float32 values at least {c.score_margin:.2g} (the float32 score margin) above the "
        "boundary similarity",
        "",
        f"{'operating point':<16}{'threshold':>11}{'TAR':>9}{'FAR':>11}   per-class TAR:"
        + "".join(f"{h:>7}" for h in ("min", "p10", "median", "p90", "max", "std")),
    ]
    for t in c.thresholds:
        lines.append(f"{'FAR <= ' + format(t.target_far, 'g'):<16}{t.threshold:>11.6f}{t.tar:>9.4f}"
                     f"{t.far:>11.3g}   {'':14}{_spread(t.per_class)}")
    f = c.max_f1
    lines.append(f"{'max F1':<16}{f.threshold:>11.6f}{f.tar:>9.4f}{f.far:>11.3g}   {'':14}{_spread(f.per_class)}")
    lines.append(f"  max F1 = {f.f1:.4f} (precision {f.precision:.4f}, recall {f.recall:.4f})"
                 + ("" if f.exact else f"; search cut by the memory budget, F1 elsewhere <= {f.f1_bound:.4f}"))
    lines.append(f"  per-class TAR over {f.per_class.classes} classes with positive pairs "
                 "(p10: 90 % of classes accept at least this share of their positive pairs)")
    if c.thresholds:
        worst = ", ".join(f"{w['label']} ({w['tar']:.3f}, {w['positive_pairs']} pairs)"
                          for w in c.thresholds[0].per_class.worst)
        lines.append(f"  lowest per-class TAR at FAR <= {c.thresholds[0].target_far:g}: {worst}")
    lines.append(f"OPIS {_num(c.opis, 5)}  eps-OPIS {_num(c.eps_opis, 5)}  "
                 "(threshold inconsistency across classes; lower is more consistent)")
    if c.test_split:
        lines.append("WARNING: calibrated on the TEST split (the run has no validation split): the thresholds "
                     "were chosen on the data the test metrics are measured on.")
    return "\n".join(lines)


def json_ready(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN as ``None`` (containers walked)."""
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
