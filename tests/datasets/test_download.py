"""``dmlplug data download | check`` against a real HTTP server on 127.0.0.1 that honours Range requests.

The server serves tiny archives in the official formats (CUB_200_2011.tgz, Stanford_Online_Products.zip) built
from the loaders' test trees; the specs are the real ones with the tiny archives' checksums and counts
(``dataclasses.replace``), pointed at the server through ``--mirror`` / ``DMLPLUG_DATA_MIRROR``. Nothing
touches the internet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import shutil
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dmlplug.cli import main
from dmlplug.data.download import RemoteFile
from dmlplug_builtins.datasets import sources
from dmlplug_builtins.datasets.sources import CUB200, SOP


class RangeHandler(BaseHTTPRequestHandler):
    """GET of ``server.files[name]``, with ``Range: bytes=a-[b]`` (206 / 416) and an optional early close."""

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        server = self.server
        name = self.path.lstrip("/")
        server.requests.append((name, self.headers.get("Range")))  # type: ignore[attr-defined]
        data = server.files.get(name)  # type: ignore[attr-defined]
        if data is None:
            self.send_error(404)
            return
        start, end = 0, len(data) - 1
        ranged = None if server.ignore_range else self.headers.get("Range")  # type: ignore[attr-defined]
        if ranged:
            first, _, last = ranged.removeprefix("bytes=").partition("-")
            start, end = int(first), int(last) if last else len(data) - 1
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
        body = data[start:end + 1]
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = server.cut_after.pop(name, None)  # type: ignore[attr-defined]
        self.wfile.write(body if cut is None else body[:cut])
        if cut is not None:
            self.close_connection = True  # the client sees the connection close after `cut` bytes

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    """A ThreadingHTTPServer on 127.0.0.1:<random port>; ``.files``, ``.requests``, ``.cut_after``, ``.url``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    httpd.files, httpd.requests, httpd.cut_after = {}, [], {}  # type: ignore[attr-defined]
    httpd.ignore_range = False  # type: ignore[attr-defined]
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def tgz_of(folder: Path, extra: dict[str, bytes] | None = None) -> bytes:
    """``folder`` as a gzipped tar whose top level is the folder's name (as CUB_200_2011.tgz is)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=folder.name)
        for name, data in (extra or {}).items():  # the real archive has attributes.txt beside the folder
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_of(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            archive.write(path, path.relative_to(folder.parent).as_posix())
    return buffer.getvalue()


TINY_CUB = {"images": 11, "classes": 4, "train_images": 5, "train_classes": 2, "test_images": 6, "test_classes": 2}
TINY_SOP = {"images": 11, "classes": 5, "train_images": 7, "train_classes": 3, "test_images": 4, "test_classes": 2}


@pytest.fixture
def cub(server, trees, tmp_path, monkeypatch):
    """The tiny CUB archive on the server and a spec with its md5 and counts, registered under ``cub200``."""
    data = tgz_of(trees.make_cub(tmp_path / "src"), {"attributes.txt": b"1 has_bill_shape::curved\n"})
    server.files["CUB_200_2011.tgz"] = data
    spec = dataclasses.replace(CUB200, expected=TINY_CUB, files=(dataclasses.replace(
        CUB200.files[0], md5=hashlib.md5(data).hexdigest()),))
    monkeypatch.setitem(sources.SPECS, "cub200", spec)
    monkeypatch.setenv("DMLPLUG_DATA_MIRROR", server.url)
    return data


def cli(capsys, *args: str) -> tuple[int, str]:
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_download_unpacks_the_layout_the_loader_reads(cub, build, tmp_path, capsys):
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 0, out
    assert sorted(p.name for p in root.iterdir()) == ["CUB_200_2011"]  # archive deleted, no staging left
    bundle = build("cub200", root=str(root / "CUB_200_2011"))
    assert (len(bundle.train), len(bundle.test)) == (5, 6)
    assert bundle.info["layout"] == "official"


def test_second_run_downloads_nothing(cub, server, tmp_path, capsys):
    root = tmp_path / "data"
    assert cli(capsys, "data", "download", "cub", "--root", str(root))[0] == 0
    served = len(server.requests)
    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 0
    assert "is present; nothing downloaded" in out
    assert len(server.requests) == served


def test_interrupted_transfer_resumes_with_a_range_request(cub, server, tmp_path, capsys):
    root = tmp_path / "data"
    server.cut_after["CUB_200_2011.tgz"] = 1000
    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 2
    assert "stopped" in out and "resumes from the 1,000 bytes" in out
    assert (root / "CUB_200_2011.tgz.part").stat().st_size == 1000
    assert not (root / "CUB_200_2011").exists()

    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 0, out
    assert server.requests[-1] == ("CUB_200_2011.tgz", "bytes=1000-")
    assert (root / "CUB_200_2011" / "images.txt").is_file()


def test_resumed_file_is_byte_identical(cub, server, tmp_path):
    from dmlplug.data.download import fetch

    server.cut_after["CUB_200_2011.tgz"] = 777
    dest = tmp_path / "CUB_200_2011.tgz"
    remote = sources.SPECS["cub200"].files[0]
    with pytest.raises(Exception, match="stopped"):
        fetch(server.url + "/CUB_200_2011.tgz", dest, remote, progress=False)
    fetch(server.url + "/CUB_200_2011.tgz", dest, remote, progress=False)
    assert dest.read_bytes() == cub
    assert not dest.with_name(dest.name + ".part").exists()


def test_checksum_mismatch_exits_2_and_leaves_nothing(cub, monkeypatch, tmp_path, capsys):
    spec = sources.SPECS["cub200"]
    monkeypatch.setitem(sources.SPECS, "cub200", dataclasses.replace(
        spec, files=(dataclasses.replace(spec.files[0], md5="0" * 32),)))
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 2
    assert "md5 checksum mismatch" in out and "the file was deleted" in out
    assert list(root.iterdir()) == []  # no archive, no .part, nothing under CUB_200_2011


def test_corrupt_archive_exits_2_and_leaves_no_tree(cub, server, monkeypatch, tmp_path, capsys):
    bad = cub[: len(cub) // 2]  # a truncated archive whose checksum nobody recorded
    server.files["CUB_200_2011.tgz"] = bad
    spec = sources.SPECS["cub200"]
    monkeypatch.setitem(sources.SPECS, "cub200", dataclasses.replace(
        spec, files=(RemoteFile("CUB_200_2011.tgz", spec.files[0].url),)))
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "cub200", "--root", str(root))
    assert code == 2
    assert "corrupt or truncated" in out and "the file was deleted" in out
    assert list(root.iterdir()) == []  # no CUB_200_2011, no .CUB_200_2011.extracting, the bad archive gone


def test_sop_zip_from_a_mirror_option(server, trees, monkeypatch, tmp_path, capsys, build):
    data = zip_of(trees.make_sop(tmp_path / "src"))
    server.files["Stanford_Online_Products.zip"] = data
    monkeypatch.setitem(sources.SPECS, "sop", dataclasses.replace(SOP, expected=TINY_SOP, files=(
        dataclasses.replace(SOP.files[0], md5=None, sha256=hashlib.sha256(data).hexdigest()),)))
    monkeypatch.delenv("DMLPLUG_DATA_MIRROR", raising=False)
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "sop", "--root", str(root), "--mirror", server.url)
    assert code == 0, out
    bundle = build("sop", root=str(root / "Stanford_Online_Products"))
    assert (len(bundle.train), len(bundle.test)) == (7, 4)
    code, out = cli(capsys, "data", "check", "sop", "--root", str(root))
    assert code == 0, out
    assert "complete" in out


def test_no_official_source_prints_the_manual_steps(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DMLPLUG_DATA_MIRROR", raising=False)
    code, out = cli(capsys, "data", "download", "cars196", "--root", str(tmp_path))
    assert code == 2
    assert "no official download of cars196 remains" in out
    assert f"unpack it into {tmp_path}/cars196/" in out
    assert list(tmp_path.iterdir()) == []


def test_check_on_a_good_tree(cub, tmp_path, capsys, trees):
    trees.make_cub(tmp_path)
    code, out = cli(capsys, "data", "check", "cub200", "--root", str(tmp_path), "--deep")
    assert code == 0, out
    assert "complete; every image decodes" in out


def test_check_names_a_missing_and_a_truncated_image(cub, tmp_path, capsys, trees):
    root = trees.make_cub(tmp_path)
    images = sorted((root / "images").rglob("*.jpg"))
    images[0].unlink()
    trees.truncate(images[1])
    code, out = cli(capsys, "data", "check", "cub200", "--root", str(tmp_path))
    assert code == 2
    assert str(images[0]) in out and "1 listed images are missing" in out
    assert str(images[1]) not in out  # only --deep decodes
    code, out = cli(capsys, "data", "check", "cub200", "--root", str(tmp_path), "--deep")
    assert code == 2
    assert "corrupt (1)" in out and str(images[1]) in out


def test_check_against_the_official_counts_reports_the_differences(tmp_path, capsys, trees):
    trees.make_cub(tmp_path)  # the real spec: a tiny tree is far from 11,788 images
    code, out = cli(capsys, "data", "check", "cub200", "--root", str(tmp_path))
    assert code == 2
    assert "images: 11 (official: 11,788)" in out and "classes: 4 (official: 200)" in out


def test_real_specs_keep_the_official_counts():
    specs = sources.SPECS
    assert specs["cub200"].expected == {"images": 11788, "classes": 200, "train_images": 5864,
                                        "train_classes": 100, "test_images": 5924, "test_classes": 100}
    assert specs["sop"].expected == {"images": 120053, "classes": 22634, "train_images": 59551,
                                     "train_classes": 11318, "test_images": 60502, "test_classes": 11316}
    assert specs["cars196"].expected["images"] == 16185 and specs["cars196"].expected["classes"] == 196
    assert all(f.url is None for f in specs["cars196"].files)


def test_leftover_staging_folder_is_replaced(cub, tmp_path, capsys):
    root = tmp_path / "data"
    stale = root / ".CUB_200_2011.extracting" / "CUB_200_2011"
    stale.mkdir(parents=True)
    (stale / "half.txt").write_text("from a crashed run")
    assert cli(capsys, "data", "download", "cub200", "--root", str(root))[0] == 0
    assert not (root / "CUB_200_2011" / "half.txt").exists()
    assert not (root / ".CUB_200_2011.extracting").exists()
    shutil.rmtree(root)


def tar_gz_of(base: Path, *names: str) -> bytes:
    """A gzipped tar of ``base / name`` for each name, stored under ``name`` (files or folders)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in names:
            archive.add(base / name, arcname=name)
    return buffer.getvalue()


