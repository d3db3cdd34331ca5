"""docs/deploy.md is executed: train, calibrate, export, embed, index, search, then the same in Python; each
step's output is what the tutorial says it is."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from deploy_doc import read_steps

pytestmark = pytest.mark.slow


def _manifest(bundle_dir):
    return json.loads((bundle_dir / "bundle.json").read_text())


def _printed_thresholds(text):
    """``{"far@0.001": "0.985418", ...}`` from export's ``thresholds: far@0.001 X, ...; search accepts ...`` line."""
    line = next(line for line in text.splitlines() if line.startswith("thresholds: "))
    return dict(re.findall(r"([\w@.]+) (-?\d+\.\d{6})", line.split(";")[0]))


def test_the_tutorial_has_the_steps_this_test_checks():
    kinds = [s.args[0] if s.lang == "bash" else "python" for s in read_steps()]
    assert kinds == ["run", "calibrate", "export", "python", "embed", "evaluate", "index", "search", "python",
                     "serve"]


def test_training_wrote_a_completed_quickstart_run_with_a_validation_split(tutorial, trained_run):
    run_dir, _ = trained_run
    args = tutorial.step("dmlplug run ").args
    assert args[1].startswith("recipes/quickstart.toml")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and (run_dir / "checkpoints" / "best.pt").is_file()
    data = json.loads((run_dir / "data.json").read_text())
    assert data["splits"]["val"]["classes"] > 0  # so calibration runs on unseen, non-test classes


def _table_rows(text):
    """``{"0.001": (threshold, TAR), ...}`` and the max-F1 threshold from a printed calibration table."""
    rows = {far: (float(t), float(tar)) for far, t, tar in
            re.findall(r"FAR <= (\S+) +(-?\d+\.\d{6}) +(\d+\.\d{4})", text)}
    return rows, float(re.search(r"max F1 +(-?\d+\.\d{6})", text).group(1))


def test_calibrate_and_export_print_the_thresholds_export_stores(tutorial, trained_run):
    _, bundle_dir = trained_run
    out = tutorial.step("dmlplug calibrate ").out
    calibration = _manifest(bundle_dir)["calibration"]
    assert calibration["split"] == "val" and calibration["test_split"] is False
    header = f"Threshold calibration on split 'val': {calibration['items']} items, {calibration['classes']} classes"
    assert out.startswith(header)
    # export prints the table of the calibration it stores (on stderr, with its progress messages) ...
    err = tutorial.step("dmlplug export ").err
    assert header in err and "on the exported model's embeddings" in err
    stored = {f"{row['target_far']:g}": (round(row["threshold"], 6), round(row["tar"], 4))
              for row in calibration["thresholds"]}
    rows, max_f1 = _table_rows(err)
    assert rows == stored and max_f1 == round(calibration["max_f1"]["threshold"], 6)
    assert f"OPIS {calibration['opis']:.5f}" in err
    # ... and `calibrate`, on PyTorch's embeddings of the same images, agrees up to the exported model's rounding.
    rows, max_f1 = _table_rows(out)
    assert rows.keys() == stored.keys()
    for far, (threshold, _) in rows.items():
        assert abs(threshold - stored[far][0]) <= 1e-4
    assert abs(max_f1 - calibration["max_f1"]["threshold"]) <= 1e-4


def test_export_prints_its_verification_and_the_thresholds_search_uses(tutorial, trained_run):
    _, bundle_dir = trained_run
    out = tutorial.step("dmlplug export ").out
    manifest = _manifest(bundle_dir)
    assert (bundle_dir / "model.onnx").is_file() and manifest["model"]["file"] == "model.onnx"
    assert f"bundle written to bundles/quickstart-small (model.onnx, {manifest['embedding_size']}-d embeddings)" in out
    check = manifest["verification"]
    assert (f"verified on {check['images']} test images: max |Δ embedding| {check['max_abs_diff']:.3g} "
            f"(tolerance {check['tolerance']:g}); recall@1 PyTorch {check['recall@1_pytorch']}, "
            f"exported {check['recall@1_exported']}") in out
    values = manifest["thresholds"]["values"]
    assert _printed_thresholds(out) == {name: f"{value:.6f}" for name, value in values.items()}
    assert "search accepts at far@0.001" in out and manifest["thresholds"]["default"] == "far@0.001"


def test_the_image_step_splits_the_test_split_into_queries_and_gallery(tutorial):
    namespace = tutorial.step("run.dataset.val.load_image").namespace
    labels = namespace["test"].labels
    folder = tutorial.folder
    classes = sorted(set(labels.tolist()))
    assert sorted(p.name for p in (folder / "queries").iterdir()) == [f"{c:02d}.png" for c in classes] + [
        "unknown.png"]
    for c in classes:
        assert len(list((folder / "gallery" / f"{c:02d}").glob("*.png"))) == int((labels == c).sum()) - 1


