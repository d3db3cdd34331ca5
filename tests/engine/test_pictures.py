"""Retrieval pictures: selection by average precision, a fixed sample, frame colours read back from the PNG,
files at every evaluation of a run, TensorBoard images, and `dmlplug report`."""

from __future__ import annotations

import json
import logging
import tomllib
from types import SimpleNamespace

import numpy as np
import pytest
import tomli_w
from e2e import TINY_RECIPE
from PIL import Image

from dmlplug.data import ArraySource
from dmlplug.engine import pictures as engine_pictures
from dmlplug.engine.pictures import write_pictures
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.picture_grid import BORDER, CORRECT, QUERY, WRONG, cell_box
from dmlplug.evaluation.pictures import query_average_precision, retrieve_rows, sample_queries, worst_queries
from dmlplug.plugins import get_host
from dmlplug.report import build_report, write_report

# ------------------------------------------------------------------------------------------ a known geometry
# Unit vectors at these angles (degrees). Class A (0) near 0°, B (1) near 90°, C (2) near 180°, and one A item
# (9) among the Cs. MAP@R by hand:
#   A items 0-2 (R = 3: 0, 1, 2 and 9): the two other As, then a B (88° is nearer than 190°): (1 + 1) / 3;
#   Bs and Cs (R = 2): their own class first: 1; item 9 (R = 3): three Cs first: 0.
ANGLES = [0.0, 2.0, 4.0, 88.0, 90.0, 92.0, 178.0, 180.0, 182.0, 190.0]
LABELS = [0, 0, 0, 1, 1, 1, 2, 2, 2, 0]
AP = [2 / 3, 2 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 0]


def _embeddings():
    radians = np.deg2rad(ANGLES)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


def _context(**kwargs):
    return EvalContext(_embeddings(), np.array(LABELS), backend="torch", **kwargs)


def _grey(item: int) -> int:
    return 20 + 20 * item  # each item's image is one flat grey level, so a thumbnail tells which item it is


def _source():
    images = np.stack([np.full((40, 30), _grey(i), np.uint8) for i in range(len(LABELS))])  # not square
    return ArraySource(images, np.array(LABELS), ["alpha", "beta", "gamma"], name="geometry")


def test_average_precision_of_known_queries_and_the_worst_of_them():
    ctx = _context()
    name, ap = query_average_precision(ctx)
    assert name == "map@r"
    np.testing.assert_allclose(ap, AP, atol=1e-12)
    assert worst_queries(ap, 2).tolist() == [9, 0]  # lowest first; equal values keep query order
    assert worst_queries(np.array([0.5, np.nan, 0.2, 0.2]), 3).tolist() == [1, 2, 3]  # NaN counts as worst


def test_the_evaluators_per_query_values_are_reused():
    ctx = _context()
    known = np.linspace(1.0, 0.1, len(LABELS))  # not MAP@R: proves the cached values are the ones used
    ctx.cache[("per_query", ("map_c", "standard"))] = known
    name, ap = query_average_precision(ctx)
    assert name == "map@c" and ap is known
    assert worst_queries(ap, 3).tolist() == [9, 8, 7]


def test_the_sample_is_fixed_by_the_seed():
    first = sample_queries(1000, 16, seed=3)
    assert first.tolist() == sample_queries(1000, 16, seed=3).tolist()
    assert first.tolist() == sorted(set(first.tolist())) and len(first) == 16
    assert first.tolist() != sample_queries(1000, 16, seed=4).tolist()
    assert sample_queries(5, 16, seed=3).tolist() == [0, 1, 2, 3, 4]  # fewer queries than asked: all of them


@pytest.mark.parametrize("as_tensor", [False, True])
def test_neighbours_and_similarities_of_known_queries(as_tensor):
    import torch

    embeddings = torch.from_numpy(_embeddings()) if as_tensor else _embeddings()  # a tensor stays a tensor
    ctx = EvalContext(embeddings, np.array(LABELS), backend="torch")
    _, ap = query_average_precision(ctx)
    outlier, first = retrieve_rows(ctx, np.array([9, 0]), 3, ap)
    assert outlier.query == 9 and outlier.neighbours == [8, 7, 6] and outlier.correct == [False] * 3
    np.testing.assert_allclose(outlier.similarities, np.cos(np.deg2rad([8, 10, 12])), atol=1e-6)
    assert first.neighbours == [1, 2, 3] and first.correct == [True, True, False] and first.labels == [0, 0, 1]
    np.testing.assert_allclose(first.similarities, np.cos(np.deg2rad([2, 4, 88])), atol=1e-6)
    assert first.ap == pytest.approx(2 / 3)


def test_query_gallery_split_never_retrieves_the_query_itself():
    queries = np.zeros(len(LABELS), bool)
    queries[[0, 9]] = True
    ctx = _context(query_mask=queries, gallery_mask=np.ones(len(LABELS), bool))
    _, ap = query_average_precision(ctx)
    rows = retrieve_rows(ctx, np.arange(len(ctx.knn_queries)), 2, ap)
    assert [(r.query, r.neighbours) for r in rows] == [(0, [1, 2]), (9, [8, 7])]


