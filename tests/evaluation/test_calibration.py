"""Threshold calibration: hand-computed oracles, a brute-force all-pairs reference, OPIS as the evaluator's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dmlplug.errors import DataError
from dmlplug.evaluation.calibration import OPIS_DEFAULTS, calibrate
from dmlplug.evaluation.pair_scan import normalize

# Three classes of two unit vectors. Pair similarities (rounded to 2**-24 components, ties stay exact ties):
# positives 0.8 (A), 0.8 (B), 0.6 (C); negatives 0.96, 0.8, 0.6, 0.6, 0.28, 0, 0, 0, -0.6, -0.6, -0.8, -1.
HAND_X = np.array([[1, 0], [0.8, 0.6], [0, 1], [0.6, 0.8], [-1, 0], [-0.6, 0.8]])
HAND_Y = np.array([0, 0, 1, 1, 2, 2])


def _hand(far_targets):
    return calibrate(HAND_X, HAND_Y, far_targets=far_targets, bins=16, opis=False)


def test_hand_built_thresholds_tar_far_and_ties():
    c = _hand((0.1, 0.25, 0.5))
    assert (c.positive_pairs, c.negative_pairs, c.items, c.classes) == (3, 12, 6, 3)
    low, mid, high = c.thresholds
    # FAR 0.1: ⌊1.2⌋ = 1 negative allowed; the 2nd largest negative is 0.8, tied with the A and B positives,
    # which the threshold (just above 0.8) therefore rejects.
    assert low.threshold == pytest.approx(0.8, abs=1e-6) and low.threshold > normalize(HAND_X)[1, 0]
    assert (low.accepted_negative, low.accepted_positive, low.far, low.tar) == (1, 0, 1 / 12, 0.0)
    # FAR 0.25: 3 allowed; the 4th largest negative is 0.6 (tied with the 3rd and with C's positive).
    assert mid.threshold == pytest.approx(0.6, abs=1e-6)
    assert (mid.accepted_negative, mid.accepted_positive, mid.far, mid.tar) == (2, 2, 2 / 12, 2 / 3)
    # FAR 0.5: 6 allowed; the 7th largest negative is 0: five negatives and every positive are above it.
    assert high.threshold == pytest.approx(0.0, abs=1e-6)
    assert (high.accepted_negative, high.accepted_positive, high.tar) == (5, 3, 1.0)


def test_hand_built_per_class_spread():
    mid = _hand((0.25,)).thresholds[0].per_class
    # Per-class TAR at the FAR 0.25 threshold: A 1, B 1, C 0.
    assert (mid.classes, mid.min, mid.max, mid.median, mid.mean) == (3, 0.0, 1.0, 1.0, pytest.approx(2 / 3))
    assert mid.std == pytest.approx(np.std([1, 1, 0])) and mid.p10 == pytest.approx(0.2)
    assert mid.worst[0] == {"label": 2, "tar": 0.0, "positive_pairs": 1}


def test_hand_built_max_f1():
    f = _hand((0.1,)).max_f1
    # Accept ≥ 0.8: TP 2, FP 2, F1 4/7. Accept ≥ 0.6: TP 3, FP 4 (0.96, 0.8, 0.6, 0.6), F1 6/10.
    assert f.threshold == pytest.approx(0.6, abs=1e-6)
    assert (f.f1, f.precision, f.recall, f.tar, f.far) == (pytest.approx(0.6), pytest.approx(3 / 7), 1.0, 1.0,
                                                            pytest.approx(4 / 12))
    assert f.exact and f.per_class.min == 1.0


# ------------------------------------------------------------------------------ brute-force reference
def _data(seed, n=240, classes=12, dim=6, duplicates=20):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.standard_normal((n, dim)) * 0.8 + rng.standard_normal((classes, dim))[y]
    x[:duplicates] = x[duplicates:2 * duplicates]  # exact duplicates: tied similarities, some at 1
    y[:duplicates] = y[duplicates:2 * duplicates]
    return x.astype(np.float32), y * 7 + 3  # labels that are not 0..C-1


def _float32_above(value):
    """The smallest float32 strictly above ``value`` (by stepping from the nearest float32, not by the library's)."""
    t = np.float32(value)
    while float(t) <= value:
        t = np.nextafter(t, np.float32(2))
    return float(t)


def _brute(x, y, far_targets, margin):
    """Every pair from one full similarity matrix, thresholds by sorting, F1 by trying every positive value."""
    s = normalize(x) @ normalize(x).T
    i, j = np.triu_indices(len(y), k=1)
    sims, same = s[i, j], y[i] == y[j]
    pos, neg, pos_cls = sims[same], sims[~same], y[i][same]
    labels = np.unique(y[np.isin(y, pos_cls)])
    out = []
    for far in far_targets:
        v = np.sort(neg)[::-1][int(np.floor(far * len(neg) + 1e-9))]
        t = _float32_above(v + margin)
        per = [np.mean(pos[pos_cls == c] >= t) for c in labels]
        out.append((t, np.mean(pos >= t), np.mean(neg >= t), np.min(per), np.max(per), np.std(per),
                    np.median(per)))
    best = None
    for p in np.unique(pos):
        tp, fp = np.sum(pos >= p), np.sum(neg >= p)
        f1 = 2.0 * tp / (tp + fp + len(pos))
        if best is None or f1 >= best[0]:  # ascending p: ties go to the higher threshold
            best = (f1, p, tp / (tp + fp), tp / len(pos), fp / len(neg))
    return out, best


@pytest.mark.parametrize(("seed", "bins", "budget_mb"), [(0, 2**20, 256), (1, 64, 0.001), (2, 4, 0.05),
                                                          (3, 1, 1.0)])
def test_matches_brute_force_exactly(seed, bins, budget_mb):
    """Any histogram resolution and block size (one row per block at 0.001 MiB) gives the all-pairs answer."""
    x, y = _data(seed)
    targets = (1e-3, 1e-2, 0.1, 0.3)
    c = calibrate(x, y, far_targets=targets, bins=bins, memory_budget_mb=budget_mb, opis=False)
    expected, best = _brute(x, y, targets, c.score_margin)
    for got, (t, tar, far, lo, hi, std, median) in zip(c.thresholds, expected, strict=True):
        assert (got.threshold, got.tar, got.far) == (t, tar, far)
        assert got.far <= got.target_far
        s = got.per_class
        assert (s.min, s.max, s.median) == (lo, hi, median) and s.std == pytest.approx(std, abs=1e-12)
    f = c.max_f1
    assert (f.f1, f.threshold, f.precision, f.recall, f.far) == best
    assert f.exact


# ------------------------------------------------------------- float32 scores, as a deployed search computes them
def _near_ties(seed, dim=64, per_class=30, spread=1e-6):
    """Two classes of near-duplicate unit vectors (float32): the 900 negative pairs' similarities lie within about
    1e-5 of each other, so every FAR threshold falls among near-ties that float32 rounding reorders."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, dim))
    x = np.concatenate([a / np.linalg.norm(a) + spread * rng.standard_normal((per_class, dim)),
                        b / np.linalg.norm(b) + spread * rng.standard_normal((per_class, dim))])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), np.repeat([0, 1], per_class)


def _float32_scores(x):
    """All pair scores of float32 rows as deployments compute them: BLAS sgemm (numpy; faiss for a batch of
    queries), faiss's own SIMD kernel (one query at a time, as `dmlplug search` with few queries) and torch."""
    import faiss
    import torch

    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    ways = {"numpy": x @ x.T, "torch": (torch.from_numpy(x) @ torch.from_numpy(x).T).numpy()}
    for name, queries in (("faiss batch", [x]), ("faiss one by one", [x[i:i + 1] for i in range(len(x))])):
        scores, row = np.empty((len(x), len(x)), np.float32), 0
        for q in queries:
            sims, cols = index.search(q, len(x))
            for s, c in zip(sims, cols, strict=True):
                scores[row, c] = s
                row += 1
        ways[name] = scores
    return ways


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_far_holds_for_float32_scores_of_near_ties(seed):
    """Counted by brute force on float32 scores (four ways, compared in float32 as numpy does with a Python float,
    and in float64), no threshold accepts more negative pairs than its target FAR allows: the next float above the
    boundary similarity (the old rule) accepted up to 8 more here."""
    x, y = _near_ties(seed)
    targets = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    c = calibrate(x, y, far_targets=targets, opis=False)
    i, j = np.triu_indices(len(y), k=1)
    negative = y[i] != y[j]
    for name, scores in _float32_scores(x).items():
        neg = scores[i, j][negative]
        assert neg.dtype == np.float32
        for t in c.thresholds:
            allowed = int(np.floor(t.target_far * len(neg) + 1e-9))
            assert np.float32(t.threshold) == t.threshold  # a float32 value: both comparisons agree
            assert np.count_nonzero(neg >= t.threshold) <= allowed, (name, t.target_far)
            assert np.count_nonzero(neg.astype(np.float64) >= t.threshold) <= allowed, (name, t.target_far)
            assert t.accepted_negative <= allowed


@pytest.mark.parametrize("unit", [True, False])
def test_score_margin_bounds_every_float32_score_and_stays_small(unit):
    """The margin bounds |float32 score − the exact similarity counted| for every pair and way of scoring (rows as
    given when unit length, else their float32 normalisation), and is within a few times D·2⁻²⁴."""
    x, y = _near_ties(3, spread=1e-3)
    if not unit:
        x = x * np.linspace(0.5, 3.0, len(x), dtype=np.float32)[:, None]
    c = calibrate(x, y, far_targets=(0.5,), opis=False)
    scored = x if unit else (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    exact = normalize(x) @ normalize(x).T
    worst = max(float(np.abs(s.astype(np.float64) - exact).max()) for s in _float32_scores(scored).values())
    assert 0 < worst <= c.score_margin <= 3 * x.shape[1] * 2.0**-24


@pytest.mark.parametrize(("bins", "exact"), [(256, False), (1024, True)])
def test_f1_search_cut_by_the_budget_is_flagged_and_bounded(bins, exact):
    """A refinement budget of 200 pairs cuts the max-F1 search. At 256 bins the bins left out might hold a
    better threshold (flagged, with a bound); at 1024 bins their bound is below the F1 found, so it is exact."""
    x, y = _data(4)
    _, best = _brute(x, y, (1e-3,), 0.0)
    f = calibrate(x, y, far_targets=(1e-3,), bins=bins, max_refine_pairs=200, opis=False).max_f1
    assert f.exact is exact
    if exact:
        assert (f.f1, f.threshold) == best[:2] and f.f1_bound is None
    else:
        assert f.f1 <= best[0] <= f.f1_bound


def test_a_threshold_bin_too_full_to_refine_is_a_clear_error():
    x, y = _data(5)
    with pytest.raises(DataError, match="raise `bins`"):
        calibrate(x, y, bins=1, max_refine_pairs=100, opis=False)


@pytest.mark.parametrize(("x", "y", "far", "message"), [
    (HAND_X, np.zeros(6, int), (0.1,), "no negative"),
    (HAND_X, np.arange(6), (0.1,), "no positive"),
    (HAND_X, HAND_Y, (0.0,), r"\(0, 1\)"),
    (np.vstack([HAND_X[:5], [[0, 0]]]), HAND_Y, (0.1,), "all zeros"),
    (HAND_X, HAND_Y[:5], (0.1,), "labels must be"),
])
def test_bad_inputs_are_data_errors(x, y, far, message):
    with pytest.raises(DataError, match=message):
        calibrate(x, y, far_targets=far, opis=False)


# ------------------------------------------------------------------------------------------------ OPIS
def test_opis_is_the_evaluators_value():
    import dmlplug

    x, y = _data(6)
    c = calibrate(x, y, seed=3)
    metrics = dmlplug.evaluate(x, y, evaluators=["opis", "eps_opis"], seed=3)
    assert (c.opis, c.eps_opis) == (metrics["opis"], metrics["eps_opis"])


def test_opis_defaults_are_the_evaluators_defaults():
    from dmlplug_builtins.evaluators import EpsOpisParams

    p = EpsOpisParams()
    assert {"pairs": p.pair_options(), "grid_size": p.grid_size, "far_range": p.far_range,
                             "distance_range": p.distance_range, "kind": p.utility, "epsilon": p.epsilon,
                             "pooling": p.pooling} == OPIS_DEFAULTS


# ---------------------------------------------------------------------------------------------- output
def test_dict_is_json_ready_and_table_shows_every_row():
    c = calibrate(HAND_X, HAND_Y, far_targets=(0.1, 0.25), split="test", test_split=True, bins=16)
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert (d["split"], d["test_split"], d["similarity"]) == ("test", True, "cosine")
    assert [t["target_far"] for t in d["thresholds"]] == [0.1, 0.25]
    assert d["max_f1"]["f1"] == pytest.approx(0.6) and d["opis"] == c.opis
    table = c.format_table()
    for row in (f"{c.thresholds[0].threshold:.6f}", f"{c.thresholds[1].threshold:.6f}",
                f"{c.max_f1.threshold:.6f}", "FAR <= 0.1", "FAR <= 0.25", "max F1", "OPIS", "TEST split"):
        assert row in table
    assert "TEST split" not in calibrate(HAND_X, HAND_Y, split="val", bins=16, opis=False).format_table()


# --------------------------------------------------------------------------------------- calibrate_run
#: A seconds-long glyph run (as tests/engine/test_load_run.py); 40 classes, 20 of them test classes.
RUN_SETS = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8",
            "data.sampler.m=2", "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=1",
            "evaluation.initial=false"]


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Two trained tiny runs: without a validation split, and with one (a quarter of the training classes)."""
    from e2e import TINY_RECIPE

    import dmlplug

    folder = tmp_path_factory.mktemp("calibrate_run")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    runs = {}
    for name, extra in (("no_val", []), ("val", ["data.dataset.val_fraction=0.25"])):
        result = dmlplug.run(recipe, overrides=RUN_SETS + extra, out=folder / name, quiet=True)
        assert result.status == "completed"
        runs[name] = folder / name
    return runs


def _embed_split(run_dir, split):
    """The split embedded by hand in one batch: the loaded model on the test transform of every image."""
    import torch

    import dmlplug

    loaded = dmlplug.load_run(run_dir)
    source = getattr(loaded.dataset, split)
    with torch.no_grad():
        images = torch.stack([loaded.test_transform(source.load_image(i)) for i in range(len(source))])
        return loaded.model.embed(images).numpy(), np.asarray(source.labels)


@pytest.mark.slow
def test_calibrate_run_uses_the_validation_split_else_the_test_split_flagged(tiny_runs):
    from dmlplug.bundle.calibrate import calibrate_run

    for name, split in (("no_val", "test"), ("val", "val")):
        x, y = _embed_split(tiny_runs[name], split)
        got = calibrate_run(tiny_runs[name], batch_size=len(y))
        assert (got.split, got.test_split, got.items) == (split, split == "test", len(y))
        expected = calibrate(x, y, split=split, test_split=split == "test")
        assert got.to_dict() == expected.to_dict()
        assert ("TEST split" in got.format_table()) is (split == "test")
    forced = calibrate_run(tiny_runs["val"], split="test", far_targets=(0.05,), batch_size=64)
    assert forced.test_split and [t.target_far for t in forced.thresholds] == [0.05]
    with pytest.raises(DataError, match="no 'val' split"):
        calibrate_run(tiny_runs["no_val"], split="val")


def test_opis_options_follow_the_runs_evaluator_table():
    from dmlplug.bundle.calibrate import opis_options

    assert opis_options([{"name": "recall"}]) == {"pairs": OPIS_DEFAULTS["pairs"]}
    table = {"name": "opis", "pairs": "sampled", "negative_ratio": 3.0, "grid_size": 50, "far_range": [0.01, 0.2],
             "utility": "pr"}
    assert opis_options([{"name": "recall"}, table]) == {
        "pairs": {**OPIS_DEFAULTS["pairs"], "mode": "sampled", "negative_ratio": 3.0}, "grid_size": 50,
        "far_range": (0.01, 0.2), "kind": "pr"}
