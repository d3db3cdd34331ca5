"""The embedded glyph dataset: catalogue, rendering, determinism, cache, splits and learnability."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import unicodedata
import warnings

import numpy as np
import pytest
from PIL import Image

import dmlplug
from dmlplug.errors import DataError, RecipeError
from dmlplug.plugins import PluginHost
from dmlplug_builtins.datasets import DEFAULT_TEST_FAMILIES, GlyphsParams, glyph_render
from dmlplug_builtins.datasets import glyphs as glyphs_module
from dmlplug_builtins.datasets.glyphs import (
    CATALOG_FAMILY_SIZES,
    cache_file,
    catalog_families,
    generate_glyphs,
    glyph_split_counts,
    load_glyphs,
    split_glyph_classes,
)

DEFAULT = {"num_classes": 300, "images_per_class": 32, "image_size": 32, "seed": 0}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("glyph-cache")


@pytest.fixture(scope="module")
def default_arrays(cache_dir):
    """The default dataset, generated once into the module's cache (its time is printed with -s)."""
    start = time.perf_counter()
    arrays = load_glyphs(**DEFAULT, cache_dir=cache_dir)
    print(f"\ngenerated the default glyph dataset in {time.perf_counter() - start:.2f} s")
    return arrays


def build_bundle(cache_dir, **params):
    return dmlplug.create("dataset", "glyphs", cache_dir=str(cache_dir), **params)


# --- catalogue ---------------------------------------------------------------------------------------


def test_catalog_offers_at_least_300_classes_in_many_families():
    catalog = glyph_render.glyph_catalog()
    assert len(catalog) >= 300
    assert len({entry.char for entry in catalog}) == len(catalog)
    assert len({entry.family for entry in catalog[:300]}) >= 20


def test_every_face_of_every_class_really_contains_the_character():
    from matplotlib.ft2font import FT2Font

    fonts = {}
    for entry in glyph_render.glyph_catalog():
        assert len(entry.faces) >= 2, entry
        for face in entry.faces:
            if face not in fonts:
                fonts[face] = FT2Font(str(glyph_render.font_dir() / face))
            assert fonts[face].get_char_index(ord(entry.char)) != 0, (entry, face)


def test_classes_lie_in_their_family_ranges_and_are_letters_digits_or_symbols():
    families = {family.name: family for family in glyph_render.FAMILIES}
    for entry in glyph_render.glyph_catalog():
        code = ord(entry.char)
        assert any(first <= code <= last for first, last in families[entry.family].ranges), entry
        assert unicodedata.category(entry.char)[0] in "LNS", entry


def test_look_alikes_of_earlier_families_are_dropped():
    chars = {entry.char for entry in glyph_render.glyph_catalog()}
    assert "A" in chars and "o" in chars
    assert "\u0391" not in chars  # Greek capital alpha renders exactly as Latin A
    assert "\u043e" not in chars  # Cyrillic small o renders exactly as Latin o


def test_blank_glyphs_are_rejected():
    assert glyph_render.rasterize("\u2800", "DejaVuSans.ttf", 48) is None  # the empty braille pattern
    assert glyph_render.rasterize(" ", "DejaVuSans.ttf", 48) is None
    assert glyph_render.rasterize("A", "DejaVuSans.ttf", 48) is not None


# --- placement (a known answer for the affine warp) ---------------------------------------------------


def _ink_box(image):
    rows = np.flatnonzero(np.asarray(image).max(axis=1) > 127)
    cols = np.flatnonzero(np.asarray(image).max(axis=0) > 127)
    return rows[0], rows[-1], cols[0], cols[-1]


def test_place_centres_the_ink_and_shifts_by_whole_pixels():
    bar = Image.new("L", (20, 8), 255)
    centred = np.asarray(glyph_render._place(bar, 64))
    top, bottom, left, right = _ink_box(centred)
    assert (bottom - top + 1, right - left + 1) == (8, 20)
    assert (top + bottom) / 2 == pytest.approx(31.5) and (left + right) / 2 == pytest.approx(31.5)
    shifted = np.asarray(glyph_render._place(bar, 64, shift=(5.0, -3.0)))
    assert np.array_equal(shifted, np.roll(centred, (-3, 5), axis=(0, 1)))


