"""Replacing an index folder: readers and crashes find the old folder or the new one, never a mix, never none."""

from __future__ import annotations

import os
import threading

import pytest

from dmlplug.bundle import atomic


def _folder(tmp_path, text):
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "data").write_text(text)
    return folder


def test_a_reader_never_finds_the_folder_missing_or_a_file_half_written(tmp_path):
    folder = _folder(tmp_path, "0" * 4096)
    seen: set[str] = set()
    missing = []
    stop = threading.Event()

    def read():
        while not stop.is_set():
            try:
                seen.add((folder / "data").read_text())
            except FileNotFoundError:
                missing.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 60):
            atomic.replace_folder(folder, lambda new, i=i: (new / "data").write_text(str(i % 10) * 4096))
    finally:
        stop.set()
        reader.join()
    assert not missing
    assert all(len(value) == 4096 and len(set(value)) == 1 for value in seen)
    assert (folder / "data").read_text() == "9" * 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]  # nothing left beside it


def test_a_crash_between_the_two_renames_is_recovered(tmp_path, monkeypatch):
    """Where the atomic exchange is missing, a crash between the renames leaves both complete folders aside."""
    folder = _folder(tmp_path, "old")
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def crash_on_second(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        atomic.replace_folder(folder, lambda new: (new / "data").write_text("new"))
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert not folder.exists()
    assert atomic.recover_folder(folder)
    assert (folder / "data").read_text() == "new"  # the complete new folder, as the writer intended
    assert not atomic.recover_folder(folder)  # nothing to do once it is there


def test_a_failed_write_leaves_the_old_folder(tmp_path):
    folder = _folder(tmp_path, "old")

    def fail(new):
        (new / "data").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic.replace_folder(folder, fail)
    assert (folder / "data").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_the_exchange_swaps_two_folders_in_one_step_on_linux(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("a")
    (b / "f").write_text("b")
    assert atomic._exchange(a, b)  # CI and users' servers run Linux, where the swap never leaves a gap
    assert (a / "f").read_text() == "b" and (b / "f").read_text() == "a"
