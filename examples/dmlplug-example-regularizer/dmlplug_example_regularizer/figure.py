"""The logger that draws every centre bank of a run at each evaluation."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

from dmlplug import hookimpl
from dmlplug.files import atomic_write


class CentreFigureLogger:
    """At every evaluation, writes ``<run>/<folder>/centre_bank_<recipe path>.png`` (replaced each time).

    Args:
        folder: Folder of the run directory the figures go to.
    """

    def __init__(self, folder: str = "figures"):
        self.folder = folder
        self.written: list[Path] = []

    @hookimpl
    def on_eval_end(self, run: Any, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Draw the centres of every ``example_centre_bank`` in ``run.components``."""
        from dmlplug_example_regularizer.centre_bank import CentreBank

        for path, component in run.components.items():
            if isinstance(component, CentreBank):
                slug = re.sub(r"\W+", "_", path).strip("_")
                target = Path(run.directory) / self.folder / f"centre_bank_{slug}.png"
                title = f"{path}, epoch {epoch}"
                atomic_write(target, partial(draw, component, title))
                self.written.append(target)


def draw(bank: Any, title: str, handle: Any) -> None:
    """PNG of the cosine similarities between the centres and of their norms, into ``handle``."""
    import torch
    from matplotlib.figure import Figure

    centres = bank.centres.detach().float().cpu()
    seen = (bank.counts > 0).cpu()
    unit = torch.nn.functional.normalize(centres[seen], dim=1)
    fig = Figure(figsize=(8, 3.2))
    left, right = fig.subplots(1, 2)
    image = left.imshow((unit @ unit.t()).numpy() if len(unit) else [[0.0]], vmin=-1, vmax=1, cmap="coolwarm")
    fig.colorbar(image, ax=left)
    left.set_title("cosine similarity of centres")
    left.set_xlabel("classes with a centre")
    right.bar(range(len(centres)), centres.norm(dim=1).numpy())
    right.set_xlabel("class")
    right.set_title("centre norm")
    fig.suptitle(f"{title}: {int(bank.updates)} updates, T = {float(bank.temperature.detach()):.3f}")
    fig.tight_layout()
    fig.savefig(handle, format="png")