def test_embed_writes_every_gallery_image_as_a_unit_vector(tutorial, trained_run):
    _, bundle_dir = trained_run
    step = tutorial.step("dmlplug embed ")
    gallery = sorted(str(p.relative_to(tutorial.folder)) for p in (tutorial.folder / "gallery").rglob("*.png"))
    with np.load(tutorial.folder / "gallery.npz") as data:
        embeddings, paths = data["embeddings"], [str(p) for p in data["paths"]]
    size = _manifest(bundle_dir)["embedding_size"]
    assert paths == gallery and embeddings.shape == (len(gallery), size) and embeddings.dtype == np.float32
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    assert f"{len(gallery)} embeddings ({size}-d) written to gallery.npz" in step.out
    with np.load(tutorial.folder / "gallery.npz") as data:  # the class folders' labels, for `dmlplug evaluate`
        names, labels = data["class_names"].tolist(), data["labels"]
    assert [names[label] for label in labels] == [path.split("/")[1] for path in paths]


def test_evaluate_reads_the_labels_of_the_gallery_folders(tutorial):
    step = tutorial.step("dmlplug evaluate ")
    assert "recall@1" in step.out


def test_index_holds_the_gallery_of_this_checkpoint(tutorial, trained_run):
    _, bundle_dir = trained_run
    tutorial.step("dmlplug index ")
    meta = json.loads((tutorial.folder / "gallery_index" / "index.json").read_text())
    with np.load(tutorial.folder / "gallery.npz") as data:
        paths = [str(p) for p in data["paths"]]
    manifest = _manifest(bundle_dir)
    assert meta["kind"] == "exact" and meta["size"] == len(paths) and meta["dim"] == manifest["embedding_size"]
    assert meta["checkpoint_sha256"] == manifest["source"]["checkpoint_sha256"]
    assert meta["root"] == str(tutorial.folder / "gallery")  # the paths are stored relative to the gallery folder
    assert json.loads((tutorial.folder / "gallery_index" / "paths.json").read_text()) == [
        path.split("/", 1)[1] for path in paths]


def test_search_json_ranks_the_gallery_and_accepts_at_the_printed_threshold(tutorial, trained_run):
    import dmlplug

    _, bundle_dir = trained_run
    step = tutorial.step("dmlplug search ")
    args = step.args
    queries = [a for a in args[3:] if a.endswith(".png")]
    k = int(args[args.index("--k") + 1])
    results = json.loads(step.out)
    threshold = _manifest(bundle_dir)["thresholds"]["values"]["far@0.001"]
    printed = float(_printed_thresholds(tutorial.step("dmlplug export ").out)["far@0.001"])
    assert abs(printed - threshold) <= 5e-7  # the threshold export printed is the one search accepts at
    with np.load(tutorial.folder / "gallery.npz") as data:
        gallery, paths = data["embeddings"], [str(p) for p in data["paths"]]
    query_vectors = dmlplug.load_bundle(bundle_dir).embed([str(tutorial.folder / q) for q in queries])
    assert [r["query"] for r in results] == queries
    for result, vector in zip(results, query_vectors, strict=True):
        assert set(result) == {"query", "matches"} and len(result["matches"]) == k
        assert all(set(m) == {"id", "path", "stored_path", "similarity", "accepted"} for m in result["matches"])
        assert all(m["path"] == str(tutorial.folder / paths[m["id"]]) for m in result["matches"])  # absolute
        sims = [m["similarity"] for m in result["matches"]]
        expected = np.sort(gallery @ vector)[::-1][:k]  # the k largest cosine similarities of the gallery
        assert sims == pytest.approx(expected.tolist(), abs=1e-5) and sims == sorted(sims, reverse=True)
        assert all(gallery[m["id"]] @ vector == pytest.approx(m["similarity"], abs=1e-5)
                   for m in result["matches"])
        assert [m["accepted"] for m in result["matches"]] == [s >= threshold for s in sims]


def test_python_api_gives_what_the_command_line_printed(tutorial, trained_run):
    _, bundle_dir = trained_run
    cli_results = json.loads(tutorial.step("dmlplug search ").out)
    namespace = [step for step in tutorial.run_all() if step.lang == "python"][-1].namespace
    bundle = namespace["bundle"]
    assert namespace["results"] == cli_results
    assert namespace["vectors"].shape == (2, bundle.embedding_size)
    assert bundle.threshold == _manifest(bundle_dir)["thresholds"]["values"]["far@0.001"]
    max_f1 = _manifest(bundle_dir)["thresholds"]["values"]["max_f1"]
    loose = namespace["loose"][0]["matches"]
    assert [m["accepted"] for m in loose] == [m["similarity"] >= max_f1 for m in loose]
    same = namespace["same"][0]["matches"]
    assert [m["id"] for m in same] == [m["id"] for m in cli_results[0]["matches"]]  # rows of the sorted gallery
    assert [m["similarity"] for m in same] == pytest.approx([m["similarity"] for m in cli_results[0]["matches"]],
                                                             abs=1e-6)


def test_the_served_search_gives_what_the_command_line_printed(tutorial, trained_run):
    cli_first = json.loads(tutorial.step("dmlplug search ").out)[0]["matches"]
    served = json.loads(tutorial.step("dmlplug serve ").out)
    matches = served["results"][0]["matches"]
    assert served["results"][0]["query"] == "00.png"
    assert [(m["id"], m["path"], m["accepted"]) for m in matches] == \
        [(m["id"], m["path"], m["accepted"]) for m in cli_first]
    assert [m["similarity"] for m in matches] == pytest.approx([m["similarity"] for m in cli_first], abs=1e-6)
