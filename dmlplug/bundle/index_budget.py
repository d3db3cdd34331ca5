"""``dmlplug index --budget``: build the candidate codecs, keep the most accurate one that fits.

A budget in plain bytes (``64B``) is per vector; one with a unit (``2GB``, ``512MiB``; K/M/G/T are powers of
1000, Ki/Mi/Gi/Ti of 1024) is the whole index's data files. Each candidate of
:data:`~dmlplug.bundle.codecs.BUDGET_CODECS` whose code and id already exceed the budget is not built; the
others are built (:func:`~dmlplug.bundle.index.build_from`; PQ with the most sub-quantisers that fit), and their
serialized bytes per vector and recall on held-out queries measured. The most accurate one that fits wins
(highest recall@10, then recall@1, then fewest bytes; a lossy codec whose recall could not be measured ranks
below every measured one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from dmlplug.bundle.codecs import BUDGET_CODECS, TUNABLE, code_bytes, plan
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.index import CodedIndex, ExactIndex, Gallery, build_from, holdout_rows

_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "ki": 1024, "mi": 1024**2, "gi": 1024**3,
          "ti": 1024**4}
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(|k|m|g|t|ki|mi|gi|ti)b\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Budget:
    """A memory budget: bytes per vector, or bytes for the whole index."""

    text: str
    per_vector: float | None = None
    total: float | None = None

    def per_vector_for(self, n: int) -> float:
        """The bytes each of ``n`` vectors may take."""
        return self.per_vector if self.per_vector is not None else (self.total or 0) / max(1, n)


def parse_budget(text: str) -> Budget:
    """Read ``64B`` (per vector) or ``2GB`` / ``512MiB`` (total).

    Raises:
        BundleError: Not a size.
    """
    match = _BUDGET.match(text)
    if not match or float(match.group(1)) <= 0:
        raise BundleError(f"--budget {text!r} is not a size", fix="give bytes per vector such as 64B, or a total "
                          "for the whole index such as 2GB or 512MiB")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    return Budget(text, per_vector=value) if not match.group(2) else Budget(text, total=value)


@dataclass
class Candidate:
    """One codec tried for a budget: what it measured, or why it was not built."""

    codec: str
    bytes_per_vector: float | None = None
    recall1: float | None = None
    recall10: float | None = None
    fits: bool = False
    note: str = ""


def choose(gallery: Gallery, budget: Budget, *, k: int = 10, seed: int = 0,
           given: Mapping[str, int | None] | None = None) -> tuple[ExactIndex | CodedIndex, list[Candidate]]:
    """The most accurate index of ``gallery`` within ``budget``, and the table of every candidate.

    Raises:
        BundleError: No codec fits the budget (the table is in the message).
    """
    limit = budget.per_vector_for(gallery.size)
    n_kept = gallery.size - len(holdout_rows(gallery.size, seed))
    best: tuple[ExactIndex | CodedIndex, Candidate] | None = None
    table: list[Candidate] = []
    for codec in BUDGET_CODECS:
        own = {name: value for name, value in (given or {}).items() if name in TUNABLE.get(codec, ())}
        settings, floor = _settings(codec, n_kept, gallery.dim, limit, k, own)
        if not settings:
            table.append(Candidate(codec, note=f"not built: each vector takes at least {floor:g} B (code and id)"))
            continue
        for tried in settings:  # finest first: the first that fits once built is the one kept
            index = build_from(gallery, codec, k=k, seed=seed, given=tried)
            info = index.info
            row = Candidate(codec, info["bytes_per_vector"], info.get("recall@1"),
                            info.get(f"recall@{min(10, n_kept)}"),
                            note=_note(codec, info, tried, own, len(settings)))
            row.fits = row.bytes_per_vector is not None and row.bytes_per_vector <= limit
            if row.fits:
                break
        table.append(row)
        if row.fits and (best is None or _rank(row) > _rank(best[1])):
            best = index, row
    if best is None:
        raise BundleError(f"no index codec fits the budget {budget.text} ({limit:g} B per vector for "
                          f"{gallery.size} vectors):\n{format_table(table)}", fix="give a larger --budget")
    return best[0], table


def _settings(codec: str, n: int, dim: int, limit: float, k: int,
              own: Mapping[str, int | None]) -> tuple[list[dict[str, int | None]], float]:
    """The parameters to try for ``codec`` under ``limit`` bytes per vector, finest first, and the smallest floor.

    PQ's sub-quantiser count is searched (unless ``--pq-m`` gives it): every divisor of ``dim`` up to ``dim / 2``
    whose floor (:func:`~dmlplug.bundle.codecs.code_bytes`) fits, largest first, as more sub-quantisers of the same
    bits keep more of each vector. Beyond ``dim / 2`` the codes would be as large as int8's, which needs no k-means
    per sub-vector to train. The other codecs have one setting. The list is empty when no setting can fit.
    """
    tried = [dict(own)] if codec != "pq" or own.get("pq_m") else \
        [{**own, "pq_m": m} for m in range(max(1, dim // 2), 0, -1) if dim % m == 0]
    floors = [code_bytes(codec, dim, plan(codec, n, dim, k=k, **t)) for t in tried]
    return [t for t, floor in zip(tried, floors, strict=True) if floor <= limit], min(floors)


def _note(codec: str, info: Mapping[str, object], tried: Mapping[str, int | None], own: Mapping[str, int | None],
          choices: int) -> str:
    notes = []
    if codec == "pq" and not own.get("pq_m") and choices > 1:
        notes.append(f"pq_m={tried['pq_m']}: the most sub-quantisers that fit")
    if codec != "float32" and not info.get("recall_queries"):
        notes.append("recall not measured: too few vectors to hold a query out")
    return "; ".join(notes)


def _rank(row: Candidate) -> tuple[bool, float, float, float]:
    """Higher is better: measured recall@10, then recall@1, then fewer bytes per vector.

    ``float32`` is exact, measured or not. A lossy codec whose recall could not be measured (a gallery too small
    to hold a query out) is never taken for a perfect one: it ranks below every measured candidate, and among
    such candidates the finer codes (more bytes per vector) come first.
    """
    exact = row.codec == "float32"
    recall10 = 1.0 if exact else row.recall10
    recall1 = 1.0 if exact else row.recall1
    measured = recall10 is not None
    size = row.bytes_per_vector or 0.0
    return measured, recall10 or 0.0, recall1 or 0.0, -size if measured else size


def format_table(table: list[Candidate], chosen: str | None = None) -> str:
    """The candidates as an aligned text table; ``chosen`` marked with ``*``."""

    def value(x: float | None, form: str) -> str:
        return "-" if x is None else format(x, form)

    lines = [f"  {'codec':<9} {'bytes/vector':>12} {'recall@1':>9} {'recall@10':>9}  fits?"]
    for row in table:
        mark = "*" if row.codec == chosen else " "
        fits = "yes" if row.fits else "no"
        lines.append(f"{mark} {row.codec:<9} {value(row.bytes_per_vector, '.1f'):>12} {value(row.recall1, '.4f'):>9} "
                     f"{value(row.recall10, '.4f'):>9}  {fits}{'  (' + row.note + ')' if row.note else ''}")
    return "\n".join(lines)
