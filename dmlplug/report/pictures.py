"""Retrieval pictures in ``dmlplug report``: the last evaluation's grids of the reported runs.

A run writes ``pictures/<split>/epoch_<NNN>_worst.png`` and ``..._sample.png`` at every evaluation
(``[evaluation] pictures``, see :mod:`dmlplug.engine.pictures`); the report shows the latest pair of each
run. Each grid is tall (one row per query), so the report stays readable with many runs: every run is shown
when there are at most :data:`MAX_RUNS`, else the first run (lowest seed) of each group, at most
:data:`MAX_RUNS` of them; the section says how many were left out and where their pictures are.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dmlplug.report.runs import Group, RunRecord

#: Most runs whose pictures a report shows.
MAX_RUNS = 6
#: The grids of one evaluation, in the order shown (left to right).
KINDS = ("worst", "sample")

_FILE = re.compile(r"^epoch_(\d+)_(worst|sample)\.png$")


@dataclass
class RunPictures:
    """The latest retrieval pictures of one run."""

    label: str
    run: RunRecord
    split: str
    epoch: int
    paths: dict[str, Path] = field(default_factory=dict)


def latest_pictures(run: RunRecord) -> tuple[str, int, dict[str, Path]] | None:
    """``(split, epoch, {kind: png})`` of the run's last evaluation with pictures, or ``None`` without any.

    The split the recipe evaluates (``[evaluation] split``) is preferred when both splits have pictures.
    """
    root = run.directory / "pictures"
    if not root.is_dir():
        return None
    preferred = str(run.recipe.get("evaluation", {}).get("split", "test"))
    splits = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: (p.name != preferred, p.name))
    for folder in splits:
        by_epoch: dict[int, dict[str, Path]] = {}
        for path in folder.iterdir():
            match = _FILE.match(path.name)
            if match:
                by_epoch.setdefault(int(match.group(1)), {})[match.group(2)] = path
        if by_epoch:
            epoch = max(by_epoch)
            return folder.name, epoch, {k: by_epoch[epoch][k] for k in KINDS if k in by_epoch[epoch]}
    return None


def collect(groups: Sequence[Group], *, limit: int = MAX_RUNS) -> tuple[list[RunPictures], int]:
    """The runs whose pictures are shown, and how many runs with pictures are left out.

    Every run when at most ``limit`` runs have pictures; else the first run (lowest seed) of each group, at
    most ``limit`` of them.
    """
    found = []
    for g in groups:
        for run in sorted(g.runs, key=lambda r: (r.seed is None, r.seed or 0, str(r.directory))):
            latest = latest_pictures(run)
            if latest is not None:
                label = g.label + (f" (seed {run.seed})" if len(g.runs) > 1 else "")
                found.append((g.key, RunPictures(label, run, *latest)))
    if len(found) <= limit:
        return [p for _, p in found], 0
    shown: list[RunPictures] = []
    seen = set()
    for key, pictures in found:
        if key not in seen and len(shown) < limit:
            seen.add(key)
            shown.append(pictures)
    return shown, len(found) - len(shown)


def copy_into(shown: Sequence[RunPictures], figure_dir: Path) -> None:
    """Copy the pictures into the report's figure folder (the report then travels without the runs)."""
    figure_dir.mkdir(parents=True, exist_ok=True)
    for i, pictures in enumerate(shown, 1):
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", pictures.run.name)[:40]
        for kind, path in pictures.paths.items():
            target = figure_dir / f"pictures_{i:02d}_{name}_{kind}.png"
            shutil.copyfile(path, target)
            pictures.paths[kind] = target


def markdown(shown: Sequence[RunPictures], left_out: int, relative_to: Path | None = None) -> list[str]:
    """The report's "Retrieval pictures" section as Markdown lines (none without pictures)."""
    if not shown:
        return []
    lines = ["## Retrieval pictures", "",
             "The last evaluation of each run: its worst queries by average precision (left) and a fixed random "
             "sample of queries (right), each query first in its row with its label, then its nearest "
             "neighbours framed green (same class) or red (other class) with their cosine similarity.", ""]
    for pictures in shown:
        lines += [f"### {pictures.label}: {pictures.split}, epoch {pictures.epoch}", ""]
        images = []
        for kind, path in pictures.paths.items():
            link = path.relative_to(relative_to) if relative_to is not None and path.is_relative_to(relative_to) \
                else path
            images.append(f"![{kind}]({link.as_posix()})")
        lines += [" ".join(images), ""]
    if left_out:
        lines += [f"Pictures of {left_out} more runs (other seeds of the groups shown, or groups beyond the first "
                  f"{MAX_RUNS}) are in the `pictures/` folder of their run directories.", ""]
    return lines
