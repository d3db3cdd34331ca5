"""Text in retrieval pictures: each character drawn in a font that has it, never as an empty box.

Pillow draws a string in one font and shows an empty box ("tofu") for every character that font lacks, so
class names in Cyrillic, Greek, Arabic or CJK came out as rows of boxes. A :class:`FontChain` splits a caption
into runs and draws each run in the first font that has all of its characters, tried in this order:

1. DejaVu Sans as matplotlib (a dependency) ships it: Latin, Greek, Cyrillic, Armenian, Georgian, Hebrew,
   Arabic and many symbols, on every installation;
2. :data:`FAMILIES`, fonts of other scripts that systems often have (Noto Sans CJK, WenQuanYi, Droid Sans
   Fallback on Linux; PingFang, Hiragino on macOS; Microsoft YaHei, Meiryo, Malgun Gothic on Windows), where
   matplotlib's font manager finds them;
3. any other font the font manager finds, for the characters still missing (looked up once per character).

A character no installed font has is drawn as ``?``; :meth:`FontChain.covers` tells beforehand, so that a
class name that cannot be drawn is replaced by its class index (:func:`dmlplug.evaluation.picture_grid.caption`).
Fonts that draw a placeholder for every character (Last Resort) or map codes to other symbols (TeX's cm*)
are never used. Pictures of CJK class names need a CJK font on the machine, e.g. ``fonts-noto-cjk`` on
Debian/Ubuntu: no font package on PyPI is a reasonable dependency for them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Families tried after DejaVu Sans, in order, where installed: fonts of the scripts DejaVu lacks.
FAMILIES = (
    "Noto Sans", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK KR", "Noto Sans CJK TC",
    "Source Han Sans SC", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback",
    "Noto Sans Arabic", "Noto Sans Hebrew", "Noto Sans Devanagari", "Noto Sans Bengali", "Noto Sans Tamil",
    "Noto Sans Thai", "Noto Sans Khmer", "Noto Sans Ethiopic", "PingFang SC", "Hiragino Sans", "Hiragino Sans GB",
    "Apple SD Gothic Neo", "Microsoft YaHei", "Meiryo", "Malgun Gothic", "Nirmala UI", "Leelawadee UI",
    "Arial Unicode MS",
)
#: Size of caption text in pixels (the height of a caption line is 12).
SIZE = 10
#: Fonts never used: a placeholder glyph for every code point, or TeX fonts whose codes name other symbols.
_UNUSABLE = re.compile(r"^(Last Resort|cm[a-z]+10$|STIXNonUnicode|STIXSize)")


@dataclass(frozen=True)
class Face:
    """One font face: a font file and the face's index in it (a ``.ttc`` collection holds several)."""

    path: str
    index: int = 0


class FontChain:
    """Fonts tried in order for each character of a caption, with Pillow fonts and character maps cached.

    Args:
        faces: The faces tried first, in order; the first also draws ``?`` for a character no face has.
        more: The faces searched, in order, for a character none of ``faces`` has (called once, on first need).
        size: Text size in pixels.
    """

    def __init__(self, faces: Sequence[Face], more: Callable[[], Iterable[Face]] | None = None, size: int = SIZE):
        if not faces:
            raise ValueError("a font chain needs at least one face")
        self.faces = list(faces)
        self.size = size
        self._more = more
        self._more_faces: list[Face] | None = None
        self._charmaps: dict[Face, frozenset[int]] = {}
        self._fonts: dict[Face, Any] = {}
        self._found: dict[str, Face | None] = {}

    def face_for(self, char: str) -> Face | None:
        """The first face that has a glyph for ``char`` and loads at this size, or ``None``."""
        if char not in self._found:
            found = next((f for f in self.faces if self._has(f, char)), None)
            if found is None and self._more is not None:
                if self._more_faces is None:
                    self._more_faces = [f for f in self._more() if f not in self.faces]
                found = next((f for f in self._more_faces if self._has(f, char)), None)
            self._found[char] = found
        return self._found[char]

    def covers(self, text: str) -> bool:
        """Whether every visible character of ``text`` has a face (else it would be drawn as ``?``)."""
        return all(_invisible(c) or self.face_for(c) is not None for c in text)

    def runs(self, text: str) -> list[tuple[str, Face]]:
        """``text`` cut into ``(run, face)``, each character in the first face that has it.

        Whitespace, format characters and combining marks stay in the run before them when its face has
        them, so that a word is shaped as one; a character no face has becomes ``?`` in the first face.
        """
        runs: list[tuple[str, Face]] = []
        for char in text:
            if unicodedata.category(char) == "Cc":
                continue  # control characters have no glyph anywhere
            current = runs[-1][1] if runs else None
            attached = _invisible(char) or unicodedata.category(char).startswith("M")
            if current is not None and attached and (_invisible(char) or self._has(current, char)):
                face = current
            else:
                found = self.face_for(char)
                if found is None:
                    char = char if _invisible(char) else "?"
                face = found or self.faces[0]
            if runs and runs[-1][1] == face:
                runs[-1] = (runs[-1][0] + char, face)
            else:
                runs.append((char, face))
        return runs

    def font(self, face: Face) -> Any:
        """The Pillow font of ``face`` at this size (loaded once)."""
        if face not in self._fonts:
            from PIL import ImageFont

            self._fonts[face] = ImageFont.truetype(face.path, self.size, index=face.index)
        return self._fonts[face]

    def width(self, draw: Any, text: str) -> float:
        """Width of ``text`` in pixels when drawn by :meth:`draw` on the ``ImageDraw`` ``draw``."""
        return float(sum(draw.textlength(run, font=self.font(face)) for run, face in self.runs(text)))

    def draw(self, draw: Any, xy: tuple[float, float], text: str, fill: Any) -> None:
        """Draw ``text`` with its top left at ``xy``, every run on the first face's baseline."""
        x, top = xy
        baseline = top + self.font(self.faces[0]).getmetrics()[0]
        for run, face in self.runs(text):
            font = self.font(face)
            draw.text((x, baseline), run, font=font, fill=fill, anchor="ls")
            x += draw.textlength(run, font=font)

    def _has(self, face: Face, char: str) -> bool:
        if face not in self._charmaps:
            self._charmaps[face] = _charmap(face)
        if ord(char) not in self._charmaps[face]:
            return False
        try:
            self.font(face)
        except OSError:  # e.g. a bitmap-only emoji font, which has no glyphs at this size
            self._charmaps[face] = frozenset()
            return False
        return True


