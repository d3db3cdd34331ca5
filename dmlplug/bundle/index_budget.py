"""``dmlplug index --budget``: build the candidate codecs, keep the most accurate one that fits in memory.

A budget in plain bytes (``64B``) is per vector; one with a unit (``2GB``, ``512MiB``; K/M/G/T are powers of
1000, Ki/Mi/Gi/Ti of 1024) is the whole index's memory. The candidates are the registered codecs that offer
plans (``budget_plans``: the built-in float32, float16, int8, binary and pq; PQ's sub-quantiser counts, finest
first). A plan whose floor (code and id, ``bytes_floor``) already exceeds the budget is not built; the others
are built (:func:`~dmlplug.bundle.index.build_from`), finest first until one fits, and their bytes per vector in
memory and on disk and their recall on held-out queries measured. The budget bounds the memory: data an index
keeps on disk and reads through a memory map (binary's rescoring vectors) is shown, not counted. The most
accurate candidate that fits wins (highest recall@10, then recall@1, then fewest bytes in memory; a lossy codec
whose recall could not be measured ranks below every measured one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dmlplug.bundle.codec_spec import Codec
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
    exact: bool = False
    memory: float | None = None
    disk: float | None = None
    recall1: float | None = None
    recall10: float | None = None
    fits: bool = False
    note: str = ""


def choose(gallery: Gallery, budget: Budget, codecs: Sequence[Codec], *, k: int = 10,
           seed: int = 0) -> tuple[ExactIndex | CodedIndex, list[Candidate]]:
    """The most accurate index of ``gallery`` within ``budget`` among ``codecs``, and the table of every candidate.

    Raises:
        BundleError: No codec fits the budget (the table is in the message).
    """
    limit = budget.per_vector_for(gallery.size)
    n_kept = gallery.size - len(holdout_rows(gallery.size, seed))
    best: tuple[ExactIndex | CodedIndex, Candidate] | None = None
    table: list[Candidate] = []
    for codec in codecs:
        plans = codec.component.budget_plans(n_kept, gallery.dim, k)
        if not plans:
            continue  # not a compression --budget chooses from (an approximate search structure)
        floors = [float(codec.component.bytes_floor(gallery.dim, plan)) for plan in plans]
        fitting = [plan for plan, floor in zip(plans, floors, strict=True) if floor <= limit]
        if not fitting:
            table.append(Candidate(codec.name, codec.component.exact,
                                   note=f"not built: each vector takes at least {min(floors):g} B (code and id)"))
            continue
        for plan in fitting:  # finest first: the first that fits once built is the one kept
            index = build_from(gallery, codec, k=k, seed=seed, plan=plan)
            info = index.info
            row = Candidate(codec.name, codec.component.exact, info["memory_bytes_per_vector"],
                            info["disk_bytes_per_vector"], info.get("recall@1"),
                            info.get(f"recall@{min(10, n_kept)}"), note=_note(codec, info, plan, plans))
            row.fits = row.memory is not None and row.memory <= limit
            if row.fits:
                break
        table.append(row)
        if row.fits and (best is None or _rank(row) > _rank(best[1])):
            best = index, row
    if best is None:
        raise BundleError(f"no index codec fits the budget {budget.text} ({limit:g} B per vector in memory for "
                          f"{gallery.size} vectors):\n{format_table(table)}", fix="give a larger --budget")
    return best[0], table


def _note(codec: Codec, info: dict[str, Any], plan: dict[str, Any], plans: list[dict[str, Any]]) -> str:
    notes = []
    varied = [key for key in plan if any(other.get(key) != plan[key] for other in plans)]
    if varied:
        chosen = ",".join(f"{key}={plan[key]}" for key in varied)
        notes.append(f"{chosen}: the finest of {len(plans)} settings that fits")
    if not codec.component.exact and not info.get("recall_queries"):
        notes.append("recall not measured: too few vectors to hold a query out")
    return "; ".join(notes)


def _rank(row: Candidate) -> tuple[bool, float, float, float]:
    """Higher is better: measured recall@10, then recall@1, then fewer bytes per vector in memory.

    An exact codec is exact, measured or not. A lossy codec whose recall could not be measured (a gallery too small
    to hold a query out) is never taken for a perfect one: it ranks below every measured candidate, and among
    such candidates the finer codes (more bytes per vector) come first.
    """
    recall10 = 1.0 if row.exact else row.recall10
    recall1 = 1.0 if row.exact else row.recall1
    measured = recall10 is not None
    size = row.memory or 0.0
    return measured, recall10 or 0.0, recall1 or 0.0, -size if measured else size


def format_table(table: list[Candidate], chosen: str | None = None) -> str:
    """The candidates as an aligned text table; ``chosen`` marked with ``*``."""

    def value(x: float | None, form: str) -> str:
        return "-" if x is None else format(x, form)

    lines = [f"  {'codec':<9} {'memory B/vec':>12} {'disk B/vec':>10} {'recall@1':>9} {'recall@10':>9}  fits?"]
    for row in table:
        mark = "*" if row.codec == chosen else " "
        fits = "yes" if row.fits else "no"
        lines.append(f"{mark} {row.codec:<9} {value(row.memory, '.1f'):>12} {value(row.disk, '.1f'):>10} "
                     f"{value(row.recall1, '.4f'):>9} {value(row.recall10, '.4f'):>9}  {fits}"
                     f"{'  (' + row.note + ')' if row.note else ''}")
    return "\n".join(lines)
