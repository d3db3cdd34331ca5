"""Split files: JSON round trip, schema checks, atomic writes, safe reading of published pickles."""

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, load_published_pickle, load_splits, save_splits

# The published CARS196 file lives next to the repository (../shared/data/oodml in CI).
PUBLISHED_CARS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "oodml" / "cars196_splits.pkl"


def make_split(split_id=1, fid=8.5):
    return OodSplit(
        id=split_id,
        fid=fid,
        train=["a", "b", "c", "d"],
        test=["e", "f"],
        split_train=["a", "c", "d"],
        split_val=["b"],
        episodes={2: {0: {"e": ["e1.jpg", "e2.jpg"], "f": ["f3.jpg", "f1.jpg"]},
                      1: {"e": ["e4.jpg", "e2.jpg"], "f": ["f2.jpg", "f1.jpg"]}},
                  1: {0: {"e": ["e3.jpg"], "f": ["f9.jpg"]}}},
        generator_key="R4",
    )


def test_round_trip(tmp_path):
    splits = [make_split(2, 30.25), make_split(1, 8.5)]
    path = save_splits(tmp_path / "sub" / "splits.json", splits, dataset="toy", source="generated",
                       info={"backbone": "resnet50", "eps": 1e-8})
    loaded = load_splits(path)
    assert isinstance(loaded, SplitFile)
    assert [s.id for s in loaded.splits] == [1, 2]
    assert loaded.by_id(2) == splits[0] and loaded.by_id(1) == splits[1]
    assert loaded.dataset == "toy" and loaded.info == {"backbone": "resnet50", "eps": 1e-8}
    # Integer shot / episode keys survive JSON's string keys.
    assert loaded.by_id(1).episodes[2][1]["f"] == ["f2.jpg", "f1.jpg"]
    # A SplitFile saves to the same bytes again.
    again = save_splits(tmp_path / "again.json", loaded)
    assert again.read_text() == path.read_text()


def test_file_is_documented_json(tmp_path):
    path = save_splits(tmp_path / "s.json", [make_split()], dataset="toy")
    raw = json.loads(path.read_text())
    assert raw["format"] == "dmlplug.oodml.splits" and raw["version"] == 1
    assert set(raw["splits"][0]) == {"id", "fid", "train", "test", "split_train", "split_val", "episodes",
                                     "generator_key"}
    assert raw["splits"][0]["episodes"]["2"]["0"]["e"] == ["e1.jpg", "e2.jpg"]


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "s.json"
    save_splits(path, [make_split(fid=1.0)])
    save_splits(path, [make_split(fid=2.0)])
    assert load_splits(path).splits[0].fid == 2.0
    assert os.listdir(tmp_path) == ["s.json"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    save_splits(path, [make_split(fid=1.0)])
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_splits(path, [make_split(fid=2.0)])
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["s.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"test": ["d", "f"]}, "share"),
        ({"split_val": ["b", "x"]}, "partition"),
        ({"episodes": {2: {0: {"e": ["e1.jpg", "e2.jpg"]}}}}, "every test class"),
        ({"episodes": {2: {0: {"e": ["e1.jpg"], "f": ["f1.jpg", "f2.jpg"]}}}}, "2 distinct images"),
        ({"fid": float("nan")}, "finite"),
        ({"train": ["a", "a", "b", "c", "d"]}, "twice"),
    ],
)
def test_schema_violations_are_reported(tmp_path, change, message):
    raw = make_split().model_dump(mode="json") | change
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "dmlplug.oodml.splits", "version": 1, "splits": [raw]}))
    with pytest.raises(DataError, match=message):
        load_splits(path)


