"""A bundle or an index is checked when loaded: a replaced, truncated or damaged model, bundle.json or index file
is one clear message (what, which file, how to fix), exit 2, no traceback, nothing written, from embed, index,
search and the Python API; the model's digest is computed once per process and file version."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

import dmlplug
from dmlplug.bundle.errors import BundleError


def _copy(bundle, tmp_path, name="bundle"):
    copy = tmp_path / name
    shutil.copytree(bundle, copy)
    return copy


def _other_model(bundle):
    """Replace the bundle's model.onnx by a valid model with other weights (as another run's export would be)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(bundle / "model.onnx")
    weight = next(t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 4)
    changed = numpy_helper.to_array(weight) * 1.5 + 0.01
    weight.CopyFrom(numpy_helper.from_array(changed.astype(np.float32), weight.name))
    onnx.save(model, bundle / "model.onnx")


def _damage(bundle, how):
    model = bundle / "model.onnx"
    if how == "other model":
        _other_model(bundle)
    elif how == "truncated":
        model.write_bytes(model.read_bytes()[:1000])
    else:  # random bytes of the model's size
        model.write_bytes(np.random.default_rng(0).bytes(model.stat().st_size))


@pytest.fixture(scope="module")
def index_dir(onnx_bundle, image_folder, tmp_path_factory):
    from dmlplug.cli import main

    out = tmp_path_factory.mktemp("integrity") / "index"
    try:
        main(["index", str(onnx_bundle), str(image_folder), "--out", str(out), "-q"])
    except SystemExit as exc:
        assert not exc.code
    return out


def _one_clear_error(code, err, *phrases):
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.count("error: ") == 1 and "  fix:" in err
    for phrase in phrases:
        assert phrase in err, err


@pytest.mark.parametrize("how", ["other model", "truncated", "random"])
def test_a_replaced_or_damaged_model_is_refused_by_every_command(onnx_bundle, image_folder, index_dir, tmp_path, how,
                                                                  cli):
    bundle = _copy(onnx_bundle, tmp_path)
    if how == "other model":  # the replacement loads and embeds: only the digest tells it apart
        replaced = _copy(onnx_bundle, tmp_path, "replaced")
        _other_model(replaced)
        probe = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
        import onnxruntime as ort

        def run(path):
            return ort.InferenceSession(str(path / "model.onnx")).run(None, {"images": probe})[0]

        assert np.abs(run(replaced) - run(onnx_bundle)).max() > 1e-2
    _damage(bundle, how)
    phrase = "is not the file bundle.json records" if how != "truncated" else "bytes where bundle.json records"
    before = sorted(tmp_path.rglob("*"))
    for args in (("embed", bundle, image_folder, "--out", tmp_path / "e.npz", "-q"),
                 ("index", bundle, image_folder, "--out", tmp_path / "idx", "-q"),
                 ("search", bundle, index_dir, sorted(image_folder.rglob("*.png"))[0])):
        code, out, err = cli(*args)
        _one_clear_error(code, err, "the bundle's model file", str(bundle / "model.onnx"), phrase,
                         "dmlplug export")
        assert out == ""
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
    with pytest.raises(BundleError, match="the bundle's model file"):
        dmlplug.load_bundle(bundle)


def test_a_bundle_folder_without_bundle_json_is_called_so(onnx_bundle, image_folder, index_dir, tmp_path, cli):
    bundle = _copy(onnx_bundle, tmp_path)
    (bundle / "bundle.json").unlink()
    code, _, err = cli("embed", bundle, image_folder, "--out", tmp_path / "e.npz", "-q")
    _one_clear_error(code, err, f"{bundle} is a bundle folder without its bundle.json (it holds model.onnx)")
    assert "no checkpoint" not in err
    for args in (("index", bundle, image_folder, "--out", tmp_path / "idx", "-q"),
                 ("search", bundle, index_dir, sorted(image_folder.rglob("*.png"))[0])):
        code, _, err = cli(*args)
        _one_clear_error(code, err, f"{bundle} is not a bundle: it has no bundle.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli("embed", empty, image_folder, "--out", tmp_path / "e.npz", "-q")
    _one_clear_error(code, err, f"{empty} is neither a bundle (no bundle.json) nor a run directory")
    assert not (tmp_path / "e.npz").exists() and not (tmp_path / "idx").exists()


@pytest.mark.parametrize(("change", "phrase"), [
    (lambda m: m.pop("embedding_size"), "`embedding_size` is None"),
    (lambda m: m["model"].update(file="../elsewhere.onnx"), "does not name a model file"),
    (lambda m: m["model"].pop("sha256"), "has no sha256"),
    (lambda m: m["preprocessing"]["steps"][1].pop("size"), "preprocessing is damaged: KeyError"),
    (lambda m: m.update(embedding_size=9), "has output shape ['batch', 8], but bundle.json records ['batch', 9]"),
    (lambda m: m.update(input_size=[3, 64, 64]), "has input shape ['batch', 3, 32, 32]"),
])
def test_a_damaged_bundle_json_is_one_clear_error(onnx_bundle, image_folder, tmp_path, change, phrase, cli):
    bundle = _copy(onnx_bundle, tmp_path)
    manifest = json.loads((bundle / "bundle.json").read_text())
    change(manifest)
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    code, _, err = cli("embed", bundle, image_folder, "--out", tmp_path / "e.npz", "-q")
    _one_clear_error(code, err, phrase)
    assert not (tmp_path / "e.npz").exists()


def test_a_torchscript_model_of_another_embedding_size_fails_when_it_runs(torchscript_bundle, image_folder, tmp_path,
                                                                          cli):
    bundle = _copy(torchscript_bundle, tmp_path)
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**manifest, "embedding_size": 9}))
    code, _, err = cli("embed", bundle, image_folder, "--out", tmp_path / "e.npz", "-q")
    _one_clear_error(code, err, "makes embeddings of shape (8,), but bundle.json records 9-d ones")
    assert not (tmp_path / "e.npz").exists()


