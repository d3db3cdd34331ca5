"""`dmlplug index --codec/--budget/--from-shards`, `index-add` and `index-remove` on the tiny bundle: every codec
searched by `search` and the Python API, the budget's table, shards of the bundle's embedding, edits equal to a
rebuild, and every mistake one clear message, exit 2, nothing written or changed."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import numpy as np
import pytest
from cli_results import ok as _ok
from cli_results import one_clear_error as _one_clear_error

import dmlplug
from tests.shared.shards import write_shards


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def embedded(onnx_bundle, image_folder, tmp_path_factory):
    """The image folder embedded by the bundle: ``(npz, embeddings, paths)``."""
    from dmlplug.cli import main

    out = tmp_path_factory.mktemp("embedded") / "emb.npz"
    try:
        main(["embed", str(onnx_bundle), str(image_folder), "--out", str(out), "-q"])
    except SystemExit as exc:
        assert not exc.code
    with np.load(out) as data:
        return out, data["embeddings"], [str(p) for p in data["paths"]]


@pytest.mark.parametrize("codec", ["float16", "int8", "binary", "binary:rescore_from=int8", "pq:pq_m=4"])
def test_search_and_the_python_api_use_every_codec(onnx_bundle, image_folder, embedded, tmp_path, codec, cli):
    folder = tmp_path / codec.replace(":", "_")
    out, _ = _ok(cli("index", onnx_bundle, image_folder, "--out", folder, "--codec", codec, "-q"))
    meta = json.loads((folder / "index.json").read_text())
    name = codec.partition(":")[0]
    assert meta["codec"] == meta["kind"] == name and meta["recall_queries"] == 2
    assert (f"(codec {name}, {meta['memory_bytes_per_vector']:.1f} bytes per vector in memory, "
            f"{meta['disk_bytes_per_vector']:.1f} on disk)") in out
    if ":" in codec:  # the parameter given with the codec is the index's
        key, _, value = codec.partition(":")[2].partition("=")
        assert str(meta[key]) == value
    _, _, paths = embedded
    result, _ = _ok(cli("search", onnx_bundle, folder, paths[3], "--k", "3", "--json"))
    matches = json.loads(result)[0]["matches"]
    assert len(matches) == 3 and all(m["path"] in paths for m in matches)
    assert dmlplug.load_bundle(onnx_bundle).search([paths[3]], folder, k=3) == json.loads(result)


def test_the_budget_prints_its_candidates_and_a_budget_nothing_meets_writes_nothing(onnx_bundle, image_folder,
                                                                                    tmp_path, cli):
    out, err = _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "fit", "--budget", "1MB", "-q"))
    # every candidate fits 1MB for 24 images: the best recall@10, then recall@1, then the fewest bytes wins
    rows = {m[1]: [float(m[2]), float(m[4]), float(m[5])] for m in
            (re.match(r"^[* ] (\w+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +yes\b", line)
             for line in err.splitlines()) if m}
    assert set(rows) == {"float32", "float16", "int8", "binary", "pq"}, err
    best = max(rows, key=lambda c: (rows[c][2], rows[c][1], -rows[c][0]))
    assert f"budget 1MB: {best}, the most accurate codec that fits in memory" in err and f"* {best} " in err
    assert json.loads((tmp_path / "fit" / "index.json").read_text())["codec"] == best
    assert rows["float32"][1:] == [1.0, 1.0]  # exact
    _one_clear_error(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "none", "--budget", "1B", "-q"),
                     "no index codec fits the budget 1B", "give a larger --budget")
    assert not (tmp_path / "none").exists() and not list(tmp_path.glob(".none*"))


def test_mistakes_of_index_are_one_clear_error_and_write_nothing(onnx_bundle, image_folder, tmp_path, cli):
    out = tmp_path / "x"
    listing = "dmlplug list index_codecs --params"
    for args, phrases in ((("--codec", "lz4"), ("unknown index_codec 'lz4'", listing)),
                          (("--codec", "pq:pq_m=0"), ("pq_m: Input should be greater than or equal to 1", listing)),
                          (("--codec", "binary:rescore_from=tape"), ("rescore_from", "'disk', 'int8' or 'none'",
                                                                     listing)),
                          (("--codec", "pq:pq_m"), ("'pq_m' is not key=value", listing)),
                          (("--codec", "pq:pq_m=2", "--pq-m", "2"), ("both set pq_m",)),
                          (("--codec", "pq", "--budget", "64B"), ("give --budget or --codec, not both",)),
                          (("--budget", "lots"), ("--budget 'lots' is not a size",)),
                          (("--codec", "int8", "--nlist", "4"), ("--nlist does not apply to the int8 codec",
                                                                 "(ivf, pq)")),
                          (("--codec", "pq", "--pq-m", "3"), ("pq_m 3 does not divide the embedding size 8",)),
                          (("--from-shards", tmp_path), ("exactly one",))):
        _one_clear_error(cli("index", onnx_bundle, image_folder, "--out", out, *args, "-q"), *phrases)
        assert not out.exists()
    # A bad codec is refused before the bundle is even read (a missing one here), let alone the images embedded.
    _one_clear_error(cli("index", tmp_path / "no_bundle", image_folder, "--out", out, "--codec", "lz4"),
                     "unknown index_codec 'lz4'")


def _shards(folder, embeddings, paths, model, bounds=(0, 10, 24), root=None):
    return write_shards(folder, embeddings, paths, bounds, model, root=root)


def test_an_index_from_shards_equals_the_index_of_the_images(onnx_bundle, image_folder, embedded, tmp_path, cli):
    _, embeddings, paths = embedded
    bundle = dmlplug.load_bundle(onnx_bundle)
    shards = _shards(tmp_path / "shards", embeddings, paths, bundle.model_sha256, root=image_folder)
    _ok(cli("index", onnx_bundle, "--from-shards", shards, "--out", tmp_path / "a", "--codec", "int8", "-q"))
    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "b", "--codec", "int8", "-q"))
    a, b = (json.loads((tmp_path / n / "index.json").read_text()) for n in "ab")
    assert a["files"] == b["files"] and a["root"] == b["root"] == str(image_folder)  # the same index, byte for byte
    other = _shards(tmp_path / "other", embeddings, paths, "0" * 64)
    _one_clear_error(cli("index", onnx_bundle, "--from-shards", other, "--out", tmp_path / "c", "-q"),
                     "were embedded by the model with sha256 000000000000")
    assert not (tmp_path / "c").exists()


def test_add_and_remove_equal_a_rebuild_and_refuse_another_model(onnx_bundle, image_folder, embedded, tmp_path,
                                                                 cli):
    npz, embeddings, paths = embedded
    first = tmp_path / "first"
    for path in sorted(image_folder.rglob("*.png"))[:16]:
        (first / path.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, first / path.parent.name / path.name)
    index = tmp_path / "index"
    _ok(cli("index", onnx_bundle, first, "--out", index, "--codec", "float16", "-q"))
    out, _ = _ok(cli("index-add", onnx_bundle, index, npz))
    assert "8 images added" not in out  # the 16 copies have other paths than the npz's: all 24 are new
    assert "24 images added" in out and json.loads((index / "index.json").read_text())["size"] == 40
    # inside the index's root, paths relative to it; the added images, outside, by their absolute paths
    assert json.loads((index / "paths.json").read_text()) == sorted(
        str(p.relative_to(first)) for p in first.rglob("*.png")) + paths
    (tmp_path / "gone.txt").write_text("\n".join(str(p) for p in sorted(first.rglob("*.png"))) + "\n")
    out, _ = _ok(cli("index-remove", index, tmp_path / "gone.txt"))
    assert "16 images removed" in out
    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "rebuilt", "--codec", "float16", "-q"))
    bundle = dmlplug.load_bundle(onnx_bundle)
    edited, rebuilt = (bundle.search(paths[:4], folder, k=5) for folder in (index, tmp_path / "rebuilt"))
    assert [[(m["path"], m["similarity"]) for m in r["matches"]] for r in edited] == [
        [(m["path"], m["similarity"]) for m in r["matches"]] for r in rebuilt]  # the same files, found alike
    assert {m["id"] for r in edited for m in r["matches"]} <= set(range(16, 40))  # the added items' new ids
    meta = json.loads((index / "index.json").read_text())
    assert (meta["added_since_build"], meta["removed_since_build"]) == (24, 16)
    before = _digest(index)
    # an embedding of another model: recorded, or found by embedding its first image again
    np.savez(tmp_path / "other.npz", embeddings=embeddings, paths=np.asarray(paths, dtype=str),
             model_sha256=np.asarray("f" * 64))
    _one_clear_error(cli("index-add", onnx_bundle, index, tmp_path / "other.npz"), "was embedded by another model")
    np.savez(tmp_path / "moved.npz", embeddings=embeddings[::-1].copy(), paths=np.asarray(paths, dtype=str))
    _one_clear_error(cli("index-add", onnx_bundle, index, tmp_path / "moved.npz"), "embeds its first image")
    _one_clear_error(cli("index-add", onnx_bundle, index, npz), "are already in")
    (tmp_path / "unknown.txt").write_text("not/there.png\n")
    _one_clear_error(cli("index-remove", index, tmp_path / "unknown.txt"), "1 of the items to remove are not in")
    assert _digest(index) == before and not list(tmp_path.glob(".index.*"))


def test_an_index_of_another_bundle_takes_no_additions(onnx_bundle, image_folder, embedded, tmp_path, cli):
    from test_integrity import _other_model

    other = tmp_path / "other_bundle"
    shutil.copytree(onnx_bundle, other)
    _other_model(other)
    manifest = json.loads((other / "bundle.json").read_text())
    manifest["model"]["sha256"] = hashlib.sha256((other / "model.onnx").read_bytes()).hexdigest()
    manifest["model"]["size"] = (other / "model.onnx").stat().st_size
    (other / "bundle.json").write_text(json.dumps(manifest))
    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "index", "--codec", "pq", "-q"))
    before = _digest(tmp_path / "index")
    _one_clear_error(cli("index-add", other, tmp_path / "index", image_folder), "was built by another model")
    assert _digest(tmp_path / "index") == before


@pytest.mark.parametrize("name", ["index.faiss", "vectors.npy"])
def test_a_truncated_binary_index_file_is_one_clear_error(onnx_bundle, image_folder, embedded, tmp_path, name, cli):
    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "bin", "--codec", "binary", "-q"))
    data = tmp_path / "bin" / name
    data.write_bytes(data.read_bytes()[:40])
    _one_clear_error(cli("search", onnx_bundle, tmp_path / "bin", embedded[2][0]), name,
                     "bytes where index.json records")
    meta = json.loads((tmp_path / "bin" / "index.json").read_text())
    (tmp_path / "bin" / "index.json").write_text(json.dumps({**meta, "files": {}}))
    _one_clear_error(cli("search", onnx_bundle, tmp_path / "bin", embedded[2][0]),
                     "cannot be read by faiss" if name == "index.faiss" else "hold a damaged vectors.npy")
