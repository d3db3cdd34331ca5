"""``register_index_codecs``: a throwaway plugin's codec (faiss's 4-bit scalar quantiser, ``IDMap2,SQ4``) is used by
name like a built-in one: ``dmlplug index --codec sq4:bits=4`` on a bundle of the shared run, ``dmlplug search`` of
the folder it wrote (read back with the plugin's codec), ``index-remove``, its bytes per vector, its parameters
refused before anything is embedded, a candidate of ``--budget``, and the Python API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
import throwaway
from pydantic import Field
from test_registration_hooks import check_registered

import dmlplug
from dmlplug import Params


class SqParams(Params):
    """Parameters of the throwaway codec."""

    bits: Literal[4, 6, 8] = Field(4, description="Bits a coordinate (faiss SQ4, SQ6 or SQ8).")


class SqCodec:
    """faiss ``IDMap2,SQ{bits}``: every coordinate in ``bits`` bits, ranges trained on a sample."""

    exact = False
    removable = True
    keeps_floats = False

    def __init__(self, bits: int):
        self.bits = bits

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        return {"bits": self.bits}

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        return [self.plan(n, dim, k)]

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        return dim * plan["bits"] / 8 + 8

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        return min(n, 10_000)

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        import faiss

        return faiss.index_factory(dim, f"IDMap2,SQ{plan['bits']}", faiss.METRIC_INNER_PRODUCT)

    def reconstruct(self, index: Any, labels: Any) -> Any:
        raise NotImplementedError("keeps no float32 vectors")

    def sizes(self, index: Any) -> tuple[int, int]:
        import faiss

        size = len(faiss.serialize_index(index))
        return size, size

    def save(self, index: Any, folder: Path) -> list[str]:
        import faiss

        faiss.write_index(index, str(folder / "index.faiss"))
        return ["index.faiss"]

    def load(self, folder: Path, plan: dict[str, Any]) -> Any:
        import faiss

        return faiss.read_index(str(folder / "index.faiss"))


class CodecPlugin(throwaway.RegisteringPlugin):
    """``register_index_codecs``."""

    kind, hook, name, params = "index_codecs", "register_index_codecs", "sq4", SqParams

    @dmlplug.hookimpl
    def register_index_codecs(self, register):
        self._register(register)

    def make(self, params, ctx):
        return SqCodec(params.bits)


@pytest.fixture(scope="module")
def codec_host(registering):
    """A fresh host with the throwaway plugins of the shared run (its bundle needs them) and the codec plugin."""
    plugin = CodecPlugin()
    host = throwaway.fresh_host(*((p, p.name) for p in registering.values()), (plugin, "sq4"))
    return host, plugin


def _use(host, patch):
    from dmlplug import plugins

    patch.setattr(plugins, "_HOST", host)
    patch.setattr(plugins, "get_host", lambda **_: host)


@pytest.fixture
def cli(codec_host, monkeypatch, capsys):
    """The command line in-process with the codec host as the process-wide one: ``(exit status, stdout, stderr)``."""
    from dmlplug.cli import main

    _use(codec_host[0], monkeypatch)

    def invoke(*args):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture(scope="module")
def gallery(hooked_run, codec_host, tmp_path_factory):
    """A bundle of the shared run (exported with its plugins) and a folder of 24 PNG images: ``(bundle, images)``."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("codec_hook")
    with pytest.MonkeyPatch.context() as patch:
        _use(codec_host[0], patch)
        dmlplug.export(hooked_run.directory, folder / "bundle", format="torchscript", calibrate=False)
    images, _ = throwaway.blob_images(6, 4, seed=5)
    (folder / "images").mkdir()
    for i, image in enumerate(images):
        Image.fromarray(image).save(folder / "images" / f"{i:02d}.png")
    return folder / "bundle", folder / "images"


@pytest.mark.hook("register_index_codecs")
def test_a_plugin_codec_indexes_searches_and_is_read_back_by_name(codec_host, gallery, cli, tmp_path):
    host, plugin = codec_host
    _, info = check_registered(host, {"index_codecs": plugin}, "index_codecs")
    assert info.params is SqParams
    bundle, images = gallery
    code, out, err = cli("index", bundle, images, "--out", tmp_path / "index", "--codec", "sq4:bits=4", "-q")
    assert code == 0, err
    meta = json.loads((tmp_path / "index" / "index.json").read_text())
    assert (meta["codec"], meta["kind"], meta["bits"], meta["size"]) == ("sq4", "sq4", 4, 24)
    # 8-d embeddings: 4 bytes of 4-bit codes and faiss's 8-byte label a vector (and the header spread over 24)
    assert 12 < meta["memory_bytes_per_vector"] == meta["disk_bytes_per_vector"] < 12 + 200 / 24
    assert f"sq4 index of 24 images written to {tmp_path / 'index'} (codec sq4, " in out
    assert isinstance(plugin.built[-1][0], SqParams) and plugin.built[-1][0].bits == 4
    query = sorted(images.iterdir())[3]
    code, out, err = cli("search", bundle, tmp_path / "index", query, "--k", "3", "--json")
    assert code == 0, err
    matches = json.loads(out)[0]["matches"]
    assert len(matches) == 3 and matches[0]["path"] == str(query)  # the query is in the gallery: found first
    (tmp_path / "gone.txt").write_text(f"{query}\n")
    code, out, err = cli("index-remove", tmp_path / "index", tmp_path / "gone.txt")
    assert code == 0 and "1 images removed" in out, err
    code, out, err = cli("search", bundle, tmp_path / "index", query, "--k", "3", "--json")
    assert code == 0 and str(query) not in {m["path"] for m in json.loads(out)[0]["matches"]}, err


@pytest.mark.hook("register_index_codecs")
def test_a_plugin_codec_is_refused_early_and_is_a_budget_candidate(codec_host, gallery, cli, tmp_path):
    import numpy as np

    from dmlplug.bundle.codec_spec import pick_codec
    from dmlplug.bundle.index import build_index

    host, _ = codec_host
    bundle, images = gallery
    code, _, err = cli("index", bundle, images, "--out", tmp_path / "bad", "--codec", "sq4:bits=5", "-q")
    assert code == 2 and "invalid parameters for index_codec 'sq4'" in err and "Traceback" not in err
    assert "dmlplug list index_codecs --params" in err and not (tmp_path / "bad").exists()
    code, _, err = cli("index", bundle, images, "--out", tmp_path / "budget", "--budget", "1MB", "-q")
    assert code == 0, err
    row = next(line for line in err.splitlines() if line[2:].startswith("sq4 "))
    assert row.endswith("yes") and json.loads((tmp_path / "budget" / "index.json").read_text())["codec"] in err
    # The Python API: the codec picked by name from the host's registry.
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = build_index(vectors, [str(i) for i in range(300)], pick_codec("sq4:bits=6", host.registry))
    assert index.codec == "sq4" and index.info["bits"] == 6
    assert index.search(vectors[:2], 1)[1][:, 0].tolist() == [0, 1]
    # 24 bytes of codes and the label, and the header with the trained ranges (2·32 floats) spread over 300
    assert 32 * 6 / 8 + 8 < index.info["memory_bytes_per_vector"] < 32 * 6 / 8 + 8 + 2
