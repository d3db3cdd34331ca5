"""Retrieval pictures at every evaluation: PNG grids of queries and their top-k neighbours.

``[evaluation] pictures = true`` (the default) writes two grids per evaluation, on the main process only:

* ``pictures/<split>/epoch_<NNN>_worst.png``: the queries with the lowest average precision;
* ``pictures/<split>/epoch_<NNN>_sample.png``: a fixed random sample of queries (drawn from ``run.seed``),
  the same at every evaluation, so their neighbours can be watched improving.

Selection lives in :mod:`dmlplug.evaluation.pictures`, drawing in :mod:`dmlplug.evaluation.picture_grid`.
The paths of the latest grids are on the run view (``RunView.latest_pictures``), where the TensorBoard
logger reads them in ``on_eval_end``. Datasets whose sources do not give PIL images are skipped (logged
once per split). A picture never fails a run: an error while drawing is logged as a warning and training
goes on.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from dmlplug.files import atomic_write

log = logging.getLogger("dmlplug.pictures")

#: Folder of the pictures inside the run directory.
FOLDER = "pictures"
#: The grids of one evaluation, in the order they are written and logged.
KINDS = ("worst", "sample")

_skipped: set[tuple[str, str]] = set()  # (run directory, split) already logged as having no images


def at_evaluation(run: Any, split: str) -> None:
    """Write the evaluation's grids (main process) and record their paths as ``run.latest_pictures``.

    ``run.latest_pictures`` maps each kind (``"worst"``, ``"sample"``) to its PNG; it is empty when pictures
    are off, on other ranks, for a dataset without images, or when drawing failed.
    """
    run.latest_pictures = {}
    options = run.recipe.recipe.evaluation
    if not options.pictures or not run.dist.is_main or run.eval_context is None:
        return
    try:
        run.latest_pictures = write_pictures(
            run.eval_context, getattr(run.components.dataset, split), run.directory / FOLDER / split,
            epoch=run.epoch, split=split, queries=options.pictures_queries, k=options.pictures_k,
            seed=run.recipe.recipe.run.seed)
    except Exception as exc:  # a picture is a by-product: it must not end a long training run
        log.warning("retrieval pictures of the %s split not written: %s: %s", split, type(exc).__name__, exc)


def write_pictures(eval_context: Any, source: Any, directory: Path, *, epoch: int, split: str, queries: int, k: int,
                   seed: int, thumb: int = 64) -> dict[str, Path]:
    """Draw the worst-queries and fixed-sample grids of ``eval_context`` and write them into ``directory``.

    Args:
        eval_context: The evaluation's :class:`~dmlplug.evaluation.EvalContext` (item ``i`` is ``source`` item ``i``).
        source: The evaluated :class:`~dmlplug.data.ImageSource` (its untransformed images are shown).
        directory: Where the PNGs go (``<run>/pictures/<split>``).
        epoch: The evaluation's epoch (0: the untrained model), in the file names.
        split: The split's name, in the titles.
        queries: Rows (queries) per grid.
        k: Neighbours per query.
        seed: Seed of the fixed sample.
        thumb: Side of a thumbnail in pixels.

    Returns:
        ``{"worst": path, "sample": path}``, or ``{}`` when the source gives no images or no query has a
        relevant gallery item.
    """
    from dmlplug.evaluation.picture_grid import render_grid, retrieval_cells
    from dmlplug.evaluation.pictures import query_average_precision, retrieve_rows, sample_queries, worst_queries

    if not gives_images(source):
        key = (str(directory), split)
        if key not in _skipped:
            _skipped.add(key)
            log.info("no retrieval pictures for the %s split: its source gives no PIL images", split)
        return {}
    if len(eval_context.knn_queries) == 0:
        return {}
    ap_name, ap = query_average_precision(eval_context)
    rows = {"worst": worst_queries(ap, queries), "sample": sample_queries(len(ap), queries, seed)}
    titles = {"worst": f"{split}, epoch {epoch}: the {len(rows['worst'])} worst queries by {ap_name}",
              "sample": f"{split}, epoch {epoch}: {len(rows['sample'])} fixed random queries"}
    images: dict[int, Any] = {}  # both grids may show the same items: decode each once

    def load(item: int) -> Any:
        if item not in images:
            images[item] = source.load_image(item)
        return images[item]

    names = list(getattr(source, "class_names", []) or [])

    def class_name(label: int) -> str:
        return names[label] if 0 <= label < len(names) else str(label)

    written: dict[str, Path] = {}
    for kind in KINDS:
        cells = retrieval_cells(retrieve_rows(eval_context, rows[kind], k, ap), load, class_name, ap_name)
        title = titles[kind] + "\nframe: green = same class, red = other class; number: cosine similarity"
        grid = render_grid(cells, title=title, thumb=thumb)
        written[kind] = atomic_write(directory / f"epoch_{epoch:03d}_{kind}.png", partial(grid.save, format="PNG"))
    return written


def gives_images(source: Any) -> bool:
    """Whether ``source`` yields PIL images (tried on its first item); feature-only sources do not."""
    if source is None or len(source) == 0:
        return False
    try:
        image = source.load_image(0)
    except NotImplementedError:
        return False
    from PIL import Image

    return isinstance(image, Image.Image)
