"""The printed table of a :class:`~dmlplug.evaluation.calibration.Calibration`."""

from __future__ import annotations

from typing import Any


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
