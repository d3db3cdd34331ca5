"""`dmlplug serve` as a real uvicorn process on 127.0.0.1: the API gives what the command line gives, refuses bad
input with a 4xx JSON error and keeps serving, reports health, readiness and metrics, and serves thumbnails by id.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil

import httpx
import numpy as np
import pytest
from serve import Server

from dmlplug.cli import main as dmlplug_main

#: The queries of the equality tests: gallery images in both sub-folders.
QUERIES = ("a/img000.png", "b/img003.png", "a/img010.png")


@pytest.fixture(scope="module")
def gallery(image_folder, tmp_path_factory):
    """A private copy of the shared image folder (the server's writes must not reach other tests)."""
    folder = tmp_path_factory.mktemp("serve_gallery") / "gallery"
    shutil.copytree(image_folder, folder)
    return folder


@pytest.fixture(scope="module")
def index_dir(onnx_bundle, gallery, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve_index") / "index"
    _cli("index", onnx_bundle, gallery, "--out", out, "--quiet")
    return out


@pytest.fixture(scope="module")
def server(onnx_bundle, index_dir, tmp_path_factory):
    with Server(onnx_bundle, index_dir, log=tmp_path_factory.mktemp("serve_log") / "stderr.txt") as running:
        yield running
        assert running.stop() == 0


def _cli(*args):
    try:
        dmlplug_main([str(a) for a in args])
    except SystemExit as exc:
        assert not exc.code, f"dmlplug {' '.join(map(str, args))} exited {exc.code}"


def _files(gallery, names):
    return [("images", (name.replace("/", "_"), (gallery / name).read_bytes(), "image/png")) for name in names]


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_search_by_image_gives_what_dmlplug_search_json_prints(server, onnx_bundle, index_dir, gallery, cli):
    code, out, _ = cli("search", onnx_bundle, index_dir, *(gallery / q for q in QUERIES), "--k", 5, "--json")
    assert code == 0
    expected = json.loads(out)
    response = httpx.post(server.url + "v1/search", files=_files(gallery, QUERIES), data={"k": "5"}, timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["query"] for r in body["results"]] == [q.replace("/", "_") for q in QUERIES]
    _same_matches(body["results"], [{**r, "query": q.replace("/", "_")} for r, q in zip(expected, QUERIES,
                                                                                        strict=True)])
    assert body["threshold"] is not None and set(body["timing_ms"]) == {"embed", "search"}


def test_search_by_vectors_gives_the_same_matches_as_by_image(server, gallery):
    embedded = httpx.post(server.url + "v1/embed", files=_files(gallery, QUERIES), timeout=60).json()
    by_vector = httpx.post(server.url + "v1/search", json={"vectors": embedded["embeddings"], "k": 4,
                                                           "names": embedded["names"]}, timeout=60).json()
    by_image = httpx.post(server.url + "v1/search", files=_files(gallery, QUERIES), data={"k": "4"},
                          timeout=60).json()
    _same_matches(by_vector["results"], by_image["results"])


def _same_matches(ours, theirs):
    """Equal ids, paths and verdicts, similarities within float32 rounding (JSON carries float64 digits)."""
    for a, b in zip(ours, theirs, strict=True):
        assert a["query"] == b["query"]
        assert [(m["id"], m["path"], m["stored_path"], m["accepted"]) for m in a["matches"]] == \
            [(m["id"], m["path"], m["stored_path"], m["accepted"]) for m in b["matches"]]
        np.testing.assert_allclose([m["similarity"] for m in a["matches"]], [m["similarity"] for m in b["matches"]],
                                   atol=1e-6)


def test_embed_gives_what_dmlplug_embed_writes(server, onnx_bundle, gallery, tmp_path):
    _cli("embed", onnx_bundle, gallery / "a", "--out", tmp_path / "a.npz", "--quiet")
    stored = np.load(tmp_path / "a.npz")
    names = [str(p).split("gallery/")[-1] for p in stored["paths"]]
    body = httpx.post(server.url + "v1/embed", files=_files(gallery, names), timeout=60).json()
    assert body["dim"] == stored["embeddings"].shape[1]
    np.testing.assert_allclose(np.array(body["embeddings"]), stored["embeddings"], atol=1e-6)


def _png(width, height):
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


def _bomb():
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20_000, 20_000, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_bad_input_is_a_4xx_json_error_and_the_service_keeps_serving(server, gallery, index_dir):
    from PIL import Image

    jpeg = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(jpeg, "JPEG")
    one = _files(gallery, QUERIES[:1])
    url = server.url
    before = _digests(index_dir), sorted(p.name for p in gallery.rglob("*"))
    cases = {
        "non-image upload": (lambda: httpx.post(url + "v1/search", files=[("images", ("x.png", b"%PDF-1.4 no",
                                                                                    "image/png"))]),
                             400, "not an image"),
        "truncated JPEG": (lambda: httpx.post(url + "v1/search", files=[("images", ("t.jpg", jpeg.getvalue()[:900],
                                                                                  "image/jpeg"))]),
                           400, "truncated"),
        "20,000 × 20,000 image": (lambda: httpx.post(url + "v1/embed", files=[("images", ("bomb.png", _bomb(),
                                                                                        "image/png"))]),
                                  400, "over the limit"),
        "body over the limit": (lambda: httpx.post(url + "v1/embed", content=b"x" * (33 * 1024 * 1024),
                                                   headers={"content-type": "multipart/form-data; boundary=b"}),
                                413, "over the limit"),
        "vector of the wrong dimension": (lambda: httpx.post(url + "v1/search", json={"vectors": [[1.0, 2.0]]}),
                                          400, "numbers, the bundle's embeddings"),
        "vector with NaN": (lambda: httpx.post(url + "v1/search", content=b'{"vectors": [[NaN, 1, 1, 1, 1, 1, 1, 1]]}',
                                               headers={"content-type": "application/json"}), 400, "NaN"),
        "k of 0": (lambda: httpx.post(url + "v1/search", files=one, data={"k": "0"}), 400, "k = 0"),
        "k over the gallery": (lambda: httpx.post(url + "v1/search", files=one, data={"k": "1000"}), 400,
                               "gallery size"),
        "unknown re-ranker": (lambda: httpx.post(url + "v1/search", files=one, data={"rerank": "nope"}), 400,
                              "unknown reranker 'nope'"),
        "no image": (lambda: httpx.post(url + "v1/search", files=[("other", ("a.png", b"x", "image/png"))]), 400,
                     "no image"),
        "wrong content type": (lambda: httpx.post(url + "v1/search", content=b"k=3",
                                                  headers={"content-type": "text/plain"}), 415, "content type"),
        "write without a key": (lambda: httpx.post(url + "v1/items", files=one), 403, "without an API key"),
        "remove without a key": (lambda: httpx.delete(url + "v1/items/0"), 403, "without an API key"),
        "unknown item": (lambda: httpx.get(url + "v1/items/999/image"), 404, "no item 999"),
        "a path for an id": (lambda: httpx.get(url + "v1/items/..%2F..%2Fetc%2Fpasswd/image"), 404, ""),
    }
    for name, (send, status, said) in cases.items():
        response = send()
        assert response.status_code == status, f"{name}: {response.status_code} {response.text}"
        if status != 404 or said:
            assert said in response.json()["error"], f"{name}: {response.text}"
        assert "Traceback" not in response.text
    assert (_digests(index_dir), sorted(p.name for p in gallery.rglob("*"))) == before  # nothing written
    assert httpx.post(url + "v1/search", files=one, data={"k": "1"}).json()["results"][0]["matches"][0]["id"] >= 0
    assert "Traceback" not in server.stderr()  # no request made the server fail


def test_health_readiness_metrics_and_api_docs(server):
    assert httpx.get(server.url + "healthz").json() == {"status": "ok"}
    ready = httpx.get(server.url + "readyz").json()
    assert ready["status"] == "ready" and ready["items"] == 24 and ready["probe_gap"] <= 1e-3
    httpx.post(server.url + "v1/search", json={"vectors": [[1.0] * ready["dim"]], "k": 2})
    metrics = httpx.get(server.url + "metrics").text
    assert 'dmlplug_http_requests_total{method="POST",route="/v1/search",status="200"}' in metrics
    assert 'dmlplug_stage_duration_seconds_count{stage="search"}' in metrics
    assert 'dmlplug_index_info{codec="float32"} 1.0' in metrics and "dmlplug_index_items 24.0" in metrics
    assert "dmlplug_embed_batch_size_bucket" in metrics
    schema = httpx.get(server.url + "openapi.json").json()
    assert set(schema["paths"]["/v1/search"]["post"]["requestBody"]["content"]) == {"multipart/form-data",
                                                                                   "application/json"}
    assert httpx.get(server.url + "docs").status_code == 200


def test_thumbnails_are_the_gallery_files_by_id(server, gallery, index_dir):
    from dmlplug.bundle.index_files import read_index

    index = read_index(index_dir)
    label = 5
    response = httpx.get(server.url + f"v1/items/{label}/image")
    assert response.status_code == 200
    assert response.content == (gallery / index.paths[label]).read_bytes()


def test_a_damaged_index_is_refused_before_a_port_is_bound(onnx_bundle, index_dir, gallery, tmp_path, cli):
    damaged = tmp_path / "index"
    shutil.copytree(index_dir, damaged)
    data = next(p for p in damaged.iterdir() if p.name not in ("index.json", "paths.json"))
    data.write_bytes(data.read_bytes()[:-8])
    code, _, search_err = cli("search", onnx_bundle, damaged, gallery / QUERIES[0], "--k", 1)
    assert code == 2
    code, out, err = cli("serve", onnx_bundle, damaged, "--port", 0)
    assert code == 2 and "http://" not in out + err
    assert err.splitlines()[0] == search_err.splitlines()[0]  # the same message as `dmlplug search`
