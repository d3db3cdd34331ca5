"""Offline, deterministic rendering of the embedded glyph dataset.

A class is one Unicode character; its images are renderings in the fonts that ship with matplotlib
(DejaVu Sans/Serif/Mono and their bold/oblique files, STIX General, Computer Modern for Latin letters and
digits), each under a random affine warp, stroke width, blur, contrast and noise. Characters are grouped
into families (scripts and symbol blocks) so that class-disjoint and family-disjoint splits are possible.

The class catalogue is fixed: families are listed in a fixed order, each family's characters in a fixed
shuffled order, and classes are taken round-robin over families. ``num_classes`` takes a prefix of that
catalogue and every class draws its images from its own random generator seeded by ``(seed, code
point)``, so asking for more classes or more images never changes the images already there.

This module imports numpy, Pillow and matplotlib at module level; the plugin imports it lazily.
"""

from __future__ import annotations

import math
import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from dmlplug.errors import DataError
from dmlplug_builtins.datasets.glyphs import round_robin

#: Bumped whenever a change to this module changes the generated pixels (part of the cache key).
GENERATOR_VERSION = 1

#: Unicode-complete faces, in order of preference: the first face holding a character is its reference
#: face (duplicate detection) and the order of the face list of every class.
UNICODE_FACES: tuple[str, ...] = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
)

#: Computer Modern faces. Their character maps follow TeX's OT1 encoding, which agrees with Unicode only
#: on ASCII letters and digits, so families opt into them explicitly.
CM_TEXT_FACES: tuple[str, ...] = ("cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmti10.ttf", "cmtt10.ttf")
CM_MATH_ITALIC = "cmmi10.ttf"
CM_CALLIGRAPHIC = "cmsy10.ttf"  # its A-Z slots hold calligraphic capitals


@dataclass(frozen=True)
class Family:
    """A group of characters that belong together (a script or a Unicode symbol block).

    Attributes:
        name: Family name used in class names (``"greek:α"``) and in family splits.
        ranges: Inclusive code point ranges.
        extra_faces: Non-Unicode faces whose character map is valid for this family.
        name_contains: Keep only characters whose Unicode name contains this text (Arabic isolated forms).
    """

    name: str
    ranges: tuple[tuple[int, int], ...]
    extra_faces: tuple[str, ...] = ()
    name_contains: str = ""

    def candidates(self) -> list[str]:
        """Letters, digits and symbols of the family's ranges (no marks, spaces or punctuation)."""
        chars = []
        for first, last in self.ranges:
            for code in range(first, last + 1):
                char = chr(code)
                if unicodedata.category(char)[0] not in "LNS":
                    continue
                if self.name_contains and self.name_contains not in unicodedata.name(char, ""):
                    continue
                chars.append(char)
        return chars


#: Families in priority order: a character that looks the same as one of an earlier family (Greek Α and
#: Latin A) is dropped, so the earlier family keeps it.
FAMILIES: tuple[Family, ...] = (
    Family("latin_upper", ((0x41, 0x5A),), (*CM_TEXT_FACES, CM_MATH_ITALIC, CM_CALLIGRAPHIC)),
    Family("latin_lower", ((0x61, 0x7A),), (*CM_TEXT_FACES, CM_MATH_ITALIC)),
    Family("digits", ((0x30, 0x39),), CM_TEXT_FACES),
    Family("greek", ((0x391, 0x3A9), (0x3B1, 0x3C9))),
    Family("cyrillic", ((0x410, 0x44F),)),
    Family("armenian", ((0x531, 0x556), (0x561, 0x586))),
    Family("hebrew", ((0x5D0, 0x5EA),)),
    Family("georgian", ((0x10A0, 0x10FF),)),
    Family("arabic", ((0xFE70, 0xFEFC),), name_contains="ISOLATED FORM"),
    Family("nko", ((0x7C0, 0x7EA),)),
    Family("lao", ((0xE81, 0xEDF),)),
    Family("tifinagh", ((0x2D30, 0x2D7F),)),
    Family("ogham", ((0x1680, 0x169C),)),
    Family("canadian_syllabics", ((0x1401, 0x167F),)),
    Family("ipa", ((0x250, 0x2AF),)),
    Family("letterlike", ((0x2100, 0x214F),)),
    Family("currency", ((0x20A0, 0x20CF),)),
    Family("math_operators", ((0x2200, 0x22FF),)),
    Family("arrows", ((0x2190, 0x21FF), (0x27F0, 0x27FF), (0x2900, 0x297F))),
    Family("box_drawing", ((0x2500, 0x257F),)),
    Family("geometric_shapes", ((0x25A0, 0x25FF),)),
    Family("misc_symbols", ((0x2600, 0x26FF),)),
    Family("dingbats", ((0x2700, 0x27BF),)),
    Family("braille", ((0x2801, 0x28FF),)),
    Family("yijing", ((0x4DC0, 0x4DFF),)),
)

FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)

#: A character whose reference rendering has at least this cosine similarity with an earlier kept
#: character's is a look-alike (Α/A, о/o, ∖/\\) and is dropped: two classes no model could separate.
DUPLICATE_COSINE = 0.97

#: Resolution of the reference renderings used for duplicate detection.
_REFERENCE_SIZE = 24

#: Supersampling factor: glyphs are warped at this multiple of the output size, then box-filtered down.
_OVERSAMPLE = 2

#: Font size as a fraction of the (supersampled) canvas; Latin capitals then fill about 55 % of it.
_FONT_FRACTION = 0.75

#: Largest ink extent as a fraction of the canvas before a glyph is shrunk (tall arrows, box drawing).
_MAX_EXTENT = 0.85


class GlyphArrays(NamedTuple):
    """The generated dataset; unpacks as ``images, labels, class_names, families``.

    Attributes:
        images: ``N×H×W`` uint8, bright ink on a dark background, grouped by class.
        labels: ``N`` int64 class indices ``0 .. C-1`` (catalogue order).
        class_names: ``"family:char"`` per class.
        families: Family name per class.
    """

    images: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    families: list[str]


@dataclass(frozen=True)
class GlyphClass:
    """One catalogue entry: a character and the faces that can render it."""

    char: str
    family: str
    faces: tuple[str, ...]

    @property
    def name(self) -> str:
        """Class name ``"family:char"``."""
        return f"{self.family}:{self.char}"