def test_place_rotates_scales_and_shrinks_oversized_glyphs():
    bar = Image.new("L", (20, 8), 255)
    top, bottom, left, right = _ink_box(glyph_render._place(bar, 64, angle=90.0))
    assert (bottom - top + 1, right - left + 1) == (20, 8)
    top, bottom, left, right = _ink_box(glyph_render._place(bar, 64, scale=0.5))
    assert (bottom - top + 1, right - left + 1) == (4, 10)
    tall = Image.new("L", (10, 100), 255)
    top, bottom, _, _ = _ink_box(glyph_render._place(tall, 64))
    assert bottom - top + 1 == pytest.approx(glyph_render._MAX_EXTENT * 64, abs=1)


# --- generated arrays ---------------------------------------------------------------------------------


def test_default_arrays_have_the_promised_shapes_and_names(default_arrays):
    images, labels, class_names, families = default_arrays
    assert images.shape == (300 * 32, 32, 32) and images.dtype == np.uint8
    assert labels.dtype == np.int64
    assert np.array_equal(labels, np.repeat(np.arange(300), 32))
    assert len(class_names) == len(families) == 300
    for name, family in zip(class_names, families, strict=True):
        prefix, char = name.split(":", 1)
        assert prefix == family and len(char) == 1
    assert len(set(class_names)) == 300


def test_images_show_ink_and_differ_within_each_class(default_arrays):
    flat = default_arrays.images.reshape(len(default_arrays.images), -1).astype(np.int64)
    contrast = np.percentile(flat, 99, axis=1) - np.median(flat, axis=1)
    assert contrast.min() > 40, "an image is (nearly) blank"
    for label in range(300):
        members = flat[label * 32:(label + 1) * 32]
        assert len(np.unique(members, axis=0)) == 32
        # Beyond noise: the glyphs themselves move (the per-pixel spread of a class is large somewhere).
        assert members.std(axis=0).max() > 60


def test_generation_is_byte_identical_for_equal_arguments_and_seed_dependent():
    first = generate_glyphs(12, 6, 24, seed=3)
    second = generate_glyphs(12, 6, 24, seed=3)
    assert first.images.tobytes() == second.images.tobytes()
    assert first.class_names == second.class_names
    other = generate_glyphs(12, 6, 24, seed=4)
    assert other.class_names == first.class_names
    assert not np.array_equal(other.images, first.images)