def test_unknown_keys_and_duplicate_ids_are_rejected(tmp_path):
    raw = make_split().model_dump(mode="json")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "dmlplug.oodml.splits", "version": 1, "splits": [raw | {"x": 1}]}))
    with pytest.raises(DataError, match="unknown key"):
        load_splits(path)
    path.write_text(json.dumps({"format": "dmlplug.oodml.splits", "version": 1, "splits": [raw, raw]}))
    with pytest.raises(DataError, match="unique"):
        load_splits(path)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_splits(tmp_path / "nope.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        load_splits(tmp_path / "broken.json")


def published_like():
    """A small dict in the published layout, with numpy scalars as the reference pickles hold them."""
    episodes = {k: {e: {np.str_("e"): [f"e{e}_{i}.jpg" for i in range(k)],
                        np.str_("f"): [f"f{e}_{i}.jpg" for i in range(k)]} for e in range(3)} for k in (2, 5)}
    return {
        3: {"train": [np.str_(c) for c in "abcd"], "test": [np.str_("e"), np.str_("f")],
            "fid": np.float64(43.5), "split_train": [np.str_(c) for c in "acd"], "split_val": [np.str_("b")],
            "test_episodes": episodes},
        1: {"train": [np.str_(c) for c in "ab"], "test": [np.str_("e"), np.str_("f")],
            "fid": np.float64(8.25), "split_train": [np.str_("a")], "split_val": [np.str_("b")],
            "test_episodes": episodes},
    }


def test_published_layout_is_converted(tmp_path):
    path = tmp_path / "toy_splits.pkl"
    path.write_bytes(pickle.dumps(published_like(), protocol=3))
    loaded = load_published_pickle(path, dataset="toy")
    assert loaded.source == "published:toy_splits.pkl" and loaded.dataset == "toy"
    assert [s.id for s in loaded.splits] == [1, 3]
    split = loaded.by_id(3)
    assert split.fid == 43.5 and type(split.fid) is float
    assert split.train == ["a", "b", "c", "d"] and all(type(c) is str for c in split.train)
    assert split.episodes[5][2]["f"] == [f"f2_{i}.jpg" for i in range(5)]
    # Converted files save as ordinary dmlplug JSON.
    assert load_splits(save_splits(tmp_path / "toy.json", loaded)) == loaded


class CallsSystem:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class CallsEval:
    def __reduce__(self):
        return (eval, ("1 + 1",))


def test_malicious_pickles_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    for index, payload in enumerate([{1: CallsSystem(marker)}, {1: {"fid": CallsEval()}}]):
        path = tmp_path / f"evil{index}.pkl"
        path.write_bytes(pickle.dumps(payload))
        with pytest.raises(DataError, match="refusing"):
            load_published_pickle(path)
    assert not marker.exists()


def test_object_dtypes_and_forged_dtype_state_are_refused(tmp_path):
    path = tmp_path / "object.pkl"
    # numpy's own loader would build an object scalar from this and crash on it.
    path.write_bytes(pickle.dumps(np.float64(1.0)).replace(b"f8", b"O8"))
    with pytest.raises(DataError, match="dtype 'O8' is not allowed"):
        load_published_pickle(path)
    # A payload longer than the dtype's item size (or a forged element size) is not read past.
    path.write_bytes(pickle.dumps(np.float64(1.0)).replace(b"f8", b"f4"))
    with pytest.raises(DataError, match="8 bytes"):
        load_published_pickle(path)


def test_big_endian_scalars_keep_their_value(tmp_path):
    path = tmp_path / "be.pkl"
    value = np.array([8.5], dtype=">f8")[0]
    episodes = {2: {0: {"e": ["1.jpg", "2.jpg"], "f": ["3.jpg", "4.jpg"]}}}
    path.write_bytes(pickle.dumps({1: {"train": ["a", "b"], "test": ["e", "f"], "fid": value,
                                       "split_train": ["a"], "split_val": ["b"], "test_episodes": episodes}}))
    assert load_published_pickle(path).splits[0].fid == 8.5


def test_wrong_layout_is_a_data_error(tmp_path):
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(DataError, match="dict keyed by split id"):
        load_published_pickle(path)
    path.write_bytes(pickle.dumps({1: {"train": ["a"]}}))
    with pytest.raises(DataError, match="layout"):
        load_published_pickle(path)
    with pytest.raises(DataError, match="not found"):
        load_published_pickle(tmp_path / "missing.pkl")


def test_published_cars196_file():
    if not PUBLISHED_CARS.is_file():
        pytest.skip(f"published split file not present at {PUBLISHED_CARS}")
    loaded = load_published_pickle(PUBLISHED_CARS, dataset="cars196")
    splits = loaded.splits
    # docs/oodml.md: class counts per side and stored FIDs of ids 1..8.
    assert [s.id for s in splits] == list(range(1, 9))
    assert [len(s.train) for s in splits] == [98] * 5 + [86, 74, 62]
    assert [len(s.test) for s in splits] == [len(s.train) for s in splits]
    assert [round(s.fid, 3) for s in splits] == [8.591, 14.335, 32.178, 43.584, 63.286, 86.124, 101.172,
                                                 123.031]
    # The default split (id 1) has the 98 first classes in train (CARS196 protocol).
    all_classes = sorted(splits[0].train + splits[0].test)
    assert splits[0].train == all_classes[:98]
    for split in splits:
        assert sorted(split.episodes) == [2, 5, 10]
        assert all(sorted(split.episodes[k]) == list(range(10)) for k in (2, 5, 10))
        assert len(split.split_val) == int(np.floor(0.25 * len(split.train) + 0.5))