def test_cars196_from_a_mirror_with_a_plain_file(server, trees, monkeypatch, tmp_path, capsys, build):
    source = trees.make_cars(tmp_path / "src", "annos_mat")
    server.files["car_ims.tgz"] = tar_gz_of(source, "car_ims")
    server.files["cars_annos.mat"] = (source / "cars_annos.mat").read_bytes()
    monkeypatch.setitem(sources.SPECS, "cars196", dataclasses.replace(
        sources.CARS196, expected={"images": 10, "classes": 4}))
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "cars", "--root", str(root), "--mirror", server.url + "/")
    assert code == 0, out
    assert sorted(p.name for p in (root / "cars196").iterdir()) == ["car_ims", "cars_annos.mat"]
    bundle = build("cars196", root=str(root / "cars196"), train_classes=2)
    assert len(bundle.train) + len(bundle.test) == 10
    from dmlplug_builtins.datasets.checking import check_benchmark

    report = check_benchmark(sources.SPECS["cars196"], root, dataset_params={"train_classes": 2}, echo=lambda _: None)
    assert report.ok, report.problems


def test_inaturalist_downloads_then_asks_for_the_split_lists(server, trees, monkeypatch, tmp_path, capsys):
    source = trees.make_inaturalist(tmp_path / "src")
    server.files["train_val2018.tar.gz"] = tar_gz_of(source, "train_val2018")
    server.files["train2018.json.tar.gz"] = tar_gz_of(source, "train2018.json")
    server.files["val2018.json.tar.gz"] = tar_gz_of(source, "val2018.json")
    spec = sources.INATURALIST2018
    monkeypatch.setitem(sources.SPECS, "inaturalist2018", dataclasses.replace(
        spec, expected={"images": 12, "classes": 5, "train_classes": 3, "test_classes": 2},
        files=tuple(dataclasses.replace(f, md5=hashlib.md5(server.files[f.filename]).hexdigest())
                    for f in spec.files)))
    monkeypatch.setenv("DMLPLUG_DATA_MIRROR", server.url)
    root = tmp_path / "data"
    code, out = cli(capsys, "data", "download", "inaturalist2018", "--root", str(root))
    assert code == 2
    assert "Inaturalist_train_set1.txt" in out and "no download provides" in out
    target = root / "inaturalist2018"
    assert sorted(p.name for p in target.iterdir()) == ["train2018.json", "train_val2018", "val2018.json"]
    shutil.copytree(source / "Inat_dataset_splits", target / "Inat_dataset_splits")
    served = len(server.requests)
    code, out = cli(capsys, "data", "download", "inat2018", "--root", str(root))
    assert code == 0 and "is present" in out
    assert len(server.requests) == served
    code, out = cli(capsys, "data", "check", "inaturalist2018", "--root", str(root), "--deep")
    assert code == 0, out