def test_generation_is_identical_in_a_fresh_process():
    import hashlib

    code = ("import hashlib; from dmlplug_builtins.datasets.glyphs import generate_glyphs; "
            "print(hashlib.sha256(generate_glyphs(10, 3, 24, seed=2).images.tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    here = hashlib.sha256(generate_glyphs(10, 3, 24, seed=2).images.tobytes()).hexdigest()
    assert out.stdout.strip() == here


def test_more_classes_or_images_leave_the_first_images_unchanged():
    small = generate_glyphs(8, 4, 24, seed=1)
    more_classes = generate_glyphs(20, 4, 24, seed=1)
    more_images = generate_glyphs(8, 6, 24, seed=1)
    assert np.array_equal(more_classes.images[: 8 * 4], small.images)
    assert more_classes.class_names[:8] == small.class_names
    assert np.array_equal(more_images.images.reshape(8, 6, 24, 24)[:, :4], small.images.reshape(8, 4, 24, 24))


def test_too_many_classes_is_a_data_error():
    with pytest.raises(DataError, match="classes"):
        generate_glyphs(len(glyph_render.glyph_catalog()) + 1, 2, 16, seed=0)


# --- cache ----------------------------------------------------------------------------------------------


def test_cache_hit_renders_nothing_and_is_equal(default_arrays, cache_dir, monkeypatch):
    path = cache_file(**DEFAULT, cache_dir=cache_dir)
    assert path.is_file()
    assert not list(path.parent.glob("*.tmp")), "a temporary file was left behind"

    def no_rendering(*args, **kwargs):
        raise AssertionError("a cache hit rendered the glyphs again")

    # What makes a hit fast is that nothing is rendered: asserted directly, not through a wall-clock bound.
    monkeypatch.setattr(glyphs_module, "generate_glyphs", no_rendering)
    again = load_glyphs(**DEFAULT, cache_dir=cache_dir)
    assert np.array_equal(again.images, default_arrays.images)
    assert np.array_equal(again.labels, default_arrays.labels)
    assert again.class_names == default_arrays.class_names and again.families == default_arrays.families


def test_cache_key_depends_on_every_generation_parameter(tmp_path):
    base = cache_file(10, 4, 32, 0, cache_dir=tmp_path)
    assert base.parent == tmp_path / "glyphs"
    variants = [cache_file(11, 4, 32, 0, tmp_path), cache_file(10, 5, 32, 0, tmp_path),
                cache_file(10, 4, 24, 0, tmp_path), cache_file(10, 4, 32, 1, tmp_path)]
    assert len({base, *variants}) == 5


def test_default_cache_dir_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLPLUG_CACHE", str(tmp_path))
    assert cache_file(10, 4, 32, 0).parent == tmp_path / "glyphs"
    monkeypatch.delenv("DMLPLUG_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_file(10, 4, 32, 0).parent == tmp_path / "home" / ".cache" / "dmlplug" / "glyphs"


@pytest.mark.parametrize("garbage", [b"", b"not a zip file at all", None])
def test_corrupt_cache_is_regenerated_with_a_warning(tmp_path, garbage):
    fresh = load_glyphs(6, 3, 24, 0, cache_dir=tmp_path)
    path = cache_file(6, 3, 24, 0, cache_dir=tmp_path)
    if garbage is None:  # a truncated but otherwise genuine file
        garbage = path.read_bytes()[:300]
    path.write_bytes(garbage)
    with pytest.warns(RuntimeWarning, match="regenerating"):
        again = load_glyphs(6, 3, 24, 0, cache_dir=tmp_path)
    assert np.array_equal(again.images, fresh.images)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file is valid again
        assert np.array_equal(load_glyphs(6, 3, 24, 0, cache_dir=tmp_path).images, fresh.images)


def test_unwritable_cache_warns_and_still_returns_the_data(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="could not write"):
        arrays = load_glyphs(4, 2, 16, 0, cache_dir=blocker)
    assert arrays.images.shape == (8, 16, 16)


# --- splits and the registered dataset ----------------------------------------------------------------


def _original_labels(source, class_names):
    index = {name: i for i, name in enumerate(class_names)}
    return np.asarray([index[source.class_names[label]] for label in source.labels])


def test_interleaved_split_is_class_disjoint_and_keeps_every_family(default_arrays, cache_dir):
    bundle = build_bundle(cache_dir)
    train, test = set(bundle.train.class_names), set(bundle.test.class_names)
    assert not train & test and len(train | test) == 300
    assert abs(len(train) - len(test)) <= len(glyph_render.FAMILIES)
    family_of = dict(zip(default_arrays.class_names, default_arrays.families, strict=True))
    assert {family_of[n] for n in train} == {family_of[n] for n in test} == set(default_arrays.families)
    assert bundle.val is None and bundle.default_augment == "light"
    assert bundle.info["cache_hit"] is True and bundle.info["counts"]["test"]["images"] == len(bundle.test)


def test_family_split_holds_out_whole_families(default_arrays, cache_dir):
    bundle = build_bundle(cache_dir, split="families", val_fraction=0.2)
    family_of = dict(zip(default_arrays.class_names, default_arrays.families, strict=True))
    train_families = {family_of[n] for n in bundle.train.class_names}
    val_families = {family_of[n] for n in bundle.val.class_names}
    test_families = {family_of[n] for n in bundle.test.class_names}
    assert test_families == set(DEFAULT_TEST_FAMILIES) & set(default_arrays.families)
    assert not (train_families | val_families) & test_families
    names = [set(s.class_names) for s in (bundle.train, bundle.val, bundle.test)]
    assert sum(map(len, names)) == len(set.union(*names)) == 300
    assert len(names[1]) == round(0.2 * (len(names[0]) + len(names[1])))
    assert set(bundle.info["families"]["test"]) == test_families


def test_split_labels_are_dense_and_point_at_the_right_images(default_arrays, cache_dir):
    bundle = build_bundle(cache_dir, split="families", test_families=["greek", "braille"], val_fraction=0.1)
    for source in (bundle.train, bundle.val, bundle.test):
        assert np.array_equal(np.unique(source.labels), np.arange(source.num_classes))
        original = _original_labels(source, default_arrays.class_names)
        first = np.searchsorted(default_arrays.labels, original)  # each class's first image in the arrays
        rank = np.arange(len(source)) - np.searchsorted(source.labels, source.labels)
        assert np.array_equal(source.images, default_arrays.images[first + rank])
    assert {n.split(":")[0] for n in bundle.test.class_names} == {"greek", "braille"}
    image = bundle.test.load_image(0)
    assert image.mode == "RGB" and image.size == (32, 32)


def test_split_choice_is_deterministic_and_seeded():
    families = ["a"] * 10 + ["b"] * 10
    first = split_glyph_classes(families, "interleaved", val_fraction=0.3, seed=5)
    again = split_glyph_classes(families, "interleaved", val_fraction=0.3, seed=5)
    other = split_glyph_classes(families, "interleaved", val_fraction=0.3, seed=6)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert np.array_equal(first["test"], [1, 3, 5, 7, 9, 11, 13, 15, 17, 19])
    assert len(first["val"]) == 3 and not np.array_equal(first["val"], other["val"])


def test_a_split_without_classes_is_a_data_error():
    with pytest.raises(DataError, match="test split has no classes"):
        split_glyph_classes(["latin_upper"] * 4, "families", test_families=["greek"])


def test_a_split_of_one_class_is_a_data_error_too():
    # One test class: every neighbour of a query is of its class, recall@1 is 1.0 before training.
    with pytest.raises(DataError, match="test split has only 1 class, fewer than the 2 a run needs"):
        split_glyph_classes(["latin_upper"] * 2 + ["greek"], "interleaved")
    with pytest.raises(DataError, match="val split has only 1 class"):
        split_glyph_classes(["latin_upper"] * 8, "interleaved", val_fraction=0.1)
    split_glyph_classes(["latin_upper"] * 4, "interleaved")


def test_recorded_family_sizes_match_the_rendered_catalogue():
    families = [entry.family for entry in glyph_render.glyph_catalog()]
    assert glyph_render.family_counts(families) == CATALOG_FAMILY_SIZES
    assert list(CATALOG_FAMILY_SIZES) == list(glyph_render.FAMILY_NAMES)
    assert catalog_families(len(families)) == families


SPLIT_SETTINGS = [
    {},
    {"val_fraction": 0.5},
    {"val_fraction": 0.95},
    {"split": "families"},
    {"split": "families", "test_families": ["yijing"]},
    {"split": "families", "test_families": ["latin_upper"], "val_fraction": 0.3},
]


@pytest.mark.parametrize("settings", SPLIT_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_numpy_free_counts_are_the_sizes_and_errors_of_the_split(settings):
    # validate counts the classes of each split without numpy (docs/performance.md, "Start-up"): the counts must be
    # the sizes of the split a run builds, and refuse what it refuses with the same message.
    catalog = glyph_render.glyph_catalog()
    for num_classes in range(0, 80, 3):
        families = [e.family for e in catalog[:num_classes]]
        try:
            expected = {k: len(v) for k, v in split_glyph_classes(families, seed=0, **settings).items()}
        except DataError as exc:
            with pytest.raises(DataError, match=re.escape(exc.what)):
                glyph_split_counts(families, **settings)
        else:
            assert glyph_split_counts(families, **settings) == expected


@pytest.mark.parametrize("settings", SPLIT_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_params_reject_exactly_the_counts_that_empty_a_split_when_built(settings):
    # Oracle: the split assignment over the families of the real (rendered) catalogue prefix.
    catalog = glyph_render.glyph_catalog()
    for num_classes in range(2, 80):
        try:
            split_glyph_classes([e.family for e in catalog[:num_classes]], seed=0, **settings)
            empties = False
        except DataError:
            empties = True
        if empties:
            with pytest.raises(ValueError, match="split has (no classes|only 1 class)"):
                GlyphsParams(num_classes=num_classes, **settings)
        else:
            GlyphsParams(num_classes=num_classes, **settings)


def test_validate_rejects_a_class_count_that_leaves_a_split_one_class_and_names_the_fix():
    recipe = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "quickstart.toml")
    # 8, 25: one class per family, the interleaved split has no second class of any family for testing;
    # 26: one test class (the second Latin capital), which used to be the suggested fix (recall@1 = 1.0 untrained).
    for count, found in ((8, "no classes"), (25, "no classes"), (26, "only 1 class")):
        with pytest.raises(RecipeError) as caught:
            dmlplug.validate(recipe, [f"data.dataset.num_classes={count}"])
        message = str(caught.value)
        assert f"test split has {found}" in message and "data.dataset" in message
        assert "num_classes >= 27" in message
    dmlplug.validate(recipe, ["data.dataset.num_classes=27"])


def _interleaved_split_sizes(num_classes):
    """Oracle, independent of split_glyph_classes: classes alternate train, test within each family."""
    counts = glyph_render.family_counts(catalog_families(num_classes))
    return sum((n + 1) // 2 for n in counts.values()), sum(n // 2 for n in counts.values())


def test_exactly_the_counts_that_give_both_interleaved_splits_two_classes_validate():
    for num_classes in range(2, 120):
        train, test = _interleaved_split_sizes(num_classes)
        if min(train, test) >= 2:
            assert GlyphsParams(num_classes=num_classes).split_sizes()["test"].classes == test
        else:
            with pytest.raises(ValueError, match="num_classes >= 27"):
                GlyphsParams(num_classes=num_classes)
    assert _interleaved_split_sizes(27) == (25, 2) and _interleaved_split_sizes(26) == (25, 1)


def test_the_smallest_valid_count_builds_with_every_split_populated(cache_dir):
    bundle = build_bundle(cache_dir, num_classes=27, images_per_class=2, image_size=16)
    assert (bundle.train.num_classes, bundle.test.num_classes) == (25, 2)
    # The 25th family: its classes are the 25th and, a round later, the 50th.
    with pytest.raises(RecipeError, match="test split has only 1 class") as caught:
        build_bundle(cache_dir, num_classes=25, split="families", test_families=["yijing"])
    assert "num_classes >= 50" in str(caught.value)
    held_out = build_bundle(cache_dir, num_classes=50, images_per_class=2, image_size=16, split="families",
                            test_families=["yijing"])
    assert (held_out.train.num_classes, held_out.test.num_classes) == (48, 2)
    with pytest.raises(RecipeError, match="test split has no classes"):
        build_bundle(cache_dir, num_classes=24, split="families", test_families=["yijing"])


def test_declared_split_sizes_are_those_built(cache_dir):
    from dmlplug.params import SplitSize
    from dmlplug.testing import check_component

    params = {"num_classes": 40, "images_per_class": 3, "image_size": 16, "val_fraction": 0.2,
              "cache_dir": str(cache_dir)}
    # 25 families, then the second class of 15 of them (the test classes); a fifth of the 25 others validate.
    assert GlyphsParams(**params).split_sizes() == {"train": SplitSize(20, 3), "test": SplitSize(15, 3),
                                                     "val": SplitSize(5, 3)}
    check_component("datasets", "glyphs", params=params)  # the kit compares the declaration with the build
    assert GlyphsParams(num_classes=sum(CATALOG_FAMILY_SIZES.values()) + 1).split_sizes() is None  # fonts decide


def test_unknown_family_is_a_recipe_error_with_a_suggestion():
    with pytest.raises(RecipeError, match="did you mean 'greek'"):
        dmlplug.create("dataset", "glyphs", split="families", test_families=["greeek"])


# --- families kept ---------------------------------------------------------------------------------------


def test_kept_families_render_exactly_the_same_classes_and_images_as_the_full_catalogue():
    # Oracle: the full catalogue prefix, filtered by family afterwards.
    kept = ["greek", "braille", "yijing"]
    full = generate_glyphs(75, 3, 16, seed=1)
    subset = generate_glyphs(9, 3, 16, seed=1, families=kept)
    chosen = [c for c, family in enumerate(full.families) if family in kept][:9]
    assert subset.class_names == [full.class_names[c] for c in chosen]
    assert subset.families == catalog_families(9, kept)
    for position, c in enumerate(chosen):
        assert np.array_equal(subset.images[subset.labels == position], full.images[full.labels == c])


def test_disjoint_families_give_datasets_without_a_shared_class(cache_dir):
    study = build_bundle(cache_dir, num_classes=30, images_per_class=2, image_size=16, families=["greek", "lao"])
    other = build_bundle(cache_dir, num_classes=30, images_per_class=2, image_size=16, families=["braille"])
    names = lambda bundle: {*bundle.train.class_names, *bundle.test.class_names}  # noqa: E731
    assert len(names(study)) == len(names(other)) == 30
    assert not names(study) & names(other)
    assert {n.split(":")[0] for n in names(study)} == {"greek", "lao"}
    assert study.info["families_kept"] == ["greek", "lao"]


def test_kept_families_change_the_cache_key_but_not_the_key_without_them(tmp_path):
    plain = cache_file(10, 4, 32, 0, tmp_path)
    assert cache_file(10, 4, 32, 0, tmp_path, families=None) == plain
    assert cache_file(10, 4, 32, 0, tmp_path, families=["greek"]) != plain
    assert cache_file(10, 4, 32, 0, tmp_path, families=["greek", "lao"]) == \
        cache_file(10, 4, 32, 0, tmp_path, families=["lao", "greek"])


def test_validate_checks_kept_families_and_the_splits_they_leave():
    recipe = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "quickstart.toml")
    with pytest.raises(RecipeError, match="did you mean 'greek'"):
        dmlplug.validate(recipe, ['data.dataset.families=["greeek"]'])
    with pytest.raises(RecipeError, match="at least one family"):
        dmlplug.validate(recipe, ["data.dataset.families=[]"])
    # One family, split by families with that family held out: nothing is left to train on.
    with pytest.raises(RecipeError, match="train split has no classes"):
        dmlplug.validate(recipe, ['data.dataset.families=["greek"]', 'data.dataset.split="families"',
                                  'data.dataset.test_families=["greek"]', "data.dataset.num_classes=20"])
    dmlplug.validate(recipe, ['data.dataset.families=["greek"]', "data.dataset.num_classes=20"])


def test_more_classes_than_the_kept_families_hold_is_a_data_error_naming_them():
    with pytest.raises(DataError, match="34 classes in the families greek; 35 were asked for"):
        generate_glyphs(35, 2, 16, seed=0, families=["greek"])


def test_params_are_documented_and_registered_through_the_hook():
    info = PluginHost().load(entry_points=False).registry.get("datasets", "glyphs")
    assert info.params is GlyphsParams and info.description
    assert all(field.description for field in GlyphsParams.model_fields.values())
    assert GlyphsParams().num_classes >= 300


def test_importing_the_plugin_stays_light():
    code = ("import sys, dmlplug_builtins.datasets.glyphs; "
            "print(sorted(m for m in ('torch', 'PIL', 'matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- learnability -------------------------------------------------------------------------------------


def test_raw_pixel_nearest_neighbour_is_well_above_chance_but_far_from_perfect(cache_dir):
    test = build_bundle(cache_dir).test
    x = test.images.reshape(len(test), -1).astype(np.float32)
    squared = (x * x).sum(axis=1)
    distances = squared[:, None] + squared[None, :] - 2.0 * (x @ x.T)
    np.fill_diagonal(distances, np.inf)
    recall_at_1 = float((test.labels[distances.argmin(axis=1)] == test.labels).mean())
    print(f"\nraw-pixel recall@1 on the interleaved test split ({test.num_classes} classes): {recall_at_1:.3f}")
    assert 20 / test.num_classes < recall_at_1 < 0.8