def font_dir() -> Path:
    """The folder of TrueType fonts that ships with matplotlib."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def font_fingerprint() -> list[tuple[str, int]]:
    """Name and size of every font file the generator may use (part of the cache key)."""
    folder = font_dir()
    names = sorted({*UNICODE_FACES, *(face for fam in FAMILIES for face in fam.extra_faces)})
    return [(name, (folder / name).stat().st_size) for name in names if (folder / name).is_file()]


@cache
def _charmap(face: str) -> frozenset[int]:
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(str(font_dir() / face)).get_charmap())


@lru_cache(maxsize=256)
def _font(face: str, size: int) -> ImageFont.FreeTypeFont:
    # BASIC layout: one code point -> one glyph, with no shaping that could depend on libraqm's version.
    return ImageFont.truetype(str(font_dir() / face), size, layout_engine=ImageFont.Layout.BASIC)


def _available_faces(family: Family) -> list[str]:
    folder = font_dir()
    return [face for face in (*UNICODE_FACES, *family.extra_faces) if (folder / face).is_file()]


def rasterize(char: str, face: str, size: int, stroke: int = 0) -> Image.Image | None:
    """Render ``char`` in ``face`` at font ``size`` px, cropped to its ink; ``None`` when it is blank.

    Args:
        char: One character.
        face: Font file name in :func:`font_dir`.
        size: Font size in pixels.
        stroke: Extra outline width in pixels (thickens the strokes).
    """
    font = _font(face, size)
    left, top, right, bottom = font.getbbox(char, stroke_width=stroke)
    pad = 2 + stroke
    # Pillow types getbbox as floats; FreeType's bounding box is in whole pixels (ints).
    image = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad))  # type: ignore[arg-type]
    ImageDraw.Draw(image).text((pad - left, pad - top), char, font=font, fill=255,
                               stroke_width=stroke, stroke_fill=255)
    ink = image.getbbox()
    return None if ink is None else image.crop(ink)


def _place(glyph: Image.Image, canvas: int, *, scale: float = 1.0, angle: float = 0.0, shear: float = 0.0,
           aspect: float = 1.0, shift: tuple[float, float] = (0.0, 0.0)) -> Image.Image:
    """Warp a cropped glyph onto a ``canvas``-sized square, centred on its ink.

    The forward map is: move the ink centre to the origin, scale (``scale·aspect`` in x,
    ``scale/aspect`` in y), shear along x, rotate by ``angle`` degrees, move to the canvas centre plus
    ``shift``. Glyphs whose ink is larger than :data:`_MAX_EXTENT` of the canvas are shrunk first so that
    tall symbols are not cut off, while ordinary glyphs keep their relative sizes (``o`` vs ``O``).
    """
    width, height = glyph.size
    fit = min(1.0, _MAX_EXTENT * canvas / max(width, height))
    sx, sy = scale * fit * aspect, scale * fit / aspect
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    # forward = rotation @ [[1, shear], [0, 1]] @ diag(sx, sy), written out (called once per image).
    a, b = cos * sx, (cos * shear - sin) * sy
    c, d = sin * sx, (sin * shear + cos) * sy
    det = a * d - b * c
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    # PIL wants the map from output pixel to input pixel: x_in = inverse @ (x_out - out_c) + in_c.
    ox, oy = canvas / 2 + shift[0], canvas / 2 + shift[1]
    coeffs = (ia, ib, width / 2 - ia * ox - ib * oy, ic, id_, height / 2 - ic * ox - id_ * oy)
    return glyph.transform((canvas, canvas), Image.Transform.AFFINE, coeffs, resample=Image.Resampling.BILINEAR)


def _reference_image(char: str, face: str) -> np.ndarray | None:
    canvas = _REFERENCE_SIZE * _OVERSAMPLE
    glyph = rasterize(char, face, round(_FONT_FRACTION * canvas))
    if glyph is None:
        return None
    placed = _place(glyph, canvas).reduce(_OVERSAMPLE)
    return np.asarray(placed, dtype=np.float32).ravel()


@lru_cache(maxsize=1)
def glyph_catalog() -> tuple[GlyphClass, ...]:
    """Every usable class, in the fixed catalogue order (round-robin over :data:`FAMILIES`).

    A character is usable when at least two faces hold it, its reference face renders ink, and it does
    not look like a character kept before it (see :data:`DUPLICATE_COSINE`).

    Raises:
        DataError: matplotlib's font folder holds none of the expected fonts.
    """
    entries: list[GlyphClass] = []
    references: list[np.ndarray] = []
    per_family: dict[str, list[GlyphClass]] = {}
    for family in FAMILIES:
        faces = _available_faces(family)
        for char in family.candidates():
            holders = tuple(face for face in faces if ord(char) in _charmap(face))
            if len(holders) < 2:
                continue
            reference = _reference_image(char, holders[0])
            if reference is None:
                continue
            entries.append(GlyphClass(char, family.name, holders))
            references.append(reference)
    if not entries:
        raise DataError(
            "no usable glyph fonts were found for the embedded dataset",
            where=str(font_dir()),
            fix="reinstall matplotlib (its DejaVu/STIX fonts are needed to render the 'glyphs' dataset)",
        )
    matrix = np.stack(references)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    similarity = matrix @ matrix.T
    kept: list[int] = []
    for index, entry in enumerate(entries):
        if kept and similarity[index, kept].max() >= DUPLICATE_COSINE:
            continue
        kept.append(index)
        per_family.setdefault(entry.family, []).append(entry)
    ordered = []
    for family in FAMILIES:
        members = per_family.get(family.name, [])
        # A fixed shuffle per family (seeded by its name, not by the dataset seed) so that a prefix of
        # the catalogue samples each family across its whole block, not just its first code points.
        rng = np.random.default_rng(zlib.crc32(family.name.encode()))
        ordered.append([members[i] for i in rng.permutation(len(members))])
    return tuple(round_robin(ordered))


def _render_class(entry: GlyphClass, count: int, image_size: int, seed: int) -> np.ndarray:
    """``count`` varied renderings of one class, drawn from the class's own generators.

    Image ``i`` depends only on ``(seed, char, i, image_size)``: the warp parameters come from one
    generator consumed image by image, the pixel noise from a second one, so rendering more images per
    class leaves the first ones unchanged.
    """
    canvas = image_size * _OVERSAMPLE
    font_size = round(_FONT_FRACTION * canvas)
    rng = np.random.default_rng([seed, ord(entry.char), 0])
    noise = np.random.default_rng([seed, ord(entry.char), 1]).standard_normal((count, image_size, image_size))
    faces = list(entry.faces)
    rasters: dict[tuple[str, int], Image.Image | None] = {}
    coverage = np.empty((count, image_size, image_size), dtype=np.float64)
    levels = np.empty((count, 3))
    for i in range(count):
        # A face whose glyph renders blank is dropped and the draw repeated; the reference face renders
        # ink (checked by the catalogue), so the loop ends.
        while True:
            face = faces[int(rng.integers(len(faces)))]
            if _cached_raster(rasters, entry.char, face, font_size, 0) is not None:
                break
            faces.remove(face)
        # One vector draw per image (scalar generator calls dominate the run time otherwise).
        u = rng.random(11)
        stroke = int(u[0] * 3)  # 0, 1 or 2 supersampled pixels of extra outline
        raster = _cached_raster(rasters, entry.char, face, font_size, stroke)
        assert raster is not None  # the glyph has ink without outline (above), so it has with one
        placed = _place(
            raster,
            canvas,
            angle=-12.0 + 24.0 * u[1],
            shear=-0.2 + 0.4 * u[2],
            scale=0.8 + 0.3 * u[3],
            aspect=math.exp(-0.1 + 0.2 * u[4]),
            shift=((u[5] - 0.5) * 0.16 * canvas, (u[6] - 0.5) * 0.16 * canvas),
        ).reduce(_OVERSAMPLE)
        blur = 0.8 * float(u[7])
        if blur > 0.25:
            placed = placed.filter(ImageFilter.GaussianBlur(blur))
        coverage[i] = np.asarray(placed, dtype=np.float64)
        levels[i] = 50.0 * u[8], 170.0 + 85.0 * u[9], 18.0 * u[10]  # background, ink, noise std
    background, ink, noise_std = (levels[:, j, None, None] for j in range(3))
    pixels = background + (ink - background) * (coverage / 255.0) + noise_std * noise
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def _cached_raster(cache: dict[tuple[str, int], Image.Image | None], char: str, face: str, size: int,
                   stroke: int) -> Image.Image | None:
    key = (face, stroke)
    if key not in cache:
        cache[key] = rasterize(char, face, size, stroke)
    return cache[key]


def generate_glyphs(num_classes: int, images_per_class: int, image_size: int, seed: int,
                    families: Sequence[str] | None = None) -> GlyphArrays:
    """Render the glyph dataset in memory (no cache; see ``dmlplug_builtins.datasets.glyphs.load_glyphs``).

    Args:
        num_classes: Number of classes, a prefix of :func:`glyph_catalog` (of its classes in ``families``).
        images_per_class: Images rendered per class.
        image_size: Side length of the square greyscale images.
        seed: Seed of the random variations; with the same arguments the arrays are byte-identical.
        families: Only classes of these families (default: all). A class renders the same images whichever
            families are chosen, since its images depend on its character alone.

    Returns:
        ``GlyphArrays(images, labels, class_names, families)``, grouped by class.

    Raises:
        DataError: More classes are asked for than the installed fonts provide, or a size is invalid.
    """
    catalog = glyph_catalog()
    if families is not None:
        # Filtering the round-robin catalogue keeps it round-robin over the chosen families.
        chosen_families = set(families)
        catalog = tuple(entry for entry in catalog if entry.family in chosen_families)
    if not 1 <= num_classes <= len(catalog):
        among = "" if families is None else f" in the families {', '.join(families)}"
        raise DataError(
            f"the glyph dataset has {len(catalog)} classes{among}; {num_classes} were asked for",
            where="dataset.num_classes",
            fix=f"choose num_classes between 1 and {len(catalog)}" + ("" if families is None else
                                                                     ", or add families"),
        )
    if images_per_class < 1 or image_size < 8:
        raise DataError(
            f"invalid glyph dataset size: images_per_class={images_per_class}, image_size={image_size}",
            where="dataset",
            fix="use images_per_class >= 1 and image_size >= 8",
        )
    chosen = catalog[:num_classes]
    images = np.concatenate([_render_class(entry, images_per_class, image_size, seed) for entry in chosen])
    labels = np.repeat(np.arange(num_classes, dtype=np.int64), images_per_class)
    return GlyphArrays(images, labels, [e.name for e in chosen], [e.family for e in chosen])


def family_counts(families: Sequence[str]) -> dict[str, int]:
    """Number of classes per family, in :data:`FAMILIES` order (families without classes omitted)."""
    counts = {name: 0 for name in FAMILY_NAMES}
    for family in families:
        counts[family] += 1
    return {name: n for name, n in counts.items() if n}
