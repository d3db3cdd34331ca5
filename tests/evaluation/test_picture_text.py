"""Text of the retrieval pictures: class names in other scripts are drawn with their glyphs, never as empty
boxes, and a name no installed font can draw shows its class index (#26)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.ft2font import FT2Font
from PIL import Image

from dmlplug.evaluation.picture_grid import LINE, QUERY, Cell, caption, cell_box, render_grid, retrieval_cells
from dmlplug.evaluation.picture_text import Face, FontChain, bundled_face, default_chain, other_faces

#: Class names in scripts that matplotlib's DejaVu Sans covers, so every installation draws them.
SCRIPTS = {"cyrillic": "Ёлка", "greek": "Ωμέγα", "arabic": "قطة", "hebrew": "חתול", "armenian": "Կատու",
           "georgian": "კატა", "latin": "ñandú"}
STIX = Face(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "STIXGeneral.ttf"))
#: Characters STIX General has and DejaVu Sans lacks (script letters of mathematics).
STIX_ONLY = "ℊ𝒜"
#: A code point no font has a glyph for (plane 16 private use).
NO_GLYPH = "\U0010fffd"


def _caption_pixels(text: str, fonts: FontChain | None = None) -> np.ndarray:
    """The first caption line of a one-cell grid whose caption is ``text``, as a grey-level array."""
    grid = render_grid([[Cell(Image.new("RGB", (8, 8)), (text, ""), QUERY)]], title="", fonts=fonts)
    left, _, right, bottom = cell_box(0, 0, 64)
    return np.asarray(grid.convert("L").crop((left, bottom + 1, right + 40, bottom + 1 + LINE)))


def _charmap(face: Face) -> set[int]:
    return set(FT2Font(face.path).get_charmap())


@pytest.mark.parametrize("script", SCRIPTS)
def test_class_names_in_other_scripts_are_drawn_with_their_glyphs(script):
    name = SCRIPTS[script]
    fonts = default_chain()
    assert fonts.covers(name)
    for run, face in fonts.runs(name):  # every character is in the font drawing it (matplotlib's font lookup)
        assert all(ord(char) in _charmap(face) for char in run), (run, face)
    # Drawn: each character leaves ink, and different characters different ink. A missing glyph is the same
    # empty box for every character, which is what the pictures showed before (Pillow's default font).
    pixels = {char: _caption_pixels(char) for char in dict.fromkeys(name)}
    assert all((p < 128).any() for p in pixels.values())
    drawn = list(pixels.values())
    assert all(not np.array_equal(a, b) for i, a in enumerate(drawn) for b in drawn[i + 1:]), script


def test_a_character_no_font_has_is_a_question_mark_and_a_name_with_one_shows_the_class_index():
    fonts = FontChain([bundled_face()])  # an installation without CJK fonts
    assert not fonts.covers("猫") and not fonts.covers(f"a{NO_GLYPH}") and fonts.covers("a b\u200d")
    assert np.array_equal(_caption_pixels(f"x{NO_GLYPH}", fonts), _caption_pixels("x?", fonts))
    assert caption("猫", 7, fonts) == "class 7" and caption("Ёлка", 7, fonts) == "Ёлка"
    row = type("Row", (), {"query": 0, "label": 2, "ap": 0.5, "neighbours": [1], "labels": [0],
                           "similarities": [0.9], "correct": [False]})()
    names = ["Ёлка", "x", "猫"]
    cells = retrieval_cells([row], lambda item: Image.new("RGB", (4, 4)), names.__getitem__, fonts=fonts)
    assert cells[0][0].lines == ("class 2", "AP 0.500") and cells[0][1].lines == ("0.900", "Ёлка")


def test_a_later_font_draws_the_characters_the_first_lacks():
    assert not set(map(ord, STIX_ONLY)) & _charmap(bundled_face())
    fonts = FontChain([bundled_face(), STIX])
    assert fonts.runs(f"a{STIX_ONLY}b") == [("a", bundled_face()), (STIX_ONLY, STIX), ("b", bundled_face())]
    assert not np.array_equal(_caption_pixels("ℊ", fonts), _caption_pixels("𝒜", fonts))
    assert not FontChain([bundled_face()]).covers(STIX_ONLY)
    # The search beyond the chain, for characters none of its faces has.
    searched = FontChain([bundled_face()], more=lambda: [Face("/no/such/font.ttf"), STIX])
    assert searched.face_for("ℊ") == STIX and searched.covers(STIX_ONLY)


def test_the_installations_chain_starts_with_matplotlibs_dejavu_and_skips_placeholder_fonts():
    fonts = default_chain()
    assert fonts.faces[0] == bundled_face() and Path(bundled_face().path).is_file()
    # matplotlib ships "Last Resort", a box for every code point: that is no glyph.
    assert not any("lastresort" in face.path.lower().replace("_", "") for face in [*fonts.faces, *other_faces()])
    found = fonts.face_for(NO_GLYPH)
    assert found is None and fonts.runs(NO_GLYPH) == [("?", bundled_face())]


@pytest.mark.skipif(default_chain().face_for("猫") is None, reason="no CJK font installed (e.g. fonts-noto-cjk)")
def test_cjk_names_are_drawn_where_a_cjk_font_is_installed():
    assert caption("猫咪", 3, default_chain()) == "猫咪"
    assert not np.array_equal(_caption_pixels("猫"), _caption_pixels("咪"))