@lru_cache(maxsize=1)
def default_chain() -> FontChain:
    """The chain of this installation: matplotlib's DejaVu Sans, :data:`FAMILIES` where found, then the rest."""
    return FontChain([bundled_face(), *family_faces(FAMILIES)], more=other_faces)


def bundled_face() -> Face:
    """DejaVu Sans as matplotlib ships it: the same file, and so the same pictures, on every installation."""
    import matplotlib

    return Face(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"))


def family_faces(families: Iterable[str]) -> list[Face]:
    """The regular face of each of ``families`` that matplotlib's font manager finds, in order."""
    entries = _entries()
    faces = []
    for family in families:
        matches = [e for e in entries if e.name == family]
        if matches:
            faces.append(_face(min(matches, key=_preference)))
    return list(dict.fromkeys(faces))


def other_faces() -> list[Face]:
    """The faces searched for characters the chain lacks: every font the font manager knows, then new ones.

    Regular upright faces come first; the system's font files that matplotlib's font cache does not list yet
    (a font installed after the cache was built) follow, by path.
    """
    from matplotlib import font_manager

    known = [_face(e) for e in sorted(_entries(), key=_preference)]
    listed = {face.path for face in known} | {e.fname for e in font_manager.fontManager.ttflist}
    new = sorted(p for p in font_manager.findSystemFonts() if p not in listed and not p.lower().endswith(".afm"))
    return list(dict.fromkeys([*known, *(Face(p) for p in new)]))


def _entries() -> list[Any]:
    from matplotlib import font_manager

    return [e for e in font_manager.fontManager.ttflist
            if not _UNUSABLE.match(e.name) and Path(e.fname).suffix.lower() in (".ttf", ".otf", ".ttc")]


def _preference(entry: Any) -> tuple[Any, ...]:
    """Regular upright faces first (weight nearest 400), then by name and file, for a fixed order."""
    weight = entry.weight if isinstance(entry.weight, int) else 400
    return (entry.style != "normal", entry.stretch != "normal", abs(weight - 400), entry.name, entry.fname,
            getattr(entry, "index", 0))


def _face(entry: Any) -> Face:
    return Face(str(entry.fname), int(getattr(entry, "index", 0)))


def _charmap(face: Face) -> frozenset[int]:
    """The code points ``face`` has glyphs for; empty when the file cannot be read."""
    from matplotlib.ft2font import FT2Font

    try:
        font = FT2Font(face.path, face_index=face.index) if face.index else FT2Font(face.path)
        return frozenset(font.get_charmap())
    except (OSError, RuntimeError, TypeError, ValueError):  # a stale cache entry, an unreadable file
        return frozenset()


def _invisible(char: str) -> bool:
    """Whitespace and format characters (joiners, direction marks): no glyph of their own is needed."""
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf")