def _pixel(image, row, column, dx, dy):
    left, top, _, _ = cell_box(row, column, 64)
    return image.getpixel((left + dx, top + dy))


def test_frames_are_green_for_the_query_class_and_red_otherwise(tmp_path):
    written = write_pictures(_context(), _source(), tmp_path, epoch=3, split="test", queries=2, k=3, seed=0)
    assert written == {"worst": tmp_path / "epoch_003_worst.png", "sample": tmp_path / "epoch_003_sample.png"}
    with Image.open(written["worst"]) as png:
        image = png.convert("RGB")
    # Row 0: the outlier (item 9), whose three neighbours are Cs; row 1: item 0 with neighbours 1, 2 (A) and 3 (B).
    expected = [[(9, QUERY), (8, WRONG), (7, WRONG), (6, WRONG)],
                [(0, QUERY), (1, CORRECT), (2, CORRECT), (3, WRONG)]]
    centre = BORDER + 32
    for row, cells in enumerate(expected):
        for column, (item, colour) in enumerate(cells):
            assert _pixel(image, row, column, 1, 1) == colour, (row, column)  # the frame
            assert _pixel(image, row, column, 64 + 2 * BORDER - 2, centre) == colour, (row, column)  # right edge
            assert _pixel(image, row, column, centre, centre) == (_grey(item),) * 3, (row, column)  # the image


def test_class_names_in_other_scripts_are_drawn_not_as_empty_boxes(tmp_path):
    # Pillow's default font drew every Cyrillic letter as the same box: two names of the same length gave the
    # same picture (#26). tests/evaluation/test_picture_text.py checks the glyphs script by script.
    def worst(names, folder):
        source = _source()
        source.class_names = names
        written = write_pictures(_context(), source, tmp_path / folder, epoch=0, split="test", queries=2, k=3,
                                 seed=0)
        with Image.open(written["worst"]) as png:
            return np.asarray(png.convert("L"))

    # Both rows' queries are of class 0, the outlier's neighbours of class 2: the names differ in class 0 only.
    assert not np.array_equal(worst(["Ёлка", "Жаба", "Чай"], "a"), worst(["Ёжик", "Жаба", "Чай"], "b"))


def test_a_source_without_pil_images_is_skipped_and_logged(tmp_path, caplog):
    class Features:
        labels = np.array(LABELS)
        class_names = ["a", "b", "c"]

        def __len__(self):
            return len(self.labels)

        def load_image(self, index):
            return np.zeros(8, np.float32)  # a feature vector, not an image

    with caplog.at_level(logging.INFO, logger="dmlplug.pictures"):
        assert write_pictures(_context(), Features(), tmp_path / "p", epoch=0, split="test", queries=2, k=2,
                              seed=0) == {}
    assert not (tmp_path / "p").exists()
    assert "no retrieval pictures for the test split" in caplog.text


def test_the_option_off_writes_nothing_and_records_no_pictures(tmp_path):
    evaluation = SimpleNamespace(pictures=False, pictures_queries=2, pictures_k=2)
    run = SimpleNamespace(recipe=SimpleNamespace(recipe=SimpleNamespace(evaluation=evaluation,
                                                                        run=SimpleNamespace(seed=0))),
                          dist=SimpleNamespace(is_main=True), eval_context=_context(), epoch=1, directory=tmp_path,
                          components=SimpleNamespace(dataset=SimpleNamespace(test=_source())))
    engine_pictures.at_evaluation(run, "test")
    assert run.latest_pictures == {} and list(tmp_path.iterdir()) == []
    evaluation.pictures = True
    engine_pictures.at_evaluation(run, "test")
    assert set(run.latest_pictures) == {"worst", "sample"}
    run.dist.is_main = False  # other ranks of a distributed run draw nothing
    engine_pictures.at_evaluation(run, "test")
    assert run.latest_pictures == {}


# ------------------------------------------------------------------------------------------ a tiny run

RECIPE = TINY_RECIPE + """
[evaluation]
pictures_queries = 4
pictures_k = 3
[[loggers]]
name = "tensorboard"
histograms = false
projector = false
hparams = false
"""


@pytest.fixture(scope="module")
def pictured_run(tmp_path_factory):
    from dmlplug.engine.launch import run_recipe

    out = tmp_path_factory.mktemp("pictures") / "run"
    assert run_recipe(tomllib.loads(RECIPE), out=out, device="cpu", quiet=True, host=get_host()).status == "completed"
    return out


