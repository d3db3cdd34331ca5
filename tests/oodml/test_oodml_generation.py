"""Split generation: class swapping, class removal, even selection, episodes, partitions, assembly."""

import numpy as np
import pytest

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.assemble import build_split_file
from dmlplug_builtins.oodml.episodes import partition_train_val, sample_episodes
from dmlplug_builtins.oodml.frechet import frechet_distance
from dmlplug_builtins.oodml.selection import select_evenly
from dmlplug_builtins.oodml.swapping import (
    SplitCandidate,
    class_means,
    generate_candidates,
    remove_classes,
    swap_classes,
)


def two_clusters(rng, per_cluster=6, dim=4, gap=10.0):
    """Class means in two well separated clusters: classes 0..n-1 near 0, n..2n-1 near `gap` (axis 0)."""
    low = rng.normal(0.0, 1.0, (per_cluster, dim))
    high = rng.normal(0.0, 1.0, (per_cluster, dim))
    high[:, 0] += gap
    return np.concatenate([low, high])


def changed_slots(before, after):
    return {i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y}


def test_class_means_and_counts():
    features = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0], [0.0, 1.0]])
    labels = np.array([0, 0, 2, 1])
    means, counts = class_means(features, labels)
    assert means.tolist() == [[2.0, 1.0], [0.0, 1.0], [5.0, 5.0]]
    assert counts.tolist() == [2, 1, 1]
    with pytest.raises(DataError, match="class 1 has no image"):
        class_means(features[[0, 2]], np.array([0, 2]))


def test_swap_moves_the_most_foreign_classes_and_raises_fid():
    rng = np.random.default_rng(0)
    means = two_clusters(rng)
    # Default split: mostly low classes in train, but train slot 2 holds a high class and test slot 1 a
    # low one. Those two are the obvious swap: afterwards the sides are the two clusters.
    train, test = [0, 1, 6, 3, 4, 5], [7, 2, 8, 9, 10, 11]
    history = swap_classes(means, train, test, swaps_per_iter=1, iterations=2)
    assert [c.key for c in history] == ["0", "1"]
    assert history[0].train == tuple(train) and history[0].fid == pytest.approx(
        frechet_distance(means[train], means[test]))
    assert history[1].train == (0, 1, 2, 3, 4, 5) and history[1].test == (7, 6, 8, 9, 10, 11)
    assert history[1].fid > 2 * history[0].fid


def test_swapping_keeps_class_sets_and_counts_keys_in_classes():
    rng = np.random.default_rng(1)
    means = rng.normal(size=(20, 8))
    history = swap_classes(means, range(10), range(10, 20), swaps_per_iter=2, iterations=6)
    assert [c.key for c in history] == ["0", "2", "4", "6", "8", "10"]
    for candidate in history:
        assert sorted(candidate.train + candidate.test) == list(range(20))
    for before, after in zip(history, history[1:], strict=False):
        assert len(changed_slots(before.train, after.train)) == 2


def slots_reused_within(history, iterations_back):
    """Whether some train slot is swapped again within `iterations_back` iterations of its last swap."""
    changed = [changed_slots(a.train, b.train) for a, b in zip(history, history[1:], strict=False)]
    return any(changed[i] & changed[j] for i in range(len(changed))
               for j in range(max(0, i - iterations_back), i))


@pytest.mark.parametrize("swaps_per_iter", [1, 2])
def test_history_blocks_recently_swapped_slots(swaps_per_iter):
    rng = np.random.default_rng(2)
    means = rng.normal(size=(16, 6))
    history_length = 3
    # Whole earlier iterations that are certainly within the last `history_length` swaps.
    iterations_back = (history_length - (swaps_per_iter - 1)) // swaps_per_iter
    runs = {h: swap_classes(means, range(8), range(8, 16), swaps_per_iter=swaps_per_iter, iterations=12,
                            history=h) for h in (0, history_length)}
    assert not slots_reused_within(runs[history_length], iterations_back)
    assert slots_reused_within(runs[0], iterations_back)  # the rule is what prevents it


def test_inverse_swapping_reduces_the_shift():
    rng = np.random.default_rng(3)
    means = two_clusters(rng, per_cluster=8)
    history = swap_classes(means, range(8), range(8, 16), swaps_per_iter=1, iterations=4, history=30,
                           inverse=True)
    assert [c.key for c in history] == ["0", "-1", "-2", "-3"]
    assert history[-1].fid < history[0].fid


def test_removal_keeps_half_of_each_side_and_stops_at_the_limit():
    rng = np.random.default_rng(4)
    means = rng.normal(size=(30, 6))
    counts = rng.integers(5, 60, size=30)
    train, test = list(range(15)), list(range(15, 30))
    removed = remove_classes(means, counts, train, test, removals_per_iter=2, min_remaining=0.5)
    assert removed, "at least one removal step fits in half of the data"
    assert [c.key for c in removed] == [f"R{2 * (i + 1)}" for i in range(len(removed))]
    for candidate in removed:
        assert counts[list(candidate.train)].sum() >= 0.5 * counts[train].sum()
        assert counts[list(candidate.test)].sum() >= 0.5 * counts[test].sum()
        assert set(candidate.train) <= set(train) and set(candidate.test) <= set(test)
        assert candidate.fid == pytest.approx(frechet_distance(means[list(candidate.train)],
                                                               means[list(candidate.test)]))
    # One more step would break the limit (or leave fewer than two classes).
    more = remove_classes(means, counts, removed[-1].train, removed[-1].test, removals_per_iter=2,
                          min_remaining=0.0, max_iterations=1)
    if more:
        nxt = more[0]
        assert (counts[list(nxt.train)].sum() < 0.5 * counts[train].sum()
                or counts[list(nxt.test)].sum() < 0.5 * counts[test].sum())