def test_a_server_ignoring_range_restarts_the_file(cub, server, tmp_path):
    from dmlplug.data.download import fetch

    dest = tmp_path / "CUB_200_2011.tgz"
    dest.with_name(dest.name + ".part").write_bytes(b"stale bytes of another file")
    server.ignore_range = True
    fetch(server.url + "/CUB_200_2011.tgz", dest, sources.SPECS["cub200"].files[0], progress=True)
    assert server.requests[-1][1] == "bytes=27-"  # asked to resume, got a 200 with the whole file
    assert dest.read_bytes() == cub


def test_a_complete_part_file_is_verified_and_renamed(cub, server, tmp_path):
    from dmlplug.data.download import fetch

    dest = tmp_path / "CUB_200_2011.tgz"
    dest.with_name(dest.name + ".part").write_bytes(cub)  # complete, but not yet renamed (a crash)
    fetch(server.url + "/CUB_200_2011.tgz", dest, sources.SPECS["cub200"].files[0], progress=False)
    assert server.requests[-1][1] == f"bytes={len(cub)}-"  # answered 416: nothing left to send
    assert dest.read_bytes() == cub


def test_a_recipe_with_download_true_fetches_the_dataset_before_it_is_built(cub, server, tmp_path, monkeypatch):
    """``[data.dataset] download = true``: the run's dataset build downloads a missing tree from the (mirror)
    server into root's parent, then builds it; a root that names another folder is refused before any request."""
    from dmlplug.engine import build as engine
    from dmlplug.errors import DataError
    from dmlplug.plugins import get_host
    from tests.shared.recipes import load_recipe

    def recipe(root):
        return load_recipe({"data": {"dataset": {"name": "cub200", "root": str(root), "download": True,
                                                 "train_classes": 2}, "batch_size": 4,
                                     "sampler": {"name": "m_per_class", "m": 2}},
                            "backbone": {"name": "timm"}, "loss": {"name": "multi_similarity"},
                            "evaluation": {"select_on": "test"}}, registry=get_host().registry)

    host = get_host()
    wrong = recipe(tmp_path / "data" / "cub")
    with pytest.raises(DataError, match="unpacks into a folder named 'CUB_200_2011'"):
        engine.check_data(wrong, engine.new_context(wrong, device="cpu", host=host))
    assert server.requests == []
    good = recipe(tmp_path / "data" / "CUB_200_2011")
    facts = engine.check_data(good, engine.new_context(good, device="cpu", host=host, quiet=True))
    assert (tmp_path / "data" / "CUB_200_2011" / "images.txt").is_file()
    assert [name for name, _ in server.requests] == ["CUB_200_2011.tgz"]
    assert facts["train_classes"] == 2
    engine.check_data(good, engine.new_context(good, device="cpu", host=host, quiet=True))  # present: no request
    assert len(server.requests) == 1
