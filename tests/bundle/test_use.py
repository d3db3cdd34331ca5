"""embed / index / search, on the command line and in Python: same vectors as the run, exact neighbours,
accept/reject at the calibrated threshold, unreadable images reported, one clear message per mistake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import dmlplug
from dmlplug.bundle.errors import BundleError


def _npz(path):
    with np.load(path) as data:
        return data["embeddings"], [str(p) for p in data["paths"]]


@pytest.fixture(scope="module")
def gallery(onnx_bundle, image_folder, tmp_path_factory):
    """The image folder embedded by the bundle (npz) and indexed exactly."""
    from dmlplug.cli import main

    folder = tmp_path_factory.mktemp("gallery")
    for args in (["embed", onnx_bundle, image_folder, "--out", folder / "emb.npz", "-q"],
                 ["index", onnx_bundle, image_folder, "--out", folder / "index", "-q"]):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            assert not exc.code
    embeddings, paths = _npz(folder / "emb.npz")
    return folder / "index", embeddings, paths


def test_embed_lists_every_image_sorted_and_bundle_equals_run(run_dir, onnx_bundle, image_folder, gallery,
                                                              tmp_path, cli):
    _, from_bundle, paths = gallery
    expected = sorted(str(p) for p in image_folder.rglob("*.png"))
    assert paths == expected and len(paths) == 24  # the text file is not an image
    code, out, err = cli("embed", run_dir, image_folder, "--out", tmp_path / "run.npz", "--batch-size", "7", "-q")
    assert code == 0, err
    from_run, run_paths = _npz(tmp_path / "run.npz")
    assert run_paths == paths and from_run.shape == from_bundle.shape == (24, 8)
    tolerance = json.loads((onnx_bundle / "bundle.json").read_text())["verification"]["tolerance"]
    assert np.abs(from_run - from_bundle).max() <= tolerance
    assert f"24 embeddings (8-d) written to {tmp_path / 'run.npz'}" in out


def test_unreadable_images_are_reported_and_skipped_or_fail_with_strict(onnx_bundle, broken_folder, tmp_path, cli):
    code, _, err = cli("embed", onnx_bundle, broken_folder, "--out", tmp_path / "e.npz", "-q")
    assert code == 0 and f"skipped unreadable image {broken_folder / 'zz_broken.png'}" in err
    embeddings, paths = _npz(tmp_path / "e.npz")
    assert [p.rsplit("/", 1)[1] for p in paths] == sorted(p.name for p in broken_folder.glob("img*.png"))
    assert len(embeddings) == 3
    code, _, err = cli("embed", onnx_bundle, broken_folder, "--out", tmp_path / "strict.npz", "--strict", "-q")
    assert code == 2 and "cannot read image" in err and "zz_broken.png" in err
    assert not (tmp_path / "strict.npz").exists()


def test_search_json_ranks_the_exact_neighbours_with_the_calibrated_verdict(onnx_bundle, gallery, cli):
    index_dir, embeddings, paths = gallery
    meta = json.loads((index_dir / "index.json").read_text())
    assert meta["kind"] == "exact" and meta["storage"] == "faiss" and meta["size"] == 24 and meta["dim"] == 8
    queries = [paths[3], paths[10]]
    code, out, err = cli("search", onnx_bundle, index_dir, *queries, "--k", "5", "--json")
    assert code == 0, err
    results = json.loads(out)
    threshold = json.loads((onnx_bundle / "bundle.json").read_text())["thresholds"]["values"]["far@0.001"]
    assert [r["query"] for r in results] == queries
    for result, query in zip(results, queries, strict=True):
        sims = embeddings @ embeddings[paths.index(query)]
        expected = np.argsort(-sims, kind="stable")[:5]
        assert [m["path"] for m in result["matches"]] == [paths[i] for i in expected]
        assert [m["similarity"] for m in result["matches"]] == pytest.approx(sims[expected].tolist(), abs=1e-5)
        assert [m["accepted"] for m in result["matches"]] == [m["similarity"] >= threshold
                                                              for m in result["matches"]]
        assert set(result["matches"][0]) == {"id", "path", "stored_path", "similarity", "accepted"}
        assert result["matches"][0]["path"] == query and result["matches"][0]["accepted"] is True
        # the id is the item's row in the sorted gallery, the stored path relative to the gallery root
        assert [m["id"] for m in result["matches"]] == expected.tolist()
        assert [m["stored_path"] for m in result["matches"]] == [
            str(Path(paths[i]).relative_to(meta["root"])) for i in expected]


def test_search_text_output_and_threshold_override(onnx_bundle, gallery, cli):
    index_dir, _, paths = gallery
    code, out, _ = cli("search", onnx_bundle, index_dir, paths[0], "--k", "3", "--threshold", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "(accept at similarity >= 2.000000)" and lines[1] == f"query {paths[0]}:"
    assert len(lines) == 5 and all(" reject " in line for line in lines[2:])


def test_python_api_search_equals_the_cli(onnx_bundle, gallery, cli):
    index_dir, _, paths = gallery
    _, out, _ = cli("search", onnx_bundle, index_dir, paths[5], "--k", "4", "--json")
    bundle = dmlplug.load_bundle(onnx_bundle)
    assert bundle.search([paths[5]], index_dir, k=4) == json.loads(out)
    in_memory = bundle.build_index(paths)  # no gallery root: stored_path is the path given, here the file itself
    assert [[{**m, "stored_path": m["path"]} for m in r["matches"]] for r in json.loads(out)] == [
        r["matches"] for r in bundle.search([paths[5]], in_memory, k=4)]


def test_index_without_faiss_is_a_torch_file_with_the_same_results(onnx_bundle, image_folder, gallery, tmp_path,
                                                                   monkeypatch, cli):
    index_dir, _, paths = gallery
    expected = dmlplug.load_bundle(onnx_bundle).search([paths[2]], index_dir, k=6)
    monkeypatch.setitem(sys.modules, "faiss", None)
    code, _, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / "idx", "-q")
    assert code == 0, err
    assert json.loads((tmp_path / "idx" / "index.json").read_text())["storage"] == "torch"
    assert (tmp_path / "idx" / "embeddings.pt").is_file()
    got = dmlplug.load_bundle(onnx_bundle).search([paths[2]], tmp_path / "idx", k=6)
    assert [m["path"] for m in got[0]["matches"]] == [m["path"] for m in expected[0]["matches"]]


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_index_reports_its_recall_on_held_out_images(onnx_bundle, image_folder, tmp_path, kind, cli):
    """The command's report; the recall itself is checked against brute force in test_index_recall.py."""
    code, out, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / kind, "--approximate", kind,
                         "--k", "5", "-q")
    assert code == 0, err
    meta = json.loads((tmp_path / kind / "index.json").read_text())
    assert meta["kind"] == kind and meta["recall_queries"] == 2  # a tenth of the 24 images held out
    assert (f"against exact search: recall@1 {meta['recall@1']:.4f}, recall@5 {meta['recall@5']:.4f}, recall@10 "
            f"{meta['recall@10']:.4f} (2 gallery images held out as queries)") in out
    assert json.loads((tmp_path / kind / "paths.json").read_text()) == sorted(
        str(p.relative_to(image_folder)) for p in image_folder.rglob("*.png"))  # relative to the gallery root


