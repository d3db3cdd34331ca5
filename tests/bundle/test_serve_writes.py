"""Adding and removing gallery items through `dmlplug serve`: only with the API key, the same edit as
`dmlplug index-add` / `index-remove`, answering searches meanwhile, and an index that loads after a SIGKILL."""

from __future__ import annotations

import io
import secrets
import shutil
import signal
import threading
import time

import httpx
import numpy as np
import pytest
from serve import Server

from dmlplug.cli import main as dmlplug_main


def _cli(*args):
    try:
        dmlplug_main([str(a) for a in args])
    except SystemExit as exc:
        assert not exc.code


@pytest.fixture(scope="module")
def built(onnx_bundle, image_folder, tmp_path_factory):
    """A gallery copy and its index, built once; each test copies both."""
    folder = tmp_path_factory.mktemp("serve_writes")
    shutil.copytree(image_folder, folder / "gallery")
    _cli("index", onnx_bundle, folder / "gallery", "--out", folder / "index", "--quiet")
    return folder


@pytest.fixture
def site(built, tmp_path):
    """This test's own gallery and index (the index records its gallery root, so both move together)."""
    shutil.copytree(built / "gallery", tmp_path / "gallery")
    shutil.copytree(built / "index", tmp_path / "index")
    import json

    meta = json.loads((tmp_path / "index" / "index.json").read_text())
    meta["root"] = str(tmp_path / "gallery")  # the documented way to move a gallery with its index
    (tmp_path / "index" / "index.json").write_text(json.dumps(meta))
    key = tmp_path / "key"
    key.write_text(secrets.token_hex(16))
    key.chmod(0o600)
    return tmp_path


def _image(seed):
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def _add(url, key, seed):
    return httpx.post(url + "v1/items", files=[("images", (f"new{seed}.png", _image(seed), "image/png"))],
                      headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _index(site):
    from dmlplug.bundle.index_files import read_index

    return read_index(site / "index")


def test_add_and_remove_with_the_key(onnx_bundle, site):
    key = (site / "key").read_text()
    with Server(onnx_bundle, site / "index", "--api-key-file", str(site / "key"), log=site / "log") as server:
        assert httpx.post(server.url + "v1/items", files=[("images", ("n.png", _image(1), "image/png"))],
                          headers={"Authorization": "Bearer " + "0" * 32}).status_code == 401
        assert httpx.delete(server.url + "v1/items/0", headers={"X-API-Key": "wrong"}).status_code == 401
        added = _add(server.url, key, 1)
        assert added.status_code == 201, added.text
        item = added.json()["added"][0]
        assert added.json()["items"] == 25 and item["id"] == 24
        assert _index(site).size == 25  # written to the folder, which loads and verifies
        found = httpx.post(server.url + "v1/search", files=[("images", ("q.png", _image(1), "image/png"))],
                           data={"k": "1"}).json()["results"][0]["matches"][0]
        assert found["id"] == 24 and found["similarity"] == pytest.approx(1.0, abs=1e-5)
        assert (site / "gallery" / found["stored_path"]).read_bytes() == _image(1)  # stored under the gallery
        assert httpx.get(server.url + "v1/items/24/image").content == _image(1)
        removed = httpx.delete(server.url + "v1/items/24", headers={"X-API-Key": key})
        assert removed.json() == {"removed": 24, "items": 24}
        assert httpx.delete(server.url + "v1/items/24", headers={"X-API-Key": key}).status_code == 404
        after = httpx.post(server.url + "v1/search", files=[("images", ("q.png", _image(1), "image/png"))],
                           data={"k": "24"}).json()["results"][0]["matches"]
        assert 24 not in [m["id"] for m in after]
        assert server.stop() == 0
    assert key not in (site / "log").read_text()  # the key is never logged


def test_searches_are_answered_while_items_are_written(onnx_bundle, site):
    key = (site / "key").read_text()
    statuses: list[int] = []
    with Server(onnx_bundle, site / "index", "--api-key-file", str(site / "key"), log=site / "log") as server:
        def write():
            for seed in range(100, 106):
                assert _add(server.url, key, seed).status_code == 201

        writer = threading.Thread(target=write)
        writer.start()
        while writer.is_alive():
            statuses.append(httpx.post(server.url + "v1/search", json={"vectors": [[1.0] * 8], "k": 3},
                                       timeout=60).status_code)
        writer.join()
        assert server.stop() == 0
    assert statuses and set(statuses) == {200}
    assert _index(site).size == 30


def test_a_sigkill_during_writes_leaves_an_index_that_loads(onnx_bundle, site):
    from dmlplug.bundle.bundle import load_bundle
    from dmlplug.bundle.search import check_searchable

    key = (site / "key").read_text()
    for round_, delay in enumerate((0.4, 1.1)):
        done: list[int] = []
        with Server(onnx_bundle, site / "index", "--api-key-file", str(site / "key"),
                    log=site / f"log{round_}") as server:
            def write(url=server.url, seed=1000 * (round_ + 1), done=done):
                try:
                    while True:
                        if _add(url, key, seed).status_code == 201:
                            done.append(seed)
                        seed += 1
                except httpx.TransportError:  # the server is gone
                    pass

            writer = threading.Thread(target=write)
            writer.start()
            time.sleep(delay)
            server.stop(signal.SIGKILL)
            writer.join()
        index = _index(site)  # every file checked against index.json's sizes and digests
        check_searchable(load_bundle(onnx_bundle), index)
        assert index.size >= 24 + len(done)  # every acknowledged add is there (one more may be, unacknowledged)


def test_two_workers_serve_the_last_write_and_count_together(onnx_bundle, site):
    key = (site / "key").read_text()
    with Server(onnx_bundle, site / "index", "--api-key-file", str(site / "key"), "--workers", "2",
                "--threads", "1", log=site / "log") as server:
        assert _add(server.url, key, 7).status_code == 201
        tops = [httpx.post(server.url + "v1/search", files=[("images", ("q.png", _image(7), "image/png"))],
                           data={"k": "1"}).json()["results"][0]["matches"][0]["id"] for _ in range(12)]
        metrics = httpx.get(server.url + "metrics").text
        assert server.stop() == 0
        said = server.stderr()
    assert tops == [24] * 12  # whichever worker answered had read the new folder
    assert 'dmlplug_http_requests_total{method="POST",route="/v1/search",status="200"} 12.0' in metrics
    assert len({line.split()[3] for line in said.splitlines() if "stopped after answering" in line}) == 2