def test_the_model_is_hashed_once_per_process_and_file_version(onnx_bundle, tmp_path, monkeypatch):
    from dmlplug.bundle import integrity

    bundle = _copy(onnx_bundle, tmp_path)
    hashed = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda path: hashed.append(path) or real(path))
    dmlplug.load_bundle(bundle)
    dmlplug.load_bundle(bundle)
    assert hashed == [bundle / "model.onnx"]  # the second load trusts the digest of the unchanged file
    model = bundle / "model.onnx"
    stat = model.stat()
    model.write_bytes(model.read_bytes())  # written anew, same bytes: hashed again even with its mtime restored
    import os

    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dmlplug.load_bundle(bundle)
    assert len(hashed) == 2


# ------------------------------------------------------------------------------------------------ indexes
def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(("damage", "phrase"), [
    (lambda d: (d / "index.faiss").unlink(), "the index data file index.faiss is missing"),
    (lambda d: _truncate(d / "index.faiss"), "bytes where index.json records"),
    (lambda d: (d / "index.faiss").write_bytes(bytes((d / "index.faiss").stat().st_size)),
     "is not the file index.json records"),
    (lambda d: _truncate(d / "paths.json"), "bytes where index.json records"),
    (lambda d: (d / "index.json").write_text("{"), "is not a readable index folder: index.json"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()), "size": 30})),
     "does not list the 30 image paths index.json records"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()), "dim": 16})),
     "holds a IndexFlatIP of 24 8-d vectors, but index.json records a exact index of 24 16-d vectors"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()), "files": {},
                                                          "kind": "hnsw", "codec": "hnsw"})), "hold a IndexFlatIP"),
])
def test_a_damaged_index_is_one_clear_error(onnx_bundle, index_dir, image_folder, tmp_path, damage, phrase, cli):
    from dmlplug.bundle.index_files import read_index
    from dmlplug.plugins import get_host

    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    damage(copy)
    code, out, err = cli("search", onnx_bundle, copy, sorted(image_folder.rglob("*.png"))[0], "--json")
    _one_clear_error(code, err, phrase, "dmlplug index")
    assert out == ""
    with pytest.raises(BundleError, match="index"):
        read_index(copy, get_host().registry)


def test_a_truncated_torch_index_is_one_clear_error(onnx_bundle, image_folder, tmp_path, monkeypatch, cli):
    monkeypatch.setitem(sys.modules, "faiss", None)
    code, _, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / "idx", "-q")
    assert code == 0, err
    meta = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert meta["storage"] == "torch" and set(meta["files"]) == {"embeddings.pt", "paths.json"}
    query = sorted(image_folder.rglob("*.png"))[0]
    for record, phrase in ((meta["files"], "bytes where index.json records"), ({}, "cannot be read: ")):
        (tmp_path / "idx" / "index.json").write_text(json.dumps({**meta, "files": record}))
        _truncate(tmp_path / "idx" / "embeddings.pt")
        code, _, err = cli("search", onnx_bundle, tmp_path / "idx", query)
        _one_clear_error(code, err, phrase, "embeddings.pt")


def test_an_index_records_its_files_and_the_model_that_built_it(onnx_bundle, index_dir):
    import hashlib

    meta = json.loads((index_dir / "index.json").read_text())
    bundle = dmlplug.load_bundle(onnx_bundle)
    manifest = json.loads((onnx_bundle / "bundle.json").read_text())
    assert meta["model_sha256"] == manifest["model"]["sha256"] == bundle.model_sha256
    assert meta["checkpoint_sha256"] == manifest["source"]["checkpoint_sha256"]
    assert meta["probe"] == pytest.approx(bundle.probe().tolist(), abs=1e-6) and len(meta["probe"]) == 8
    for name, record in meta["files"].items():
        data = (index_dir / name).read_bytes()
        assert record == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert set(meta["files"]) == {"index.faiss", "paths.json"}