def test_recall_against_exact_counts_the_overlap():
    from dmlplug.bundle.index import ExactIndex, recall_against_exact

    vectors = np.eye(6, dtype=np.float32)
    exact = ExactIndex(vectors, [str(i) for i in range(6)])

    class MissesTheLast:
        def search(self, queries, k):
            sims, rows = exact.search(queries, k)
            rows = rows.copy()
            rows[:, -1] = -1  # one of k slots unfilled for every query
            return sims, rows

    assert recall_against_exact(MissesTheLast(), exact, vectors, 4) == pytest.approx(3 / 4)
    assert recall_against_exact(exact, exact, vectors, 4) == 1.0


def test_one_clear_message_per_mistake(onnx_bundle, gallery, image_folder, tmp_path, cli):
    index_dir, _, paths = gallery
    bad_query = tmp_path / "q.png"
    bad_query.write_bytes(b"nope")
    code, _, err = cli("search", onnx_bundle, index_dir, bad_query)
    assert code == 2 and f"cannot read image {bad_query}" in err and "Traceback" not in err
    code, _, err = cli("search", tmp_path, index_dir, paths[0])
    assert code == 2 and "is not a bundle: it has no bundle.json" in err
    code, _, err = cli("search", onnx_bundle, tmp_path, paths[0])
    assert code == 2 and "is not a readable index folder" in err
    code, _, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / "x", "--approximate", "lsh")
    assert code == 2 and "unknown index_codec 'lsh'" in err and "--approximate" in err
    code, _, err = cli("embed", onnx_bundle, tmp_path / "missing", "--out", tmp_path / "e.npz")
    assert code == 2 and "is not a folder" in err


