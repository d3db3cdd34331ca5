"""The command-line path as a new user takes it: a folder of queries, matches that name files openable from any
working directory with ids that survive edits, `embed` labels that `evaluate` reads, and `index --from-embeddings`
of an embedding file of the same bundle."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_results import ok as _ok
from cli_results import one_clear_error as _one_clear_error

import dmlplug
from dmlplug.bundle.errors import BundleError


@pytest.fixture(scope="module")
def labelled(onnx_bundle, image_folder, tmp_path_factory):
    """The image folder (class subfolders a/ and b/) embedded by the ONNX bundle: the .npz."""
    from dmlplug.cli import main

    out = tmp_path_factory.mktemp("labelled") / "emb.npz"
    try:
        main(["embed", str(onnx_bundle), str(image_folder), "--out", str(out), "-q"])
    except SystemExit as exc:
        assert not exc.code
    return out


def test_search_takes_folders_of_queries_one_result_per_image(onnx_bundle, image_folder, tmp_path, cli):
    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "index", "-q"))
    single = sorted(image_folder.rglob("*.png"))[0]
    out, _ = _ok(cli("search", onnx_bundle, tmp_path / "index", image_folder / "b", single, "--k", "2", "--json"))
    folder = sorted(str(p) for p in (image_folder / "b").rglob("*.png"))
    assert [r["query"] for r in json.loads(out)] == [*folder, str(single)] and len(folder) == 12
    text, _ = _ok(cli("search", onnx_bundle, tmp_path / "index", image_folder / "b", "--k", "1"))
    assert [line for line in text.splitlines() if line.startswith("query ")] == [f"query {q}:" for q in folder]
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("not an image")
    _one_clear_error(cli("search", onnx_bundle, tmp_path / "index", tmp_path / "empty"),
                     f"no image file under the query folder {tmp_path / 'empty'}", ".png")


def test_matches_name_files_openable_from_anywhere_and_ids_survive_edits(onnx_bundle, image_folder, tmp_path,
                                                                          monkeypatch, cli):
    gallery = tmp_path / "place" / "gallery"
    shutil.copytree(image_folder, gallery)
    images = sorted(gallery.rglob("*.png"))
    monkeypatch.chdir(gallery.parent)
    _ok(cli("index", onnx_bundle, "gallery", "--out", tmp_path / "index", "-q"))  # a relative gallery folder
    assert json.loads((tmp_path / "index" / "index.json").read_text())["root"] == str(gallery)
    stored = [str(p.relative_to(gallery)) for p in images]
    assert json.loads((tmp_path / "index" / "paths.json").read_text()) == stored
    monkeypatch.chdir(tmp_path)  # somewhere else: the relative gallery folder means nothing here
    out, _ = _ok(cli("search", onnx_bundle, "index", images[5], "--k", "3", "--json"))
    matches = json.loads(out)[0]["matches"]
    assert {key: matches[0][key] for key in ("id", "path", "stored_path")} == {
        "id": 5, "path": str(images[5]), "stored_path": stored[5]}
    assert all(Path(m["path"]).is_file() and stored[m["id"]] == m["stored_path"] for m in matches)
    text, _ = _ok(cli("search", onnx_bundle, "index", images[5], "--k", "1"))
    assert text.splitlines()[2].endswith(f"id 5       {images[5]}")
    # one item by its id, one by its stored path, one by its file relative to this folder
    (tmp_path / "gone.txt").write_text(f"{matches[0]['id']}\n{matches[1]['stored_path']}\n"
                                       f"{os.path.relpath(matches[2]['path'])}\n")
    out, _ = _ok(cli("index-remove", "index", "gone.txt"))
    assert "3 images removed from index: 21 left" in out
    out, _ = _ok(cli("search", onnx_bundle, "index", images[0], "--k", "24", "--json"))
    left = json.loads(out)[0]["matches"]
    gone = {m["id"] for m in matches}
    assert len(left) == 21 and not gone & {m["id"] for m in left}
    assert all(m["stored_path"] == stored[m["id"]] for m in left)  # every other item keeps its id
    assert [i for i, p in enumerate(json.loads((tmp_path / "index" / "paths.json").read_text())) if p is None] == \
        sorted(gone)
    # an image added later under the gallery folder: stored relative to it, under the next id (never a removed one)
    (gallery / "c").mkdir()
    shutil.copy(images[5], gallery / "c" / "again.png")
    _ok(cli("index-add", onnx_bundle, "index", gallery / "c"))
    out, _ = _ok(cli("search", onnx_bundle, "index", images[5], "--k", "1", "--json"))
    assert json.loads(out)[0]["matches"][0] == {"id": 24, "path": str(gallery / "c" / "again.png"),
                                                "stored_path": "c/again.png", "similarity": pytest.approx(1, abs=1e-5),
                                                "accepted": True}


def test_the_functions_a_service_calls_give_what_search_prints(onnx_bundle, image_folder, tmp_path, cli):
    from PIL import Image

    from dmlplug.bundle.api import open_for_search, search_vectors

    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "index", "--codec", "float16", "-q"))
    query = str(sorted(image_folder.rglob("*.png"))[3])
    out, _ = _ok(cli("search", onnx_bundle, tmp_path / "index", query, "--k", "4", "--json", "--threshold", "0.99"))
    bundle, index = open_for_search(onnx_bundle, tmp_path / "index", registry=dmlplug.plugin_host().registry)
    with Image.open(query) as image:  # an upload: an image in memory, named by the client
        vectors = bundle.embed([image.convert("RGB")])
    assert search_vectors(index, vectors, [query], k=4, threshold=0.99) == json.loads(out)


def test_an_exact_index_never_reuses_an_id_and_keeps_them_in_its_files(tmp_path):
    from dmlplug.bundle.index import ExactIndex
    from dmlplug.bundle.index_edit import add_items, remove_items
    from dmlplug.bundle.index_files import read_index, save_index

    vectors, e = np.eye(4, dtype=np.float32), np.array([[0, 0, 0.6, 0.8]], dtype=np.float32)
    index = ExactIndex(vectors, ["a", "b", "c", "d"])
    assert remove_items(index, ["b"]) == [1]
    assert add_items(index, e, ["e"]) == [4]
    save_index(index, tmp_path, {})
    loaded = read_index(tmp_path)
    assert loaded.paths == ["a", None, "c", "d", "e"] and loaded.size == 4
    for found in (index, loaded):
        assert found.search(vectors[[0, 2, 3]], 2)[1].tolist() == [[0, 2], [2, 4], [3, 4]]
        np.testing.assert_array_equal(found.reconstruct(np.array([4, 0])), np.concatenate([e, vectors[:1]]))
    with pytest.raises(BundleError, match="1 of the items to remove are not in"):
        remove_items(loaded, [1])  # a removed id names nothing


def test_an_index_without_a_root_gives_its_paths_as_stored(onnx_bundle, image_folder, tmp_path):
    """An index of an older dmlplug recorded no root and stored the paths as they were typed."""
    from dmlplug.bundle.index_files import save_index

    bundle = dmlplug.load_bundle(onnx_bundle)
    files = sorted(str(p) for p in image_folder.rglob("*.png"))
    typed = [os.path.relpath(p, image_folder.parent) for p in files]
    (tmp_path / "old").mkdir()
    save_index(bundle.build_index(files, paths=typed), tmp_path / "old", bundle.built_by())
    assert "root" not in json.loads((tmp_path / "old" / "index.json").read_text())
    best = bundle.search([files[7]], tmp_path / "old", k=1)[0]["matches"][0]
    assert best["id"] == 7 and best["path"] == best["stored_path"] == typed[7]


def test_embed_of_class_folders_stores_labels_that_evaluate_reads(onnx_bundle, labelled, image_folder, tmp_path,
                                                                  cli):
    with np.load(labelled) as data:
        paths, labels, names = [str(p) for p in data["paths"]], data["labels"].tolist(), data["class_names"].tolist()
    assert names == ["a", "b"] and labels == [names.index(Path(p).parent.name) for p in paths]
    out, _ = _ok(cli("evaluate", labelled, "--json"))
    assert 0 <= json.loads(out)["recall@1"] <= 1
    flat = tmp_path / "flat"
    flat.mkdir()
    for path in sorted(image_folder.rglob("*.png"))[:4]:
        shutil.copy(path, flat / f"{path.parent.name}_{path.name}")
    out, _ = _ok(cli("embed", onnx_bundle, flat, "--out", tmp_path / "flat.npz", "-q"))
    assert f"no labels: the images are not all in class subfolders of {flat}" in out
    with np.load(tmp_path / "flat.npz") as data:
        assert "labels" not in data.files and "class_names" not in data.files
    _one_clear_error(cli("evaluate", tmp_path / "flat.npz"), "written by `dmlplug embed` of a folder whose images "
                     "are not all in class subfolders", "one subfolder per class")


def test_index_from_embeddings_equals_the_index_of_the_images_without_loading_the_model(
        onnx_bundle, torchscript_bundle, image_folder, labelled, tmp_path, monkeypatch, cli):
    import dmlplug.bundle.runtime

    _ok(cli("index", onnx_bundle, image_folder, "--out", tmp_path / "images", "--codec", "int8", "-q"))

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    with monkeypatch.context() as patch:  # the .npz records this very model file: its vectors are indexed as they are
        patch.setattr(dmlplug.bundle.runtime, "load_model", no_model)
        out, _ = _ok(cli("index", onnx_bundle, "--from-embeddings", labelled, "--out", tmp_path / "npz", "--codec",
                         "int8", "-q"))
    assert f"int8 index of 24 images written to {tmp_path / 'npz'}" in out
    a, b = (json.loads((tmp_path / name / "index.json").read_text()) for name in ("images", "npz"))
    assert a == b and a["root"] == str(image_folder)  # the same index, files and record
    # the same weights exported as TorchScript: another model file, recognised by its probe embedding
    _ok(cli("index", torchscript_bundle, "--from-embeddings", labelled, "--out", tmp_path / "ts", "-q"))


def test_index_from_embeddings_refuses_an_npz_it_cannot_trace_to_the_bundle(onnx_bundle, labelled, image_folder,
                                                                            tmp_path, cli):
    with np.load(labelled) as data:
        arrays = {key: data[key] for key in data.files}
    unrecorded = {key: value for key, value in arrays.items() if key not in ("model_sha256", "probe",
                                                                             "checkpoint_sha256")}
    np.savez(tmp_path / "old.npz", **unrecorded)
    np.savez(tmp_path / "other.npz", **{**arrays, "model_sha256": np.asarray("f" * 64),
                                        "probe": -arrays["probe"]})
    for npz, phrases in (("old.npz", ("does not record the model that embedded it", "dmlplug embed")),
                         ("other.npz", ("was embedded by another model than the bundle", "probe input"))):
        _one_clear_error(cli("index", onnx_bundle, "--from-embeddings", tmp_path / npz, "--out", tmp_path / "x",
                             "-q"), str(tmp_path / npz), *phrases)
        assert not (tmp_path / "x").exists()
    _one_clear_error(cli("index", onnx_bundle, image_folder, "--from-embeddings", labelled, "--out", tmp_path / "x"),
                     "exactly one")