def test_removal_deletes_the_bridging_classes_and_raises_fid():
    rng = np.random.default_rng(5)
    means = two_clusters(rng, per_cluster=8)
    # Each side has one class from the other cluster: those bridge the sets and go first.
    train, test = [0, 1, 2, 3, 4, 5, 6, 8], [7, 9, 10, 11, 12, 13, 14, 15]
    removed = remove_classes(means, np.full(16, 10), train, test, removals_per_iter=1, max_iterations=1)
    assert removed[0].key == "R1"
    assert 8 not in removed[0].train and 7 not in removed[0].test
    assert removed[0].fid > frechet_distance(means[train], means[test])


def test_generate_candidates_orders_inverse_swaps_and_removal():
    rng = np.random.default_rng(6)
    means = rng.normal(size=(24, 5))
    candidates = generate_candidates(means, np.full(24, 20), range(12), range(12, 24), swaps_per_iter=2,
                                     iterations=4, inverse_iterations=3)
    keys = [c.key for c in candidates]
    assert keys[:6] == ["-4", "-2", "0", "2", "4", "6"]
    assert all(k.startswith("R") for k in keys[6:]) and len(keys[6:]) > 0
    assert len(set(keys)) == len(keys)


def candidates_at(fids):
    return [SplitCandidate(key=str(i), train=(0, 1), test=(2, 3), fid=float(f)) for i, f in enumerate(fids)]


def test_selection_hits_evenly_spaced_targets():
    chosen = select_evenly(candidates_at(np.arange(101)[::-1]), 5, always_include=())
    assert [c.fid for c in chosen] == [0, 25, 50, 75, 100]


def test_selection_keeps_required_and_extreme_splits():
    candidates = candidates_at([3.0, 5.0, 9.0, 12.0, 20.0, 31.0, 44.0, 45.0, 60.0])
    chosen = select_evenly(candidates, 4, always_include=("3",))
    fids = [c.fid for c in chosen]
    assert fids[0] == 3.0 and fids[-1] == 60.0 and 12.0 in fids
    assert fids == sorted(fids)


def test_selection_spreads_random_candidates_evenly():
    rng = np.random.default_rng(7)
    fids = np.sort(rng.uniform(0, 200, 400))
    chosen = [c.fid for c in select_evenly(candidates_at(fids), 9, always_include=())]
    targets = np.linspace(fids[0], fids[-1], 9)
    largest_gap = np.diff(fids).max()
    assert np.abs(np.array(chosen) - targets).max() <= largest_gap
    assert len(set(chosen)) == 9


def test_selection_errors():
    with pytest.raises(DataError, match="only 3 candidate"):
        select_evenly(candidates_at([1, 2, 3]), 4)
    with pytest.raises(DataError, match="must be kept"):
        select_evenly(candidates_at([1, 2, 3, 4, 5]), 2, always_include=("2",))


def images(classes, per_class=12):
    return {c: [f"{c}_{i:03d}.jpg" for i in range(per_class)] for c in classes}


def test_episodes_are_seeded_and_cover_every_class():
    pool = images(["x", "y", "z"])
    first = sample_episodes(pool, shots=(2, 5), episodes=4, seed=3)
    assert first == sample_episodes({c: v[::-1] for c, v in reversed(pool.items())}, shots=(5, 2),
                                    episodes=4, seed=3)
    assert first != sample_episodes(pool, shots=(2, 5), episodes=4, seed=4)
    assert sorted(first) == [2, 5] and sorted(first[2]) == [0, 1, 2, 3]
    for k, by_episode in first.items():
        for support in by_episode.values():
            assert sorted(support) == ["x", "y", "z"]
            for cls, chosen in support.items():
                assert len(set(chosen)) == k and set(chosen) <= set(pool[cls])
    # Episodes differ from one another, and adding episodes leaves the existing ones unchanged.
    assert first[5][0] != first[5][1]
    assert sample_episodes(pool, shots=(5,), episodes=6, seed=3)[5][3] == first[5][3]


def test_episodes_need_a_query_image():
    with pytest.raises(DataError, match="10-shot"):
        sample_episodes(images(["x"], per_class=10), shots=(2, 10))


def test_train_val_partition_sizes_match_published_files():
    for n, expected in [(98, 25), (86, 22), (74, 19), (62, 16)]:
        classes = [f"c{i}" for i in range(n)]
        split_train, split_val = partition_train_val(classes, seed=1)
        assert len(split_val) == expected
        assert sorted(split_train + split_val) == sorted(classes)
        assert split_train == [c for c in classes if c in set(split_train)]  # order kept
        assert partition_train_val(classes, seed=1) == (split_train, split_val)


def test_build_split_file_end_to_end(tmp_path):
    from dmlplug_builtins.oodml.splitfile import load_splits, save_splits

    rng = np.random.default_rng(8)
    names = [f"class_{i:02d}" for i in range(20)]
    means = rng.normal(size=(20, 6))
    candidates = generate_candidates(means, np.full(20, 12), range(10), range(10, 20), swaps_per_iter=1,
                                     iterations=5)
    selected = select_evenly(candidates, 3)
    split_file = build_split_file(selected, names, images(names), dataset="toy", shots=(2, 5), episodes=3,
                                  seed=0, info={"eps": 1e-8})
    assert [s.id for s in split_file.splits] == [1, 2, 3]
    fids = [s.fid for s in split_file.splits]
    assert fids == sorted(fids) == sorted(c.fid for c in selected)
    assert any(s.generator_key == "0" for s in split_file.splits)
    for split in split_file.splits:
        assert split.train == sorted(split.train)
        assert sorted(split.episodes[5][2]) == split.test
    assert load_splits(save_splits(tmp_path / "toy.json", split_file)) == split_file