def test_bundle_of_another_format_version_or_without_its_model_is_refused(onnx_bundle, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(onnx_bundle, copy)
    manifest = json.loads((copy / "bundle.json").read_text())
    (copy / "bundle.json").write_text(json.dumps({**manifest, "format_version": 99, "dmlplug_version": "9.0"}))
    with pytest.raises(BundleError, match="version 99 \\(written by dmlplug 9.0\\)"):
        dmlplug.load_bundle(copy)
    (copy / "bundle.json").write_text(json.dumps(manifest))
    (copy / "model.onnx").unlink()
    with pytest.raises(BundleError, match="model file model.onnx is missing"):
        dmlplug.load_bundle(copy)


def test_an_index_of_another_model_is_refused_one_of_the_same_weights_is_not(torchscript_bundle, gallery,
                                                                             tmp_path, cli):
    import shutil

    index_dir, _, paths = gallery
    code, out, err = cli("search", torchscript_bundle, index_dir, paths[0], "--k", "1", "--json")
    assert code == 0, err  # built with the ONNX bundle of the same checkpoint: the probe embeds alike
    assert json.loads(out)[0]["matches"][0]["path"] == paths[0]
    meta = json.loads((index_dir / "index.json").read_text())
    other_model = {**meta, "model_sha256": "0" * 64, "probe": [0.5] * len(meta["probe"])}
    old_other_checkpoint = {key: value for key, value in meta.items() if key not in ("model_sha256", "probe")}
    old_other_checkpoint["checkpoint_sha256"] = "0" * 64  # an index of an older dmlplug: no model digest, no probe
    for name, record in (("other_model", other_model), ("old", old_other_checkpoint)):
        other = tmp_path / name
        shutil.copytree(index_dir, other)
        (other / "index.json").write_text(json.dumps(record))
        code, _, err = cli("search", torchscript_bundle, other, paths[0])
        assert code == 2 and "was built by another model than the bundle" in err and "Traceback" not in err
        with pytest.raises(BundleError, match="built by another model"):  # the Python API checks it too
            dmlplug.load_bundle(torchscript_bundle).search([paths[0]], other)


def test_accepted_is_the_similarity_compared_with_the_exact_threshold(onnx_bundle, gallery, cli):
    """A threshold a hair above a match's float32 similarity rejects it, as `similarity >= threshold` says: numpy
    compares a float32 score with a Python float in float32, where that threshold rounds down to the score."""
    index_dir, _, paths = gallery
    _, out, _ = cli("search", onnx_bundle, index_dir, paths[1], "--k", "3", "--json")
    second = json.loads(out)[0]["matches"][1]["similarity"]
    hair_above = float(np.nextafter(second, 2.0))  # float64: between the score and the next float32
    assert np.float32(second) >= hair_above  # the float32 comparison that must not decide
    code, out, err = cli("search", onnx_bundle, index_dir, paths[1], "--k", "3", "--json", "--threshold", hair_above)
    assert code == 0, err
    matches = json.loads(out)[0]["matches"]
    assert [m["accepted"] for m in matches] == [m["similarity"] >= hair_above for m in matches] == [True, False, False]
