"""Drawing a retrieval picture: one row per query, the query first, then its neighbours (Pillow, PNG).

Pillow rather than matplotlib: a 16×6 grid of 64 px thumbnails is pasted and captioned in milliseconds
(``benchmarks/pictures_speed.py``), where a matplotlib figure of 96 axes takes seconds.

Layout (every size in pixels, see :func:`cell_box`): two title lines, then rows of cells. A cell is a
``thumb``×``thumb`` square (the image scaled to fit, centred on white) inside a ``BORDER``-wide frame, with
two caption lines under it. The query's frame is :data:`QUERY`, a neighbour's :data:`CORRECT` (green) when it
has the query's label and :data:`WRONG` (red) otherwise. A gap separates the query column from the
neighbours.

Text is drawn through a :class:`~dmlplug.evaluation.picture_text.FontChain`, so class names in any script
an installed font covers show their glyphs; a name no installed font can draw shows its class index
(:func:`caption`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dmlplug.evaluation.picture_text import FontChain, default_chain

#: Frame colours (RGB): a neighbour of the query's class, of another class, and the query itself.
CORRECT = (0, 160, 0)
WRONG = (215, 0, 0)
QUERY = (40, 80, 200)
BACKGROUND = (255, 255, 255)
TEXT = (0, 0, 0)

BORDER = 3  # frame width
PAD = 4  # space between cells
GAP = 10  # extra space after the query column
LINE = 12  # height of one caption line
TITLE = 2 * LINE + 4  # height of the two title lines


@dataclass
class Cell:
    """One framed thumbnail with its caption lines."""

    image: Any
    lines: tuple[str, ...]
    colour: tuple[int, int, int]


def cell_box(row: int, column: int, thumb: int) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` of the framed cell at ``row``, ``column`` (right/bottom exclusive)."""
    side = thumb + 2 * BORDER
    left = PAD + column * (side + PAD) + (GAP if column > 0 else 0)
    top = TITLE + PAD + row * (side + 2 * LINE + PAD)
    return left, top, left + side, top + side


def render_grid(rows: Sequence[Sequence[Cell]], *, title: str, thumb: int = 64, fonts: FontChain | None = None
                ) -> Any:
    """Draw ``rows`` of cells (the first of each is the query) as an RGB ``PIL.Image.Image``.

    Args:
        rows: Rows of cells; the first cell of a row is the query.
        title: Up to two lines (separated by a newline), cut to the picture's width.
        thumb: Side of a thumbnail in pixels.
        fonts: The fonts of the text (default: :func:`~dmlplug.evaluation.picture_text.default_chain`).
    """
    from PIL import Image, ImageDraw

    fonts = fonts or default_chain()

    columns = max((len(r) for r in rows), default=1)
    right = cell_box(0, max(columns - 1, 0), thumb)[2] + PAD
    bottom = cell_box(max(len(rows) - 1, 0), 0, thumb)[3] + 2 * LINE + PAD
    canvas = Image.new("RGB", (max(right, 360), bottom), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(title.split("\n")[:2]):
        fonts.draw(draw, (PAD, 2 + i * LINE), _fit(draw, fonts, line, canvas.width - 2 * PAD), fill=TEXT)
    for r, cells in enumerate(rows):
        for c, cell in enumerate(cells):
            left, top, right_edge, bottom_edge = cell_box(r, c, thumb)
            draw.rectangle((left, top, right_edge - 1, bottom_edge - 1), fill=cell.colour)
            draw.rectangle((left + BORDER, top + BORDER, right_edge - 1 - BORDER, bottom_edge - 1 - BORDER),
                           fill=BACKGROUND)
            image = _thumbnail(cell.image, thumb)
            canvas.paste(image, (left + BORDER + (thumb - image.width) // 2,
                                 top + BORDER + (thumb - image.height) // 2))
            for i, line in enumerate(cell.lines[:2]):
                fonts.draw(draw, (left, bottom_edge + 1 + i * LINE), _fit(draw, fonts, line, right_edge - left),
                           fill=TEXT)
    return canvas


def retrieval_cells(rows: Sequence[Any], load_image: Callable[[int], Any], class_name: Callable[[int], str],
                    ap_name: str = "AP", fonts: FontChain | None = None) -> list[list[Cell]]:
    """Cells of :class:`~dmlplug.evaluation.pictures.RetrievedRow` rows: query (label, AP), then neighbours.

    Args:
        rows: The retrieved rows.
        load_image: Item index -> RGB PIL image (untransformed).
        class_name: Label -> the name shown (see :func:`caption`).
        ap_name: Name of the per-query metric shown under the query.
        fonts: The fonts the grid is drawn with (default: the installation's).
    """
    fonts = fonts or default_chain()

    def name(label: int) -> str:
        return caption(class_name(label), label, fonts)

    out = []
    for row in rows:
        cells = [Cell(load_image(row.query), (name(row.label), f"{ap_name} {row.ap:.3f}"), QUERY)]
        for item, label, similarity, correct in zip(row.neighbours, row.labels, row.similarities, row.correct,
                                                    strict=True):
            colour = CORRECT if correct else WRONG
            # A wrong neighbour also names its class: what the model confused the query with.
            lines = (f"{similarity:.3f}", "" if correct else name(label))
            cells.append(Cell(load_image(item), lines, colour))
        out.append(cells)
    return out


def caption(name: str, label: int, fonts: FontChain) -> str:
    """``name`` when ``fonts`` can draw all of it, else ``"class <label>"``: an index, never empty boxes."""
    return name if fonts.covers(name) else f"class {label}"


def _thumbnail(image: Any, thumb: int) -> Any:
    """``image`` scaled to fit ``thumb``×``thumb`` (aspect kept); large images are first reduced cheaply."""
    from PIL import Image

    if image.mode != "RGB":
        image = image.convert("RGB")
    scale = thumb / max(image.width, image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)


def _fit(draw: Any, fonts: FontChain, text: str, width: int) -> str:
    """``text`` cut (with ``...``) to at most ``width`` pixels."""
    if fonts.width(draw, text) <= width:
        return text
    while text and fonts.width(draw, text + "...") > width:
        text = text[:-1]
    return text + "..."
