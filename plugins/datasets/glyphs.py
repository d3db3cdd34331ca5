"""The embedded default dataset ``glyphs``: characters rendered offline from matplotlib's fonts.

Nothing is downloaded: the images are rendered by :mod:`dmlplug_builtins.datasets.glyph_render` in a few
seconds and cached as one ``.npz`` of uint8 arrays. Classes are characters grouped in families (scripts
and symbol blocks), so a recipe can hold out half of every family's classes (``split = "interleaved"``,
the usual zero-shot protocol) or whole families (``split = "families"``, a distribution shift).

The parameters and the factory are in :mod:`dmlplug_builtins.datasets`. Importing this module is cheap:
numpy, Pillow and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from dmlplug.errors import DataError
from dmlplug_builtins.datasets import DEFAULT_TEST_FAMILIES

if TYPE_CHECKING:
    import numpy as np

    from dmlplug.data import DatasetBundle
    from dmlplug_builtins.datasets import GlyphsParams
    from dmlplug_builtins.datasets.glyph_render import GlyphArrays

T = TypeVar("T")

#: Classes per family in the catalogue that matplotlib's fonts give
#: (:func:`~dmlplug_builtins.datasets.glyph_render.glyph_catalog`, families in ``FAMILIES`` order). Kept as
#: data so that ``dmlplug validate`` knows the split sizes of any ``num_classes`` without loading fonts or
#: rendering; tests/datasets/test_glyphs.py checks it against the rendered catalogue.
CATALOG_FAMILY_SIZES: dict[str, int] = {
    "latin_upper": 26, "latin_lower": 26, "digits": 10, "greek": 34, "cyrillic": 44, "armenian": 67,
    "hebrew": 26, "georgian": 82, "arabic": 43, "nko": 38, "lao": 49, "tifinagh": 47, "ogham": 26,
    "canadian_syllabics": 383, "ipa": 87, "letterlike": 70, "currency": 26, "math_operators": 249,
    "arrows": 251, "box_drawing": 107, "geometric_shapes": 96, "misc_symbols": 178, "dingbats": 149,
    "braille": 184, "yijing": 15,
}


def round_robin(groups: Sequence[Sequence[T]]) -> list[T]:
    """One item of every group in turn (the first of each, then the second ...): the catalogue order."""
    out: list[T] = []
    for position in range(max((len(g) for g in groups), default=0)):
        out.extend(group[position] for group in groups if position < len(group))
    return out


def catalog_families(num_classes: int, families: Sequence[str] | None = None) -> list[str]:
    """The family of each of the first ``num_classes`` catalogue classes, from :data:`CATALOG_FAMILY_SIZES`.

    Args:
        num_classes: Number of classes.
        families: Only classes of these families, as the dataset's ``families`` parameter (default: all).

    Returns:
        A list shorter than ``num_classes`` when more classes are asked for than the recorded catalogue holds.
    """
    chosen = CATALOG_FAMILY_SIZES if families is None else {
        name: size for name, size in CATALOG_FAMILY_SIZES.items() if name in set(families)}
    return round_robin([[name] * size for name, size in chosen.items()])[:num_classes]


def check_glyph_splits(params: GlyphsParams) -> None:
    """Raise the :class:`DataError` that :func:`build_bundle` would raise for a split of fewer than two classes.

    Nothing is rendered.

    The classes are assigned to splits by :func:`split_glyph_classes` itself, over the families of the
    catalogue prefix (:func:`catalog_families`). A ``num_classes`` beyond the recorded catalogue is left to
    :func:`build_bundle`, which checks it against the installed fonts.
    """
    families = catalog_families(params.num_classes, params.families)
    if len(families) < params.num_classes:
        return
    try:
        glyph_split_counts(families, params.split, params.test_families, params.val_fraction)
    except DataError as exc:
        smallest = smallest_valid_num_classes(params)
        if smallest is None:
            raise
        raise DataError(exc.what, where="dataset.num_classes",
                        fix=f"use num_classes >= {smallest} (the smallest count that gives every split two classes "
                            f"with these settings), another split or test_families, or a smaller val_fraction"
                        ) from None


def split_class_counts(params: GlyphsParams) -> dict[str, int] | None:
    """The number of classes of every split, from the catalogue order; ``None`` beyond the recorded catalogue.

    Raises:
        DataError: A split would have fewer than two classes (:func:`check_glyph_splits` says so at validation).
    """
    families = catalog_families(params.num_classes, params.families)
    if len(families) < params.num_classes:
        return None
    return glyph_split_counts(families, params.split, params.test_families, params.val_fraction)


def smallest_valid_num_classes(params: GlyphsParams) -> int | None:
    """The smallest ``num_classes`` above ``params.num_classes`` whose every split has two classes, others equal.

    :func:`split_glyph_classes` refuses exactly the splits a run refuses, so the count it accepts is one a run
    accepts too; every split's class count grows with ``num_classes``, so every larger count is accepted too.
    """
    every = catalog_families(sum(CATALOG_FAMILY_SIZES.values()), params.families)
    for count in range(params.num_classes + 1, len(every) + 1):
        try:
            glyph_split_counts(every[:count], params.split, params.test_families, params.val_fraction)
        except DataError:
            continue
        return count
    return None


def generate_glyphs(num_classes: int, images_per_class: int, image_size: int, seed: int,
                    families: Sequence[str] | None = None) -> GlyphArrays:
    """Render the glyph dataset in memory, without the cache.

    Args:
        num_classes: Number of classes (a prefix of the fixed catalogue: more classes never change the
            images of the first ones).
        images_per_class: Images per class.
        image_size: Side length of the square greyscale images.
        seed: Seed of the variations; the same arguments give byte-identical arrays.
        families: Only classes of these families (default: all); a class's images do not depend on it.

    Returns:
        ``GlyphArrays(images, labels, class_names, families)``: ``N×H×W`` uint8 images grouped by class,
        int64 labels ``0 .. C-1``, ``"family:char"`` names and the family of each class.
    """
    from dmlplug_builtins.datasets import glyph_render

    return glyph_render.generate_glyphs(num_classes, images_per_class, image_size, seed, families)


def default_cache_dir() -> Path:
    """``$DMLPLUG_CACHE`` when set, else ``~/.cache/dmlplug``."""
    return Path(os.environ.get("DMLPLUG_CACHE") or Path.home() / ".cache" / "dmlplug").expanduser()


def cache_key(num_classes: int, images_per_class: int, image_size: int, seed: int,
              families: Sequence[str] | None = None) -> str:
    """Hash of everything that determines the generated arrays.

    It covers the arguments, the generator version, the font files (names and sizes) and the Pillow and
    FreeType versions that rasterize them, so a changed renderer never serves stale pixels.
    """
    from PIL import __version__ as pillow_version
    from PIL import features

    from dmlplug_builtins.datasets import glyph_render

    payload = {
        "generator_version": glyph_render.GENERATOR_VERSION,
        "num_classes": num_classes,
        "images_per_class": images_per_class,
        "image_size": image_size,
        "seed": seed,
        "fonts": glyph_render.font_fingerprint(),
        "pillow": pillow_version,
        "freetype": features.version("freetype2"),
    }
    if families is not None:  # absent otherwise, so that caches written before the parameter stay valid
        payload["families"] = sorted(set(families))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def cache_file(num_classes: int, images_per_class: int, image_size: int, seed: int,
               cache_dir: str | Path | None = None, families: Sequence[str] | None = None) -> Path:
    """Where :func:`load_glyphs` keeps the arrays for these arguments."""
    return _cache_path(cache_key(num_classes, images_per_class, image_size, seed, families), num_classes,
                       images_per_class, image_size, seed, cache_dir)


def _cache_path(key: str, num_classes: int, images_per_class: int, image_size: int, seed: int,
                cache_dir: str | Path | None) -> Path:
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    name = f"glyphs-{num_classes}x{images_per_class}-{image_size}px-seed{seed}-{key[:16]}.npz"
    return folder / "glyphs" / name


def load_glyphs(num_classes: int = 300, images_per_class: int = 32, image_size: int = 32, seed: int = 0,
                cache_dir: str | Path | None = None, families: Sequence[str] | None = None) -> GlyphArrays:
    """Like :func:`generate_glyphs`, but read from the cache when possible and written to it otherwise."""
    arrays, _, _ = _load_or_generate(num_classes, images_per_class, image_size, seed, cache_dir, families)
    return arrays


def _load_or_generate(num_classes: int, images_per_class: int, image_size: int, seed: int,
                      cache_dir: str | Path | None, families: Sequence[str] | None = None
                      ) -> tuple[GlyphArrays, Path, bool]:
    """The arrays, the cache file, and whether they came from it."""
    key = cache_key(num_classes, images_per_class, image_size, seed, families)
    path = _cache_path(key, num_classes, images_per_class, image_size, seed, cache_dir)
    if path.is_file():
        try:
            return _read_cache(path, key, num_classes, images_per_class, image_size), path, True
        except Exception as exc:  # any unreadable file is regenerated: the cache is only an optimisation
            warnings.warn(f"glyph dataset cache {path} is unreadable ({type(exc).__name__}: {exc}); "
                          "regenerating it", RuntimeWarning, stacklevel=3)
    arrays = generate_glyphs(num_classes, images_per_class, image_size, seed, families)
    _write_cache(path, key, arrays)
    return arrays, path, False


def _read_cache(path: Path, key: str, num_classes: int, images_per_class: int,
                image_size: int) -> GlyphArrays:
    import numpy as np

    from dmlplug_builtins.datasets.glyph_render import GlyphArrays

    with np.load(path, allow_pickle=False) as data:
        if str(data["key"]) != key:
            raise ValueError("the file belongs to other generation parameters")
        images, labels = data["images"], data["labels"]
        class_names, families = [str(s) for s in data["class_names"]], [str(s) for s in data["families"]]
    expected = (num_classes * images_per_class, image_size, image_size)
    if images.shape != expected or images.dtype != np.uint8 or labels.shape != (expected[0],):
        raise ValueError(f"arrays have shape {images.shape}, expected {expected}")
    if len(class_names) != num_classes or len(families) != num_classes:
        raise ValueError("class names do not match the number of classes")
    return GlyphArrays(images, labels.astype(np.int64), class_names, families)


def _write_cache(path: Path, key: str, arrays: GlyphArrays) -> None:
    """Write atomically (temporary file + rename) so that a reader never sees half a file."""
    import numpy as np

    temp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, key=np.array(key), images=arrays.images, labels=arrays.labels,
                     class_names=np.array(arrays.class_names), families=np.array(arrays.families))
        os.chmod(temp_name, 0o644)  # mkstemp creates owner-only files; the cache is shareable
        os.replace(temp_name, path)
    except OSError as exc:
        warnings.warn(f"could not write the glyph dataset cache {path} ({exc}); it will be regenerated "
                      "next time", RuntimeWarning, stacklevel=3)
        if temp_name is not None and os.path.exists(temp_name):
            os.unlink(temp_name)


def glyph_split_counts(families: list[str], split: str = "interleaved", test_families: list[str] | None = None,
                       val_fraction: float = 0.0) -> dict[str, int]:
    """The number of classes :func:`split_glyph_classes` puts in each split, and its errors, without numpy.

    ``dmlplug validate`` checks the split sizes of every glyph recipe: which classes go to validation is random,
    how many is not, so the check needs no generator (importing numpy would double validate's start-up).

    Raises:
        DataError: As :func:`split_glyph_classes`.
    """
    is_test = _test_classes(families, split, test_families)
    counts = {"train": is_test.count(False), "test": is_test.count(True)}
    if val_fraction > 0:
        counts["val"] = min(_val_count(val_fraction, counts["train"]), counts["train"])
        counts["train"] -= counts["val"]
    _check_split_counts(counts, families, split)
    return counts


def split_glyph_classes(families: list[str], split: str = "interleaved",
                        test_families: list[str] | None = None, val_fraction: float = 0.0,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """Assign classes to ``train`` / ``test`` (and ``val``) splits.

    Args:
        families: Family of every class, in class order.
        split: ``"interleaved"``: within each family, classes alternate train, test, train, … in
            catalogue order; ``"families"``: the classes of ``test_families`` are the test classes.
        test_families: Families held out by ``"families"`` (default :data:`DEFAULT_TEST_FAMILIES`).
        val_fraction: Fraction of the training classes moved, at random (``seed``), to ``val``.
        seed: Seed of the validation choice.

    Returns:
        Sorted int64 class indices per split; ``val`` only when ``val_fraction > 0``.

    Raises:
        DataError: A split would have fewer than two classes (:data:`dmlplug.data.splits.MIN_SPLIT_CLASSES`).
    """
    import numpy as np

    is_test_array = np.asarray(_test_classes(families, split, test_families), dtype=bool)
    splits = {"train": np.flatnonzero(~is_test_array), "test": np.flatnonzero(is_test_array)}
    if val_fraction > 0:
        train = splits["train"]
        chosen = np.zeros(len(train), dtype=bool)
        count = _val_count(val_fraction, len(train))
        chosen[np.random.default_rng([seed, 2]).permutation(len(train))[:count]] = True
        splits["train"], splits["val"] = train[~chosen], train[chosen]
    _check_split_counts({name: len(classes) for name, classes in splits.items()}, families, split)
    return {name: classes.astype(np.int64) for name, classes in splits.items()}


def _test_classes(families: list[str], split: str, test_families: list[str] | None) -> list[bool]:
    """Whether each class is a test class (the split rules of :func:`split_glyph_classes`)."""
    if split == "interleaved":
        position: dict[str, int] = {}
        is_test = []
        for family in families:
            is_test.append(position.get(family, 0) % 2 == 1)
            position[family] = position.get(family, 0) + 1
        return is_test
    if split == "families":
        held_out = set(test_families or DEFAULT_TEST_FAMILIES)
        return [family in held_out for family in families]
    raise DataError(f"unknown glyph split {split!r}", where="dataset.split", fix='use "interleaved" or "families"')


def _val_count(val_fraction: float, train_classes: int) -> int:
    return max(1, round(val_fraction * train_classes))


def _check_split_counts(counts: dict[str, int], families: list[str], split: str) -> None:
    from dmlplug.params import MIN_SPLIT_CLASSES  # not from dmlplug.data.splits, which imports numpy

    for name, count in counts.items():
        # A run refuses a split of one class too (dmlplug.data.splits.check_split_sizes): catching it here lets
        # validate say so, and makes smallest_valid_num_classes suggest a count that gives every split two.
        if count < MIN_SPLIT_CLASSES:
            found = f"only {count} class" if count else "no classes"
            raise DataError(
                f"the glyph dataset's {name} split has {found}, fewer than the {MIN_SPLIT_CLASSES} a run needs "
                f"({len(families)} classes, split={split!r})",
                where="dataset",
                fix="use more classes (num_classes), another split or test_families, or a smaller val_fraction",
            )


def build_bundle(params: GlyphsParams) -> DatasetBundle:
    """Build the ``glyphs`` dataset bundle (generated or read from the cache)."""
    import numpy as np

    from dmlplug.data import ArraySource, DatasetBundle
    from dmlplug_builtins.datasets.glyph_render import GENERATOR_VERSION, family_counts

    arrays, path, hit = _load_or_generate(params.num_classes, params.images_per_class, params.image_size,
                                          params.seed, params.cache_dir, params.families)
    splits = split_glyph_classes(arrays.families, params.split, params.test_families,
                                 params.val_fraction, params.seed)
    sources: dict[str, ArraySource] = {}
    for name, classes in splits.items():
        keep = np.isin(arrays.labels, classes)
        # Classes are sorted, so searchsorted re-indexes labels densely 0 .. C'-1 in class order.
        labels = np.searchsorted(classes, arrays.labels[keep]).astype(np.int64)
        sources[name] = ArraySource(arrays.images[keep], labels, [arrays.class_names[c] for c in classes],
                                    name=f"glyphs/{name}")
    info = {
        "generator_version": GENERATOR_VERSION,
        "seed": params.seed,
        "num_classes": params.num_classes,
        "images_per_class": params.images_per_class,
        "image_size": params.image_size,
        "split": params.split,
        "families_kept": params.families,
        "cache_path": str(path),
        "cache_hit": hit,
        "counts": {name: {"classes": src.num_classes, "images": len(src)} for name, src in sources.items()},
        "families": {name: family_counts([arrays.families[c] for c in classes])
                     for name, classes in splits.items()},
    }
    return DatasetBundle(train=sources["train"], test=sources["test"], val=sources.get("val"),
                         default_augment="light", info=info)