@pytest.mark.slow
def test_every_evaluation_writes_both_grids(pictured_run):
    folder = pictured_run / "pictures" / "test"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch_000_sample.png", "epoch_000_worst.png",
                                                        "epoch_001_sample.png", "epoch_001_worst.png"]
    with Image.open(folder / "epoch_001_worst.png") as image:
        rows_bottom = cell_box(3, 3, 64)[3]  # 4 queries × (query + 3 neighbours)
        assert image.height > rows_bottom and image.width >= cell_box(0, 3, 64)[2]
        assert image.convert("RGB").getpixel(tuple(v + 1 for v in cell_box(3, 0, 64)[:2])) == QUERY


@pytest.mark.slow
def test_tensorboard_shows_the_pictures_at_the_global_step(pictured_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(pictured_run / "tb"), size_guidance={"images": 0})
    acc.Reload()
    steps = json.loads((pictured_run / "results.json").read_text())["steps"]
    for kind in ("worst", "sample"):
        events = acc.Images(f"eval/test/pictures/{kind}")
        assert [e.step for e in events] == [0, steps]
        with Image.open(pictured_run / "pictures" / "test" / f"epoch_001_{kind}.png") as png:
            assert (events[-1].width, events[-1].height) == png.size
        assert events[-1].encoded_image_string.startswith(b"\x89PNG")


@pytest.mark.slow
def test_pictures_off_in_a_run_writes_nothing(tmp_path):
    from dmlplug.engine.launch import run_recipe

    raw = tomllib.loads(RECIPE.replace("pictures_queries = 4", "pictures = false"))
    raw["run"]["epochs"] = 0  # the initial evaluation only
    assert run_recipe(raw, out=tmp_path / "run", device="cpu", quiet=True, host=get_host()).status == "completed"
    assert not (tmp_path / "run" / "pictures").exists()
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1  # it did evaluate


@pytest.mark.slow
def test_the_report_shows_the_last_evaluations_pictures(pictured_run, tmp_path):
    out = tmp_path / "report" / "report.md"
    report, text = write_report([pictured_run], out, host=get_host())
    shown = report.pictures
    assert len(shown) == 1 and shown[0].epoch == 1 and shown[0].split == "test"
    for kind in ("worst", "sample"):
        copied = shown[0].paths[kind]
        assert copied.parent == out.parent / "report_figures"
        assert copied.read_bytes() == (pictured_run / "pictures" / "test" / f"epoch_001_{kind}.png").read_bytes()
        assert f"![{kind}](report_figures/{copied.name})" in text
    assert "## Retrieval pictures" in text and "### tiny: test, epoch 1" in text


# ------------------------------------------------------------------------------------------ many runs in a report


def _fake_run(directory, *, name, seed, lr, epochs=(0, 2)):
    directory.mkdir(parents=True)
    recipe = {"run": {"name": name, "seed": seed}, "optimizer": {"lr": lr}, "evaluation": {"metric": "recall@1"}}
    (directory / "recipe.resolved.toml").write_text(tomli_w.dumps(recipe))
    (directory / "results.json").write_text(json.dumps({"status": "completed", "name": name,
                                                        "metrics": {"recall@1": 0.5}, "best_epoch": 1}))
    (directory / "metrics.jsonl").write_text("")
    folder = directory / "pictures" / "test"
    folder.mkdir(parents=True)
    for epoch in epochs:
        for kind in ("worst", "sample"):
            Image.new("RGB", (4, 4), (epoch, seed, 0)).save(folder / f"epoch_{epoch:03d}_{kind}.png")
    return directory


def test_a_report_of_few_runs_shows_every_run_at_its_last_evaluation(tmp_path):
    for seed in range(2):
        _fake_run(tmp_path / f"a{seed}", name="a", seed=seed, lr=0.1)
    _fake_run(tmp_path / "b", name="b", seed=0, lr=0.2, epochs=(0, 5, 10))
    report = build_report(host=get_host(), paths=[tmp_path])
    shown = {(p.label, p.epoch) for p in report.pictures}
    assert shown == {("a (seed 0)", 2), ("a (seed 1)", 2), ("b", 10)} and report.pictures_left_out == 0
    text = report.markdown()
    b = next(p for p in report.pictures if p.label == "b")
    assert f"![worst]({b.paths['worst'].as_posix()})" in text and b.paths["worst"].name == "epoch_010_worst.png"


def test_a_report_of_many_runs_shows_one_run_per_group_and_says_where_the_rest_are(tmp_path):
    from dmlplug.report.pictures import MAX_RUNS

    groups, seeds = MAX_RUNS + 2, 2
    for g in range(groups):
        for seed in range(seeds):
            _fake_run(tmp_path / f"g{g}" / f"s{seed}", name=f"run{g}", seed=seed, lr=0.1 * (g + 1))
    report = build_report(host=get_host(), paths=[tmp_path])
    assert len(report.pictures) == MAX_RUNS
    assert all(p.run.seed == 0 for p in report.pictures)  # the first seed of each group
    assert len({p.label for p in report.pictures}) == MAX_RUNS
    assert report.pictures_left_out == groups * seeds - MAX_RUNS
    assert f"Pictures of {groups * seeds - MAX_RUNS} more runs" in report.markdown()
