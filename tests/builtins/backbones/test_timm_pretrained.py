"""``pretrained = true``: timm's weights through the Hugging Face hub's own cache, offline mode and endpoint.

Never the internet: the offline tests write a cache in the hub's real layout, the online test serves the hub's
``resolve`` endpoint (and a CDN it redirects to) from 127.0.0.1 and points ``HF_ENDPOINT`` at it. huggingface_hub
reads its settings from the environment when it is imported; :func:`hub` sets them and re-reads them the way a
fresh process does (``importlib.reload`` of ``huggingface_hub.constants``), and one test starts a real process.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

import dmlplug
from dmlplug.errors import ComponentError, RecipeError

MODEL, TAG, REPO = "test_resnet", "test_resnet.r160_in1k", "timm/test_resnet.r160_in1k"  # ~0.5M parameters
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(monkeypatch):
    """``hub(**env)``: set the hub's environment variables and re-read them as a new process would."""
    import huggingface_hub.constants as constants

    def settings(**env: str) -> None:
        for key in ("HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        importlib.reload(constants)

    yield settings
    monkeypatch.undo()
    importlib.reload(constants)


def timm_weights(arch: str = MODEL, seed: int = 0) -> dict[str, torch.Tensor]:
    """What the hub's model.safetensors of ``arch`` holds: a full timm state dict, classifier included."""
    import timm

    torch.manual_seed(seed)
    return {k: v.contiguous() for k, v in timm.create_model(arch, num_classes=1000).state_dict().items()}


def write_cache(cache: Path, weights: dict[str, torch.Tensor], repo: str = REPO) -> Path:
    """A Hugging Face cache in the layout huggingface_hub writes: blobs/, snapshots/<commit>/, refs/main."""
    from safetensors.torch import save_file

    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    save_file(weights, str(snapshot / "model.safetensors"))
    return snapshot / "model.safetensors"


def backbone(**params):
    return dmlplug.create("backbone", "timm", **{"model": TAG, "pretrained": True, **params})


def assert_has_weights(built, weights: dict[str, torch.Tensor]) -> None:
    state = built.body.state_dict()
    body = {k: v for k, v in weights.items() if not k.startswith("fc.")}
    assert set(state) == set(body)
    for key, value in body.items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0, msg=key)


# ------------------------------------------------------------------------------------------------ offline


def test_offline_the_weights_come_from_the_hub_cache(tmp_path, hub):
    weights = timm_weights()
    write_cache(tmp_path / "hub", weights)
    hub(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    assert_has_weights(backbone(), weights)
    # The bare architecture name takes timm's default tag, which is the same repository here.
    assert_has_weights(backbone(model=MODEL), weights)


def test_offline_with_an_empty_cache_fails_at_once_and_says_what_to_do(tmp_path, hub):
    hub(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    start = time.monotonic()
    with pytest.raises(ComponentError) as caught:
        backbone()
    assert time.monotonic() - start < 5
    text = str(caught.value)
    for part in (TAG, REPO, "not in the Hugging Face cache", str(tmp_path / "hub"), "HF_HUB_OFFLINE is set",
                 "HF_HUB_OFFLINE unset or 0", "local weights file path"):
        assert part in text, (part, text)


def test_a_cached_file_of_another_architecture_is_an_error_naming_the_file(tmp_path, hub):
    path = write_cache(tmp_path / "hub", timm_weights("resnet10t"))
    hub(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    with pytest.raises(ComponentError, match="does not fit timm model") as caught:
        backbone()
    assert str(path) in str(caught.value)


def test_a_vit_built_for_the_data_size_gets_its_pretrained_weights_on_the_new_grid(tmp_path, hub):
    """timm's ViT test model (160 px, patch 16, trained on 0.5 / 0.5 statistics) at [data] image_size 32."""
    import timm

    weights = timm_weights("test_vit")
    write_cache(tmp_path / "hub", weights, repo="timm/test_vit.r160_in1k")
    hub(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    built = backbone(model="test_vit.r160_in1k", img_size="data", image_size=32)
    state = built.body.state_dict()
    # The position embeddings resampled from 10×10 patches to 2×2, the blocks loaded as they are.
    assert state["pos_embed"].shape == timm.create_model("test_vit", img_size=32).pos_embed.shape
    assert state["pos_embed"].shape != weights["pos_embed"].shape
    torch.testing.assert_close(state["blocks.0.attn.qkv.weight"], weights["blocks.0.attn.qkv.weight"], rtol=0, atol=0)
    assert built.shift is not None  # the weights' statistics are not ImageNet's: the input is re-normalised
    assert built(torch.randn(2, 3, 32, 32))[0].shape == (2, built.num_features)


def test_a_real_process_honours_HF_HUB_OFFLINE_from_its_environment(tmp_path):
    # The user's case: the variables are set before anything imports huggingface_hub.
    code = ("import time, dmlplug\n"
            "from dmlplug.errors import ComponentError\n"
            "import dmlplug_builtins.backbones.timm_backbone\n"
            "start = time.monotonic()\n"
            "try:\n"
            f"    dmlplug.create('backbone', 'timm', model={TAG!r}, pretrained=True)\n"
            "except ComponentError as exc:\n"
            "    print(round(time.monotonic() - start, 2)); print(exc)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "not in the Hugging Face cache" in done.stdout, done.stdout + done.stderr
    assert float(done.stdout.split()[0]) < 5, done.stdout


# ------------------------------------------------------------------------------------------------ online


class FakeHub:
    """The hub's ``{endpoint}/{repo}/resolve/{revision}/{file}`` plus a CDN it redirects to, on 127.0.0.1.

    Like huggingface.co for a file stored in LFS: ``HEAD``/``GET`` on ``resolve`` answer 302 with the file's
    metadata headers (``X-Repo-Commit``, ``X-Linked-Etag`` = sha256, ``X-Linked-Size``) and an absolute
    ``Location`` on another origin (the CDN), which serves the bytes with ``ETag`` and ``Content-Length``. A file
    the repository lacks is 404 with ``X-Error-Code: EntryNotFound``.
    """

    def __init__(self, files: dict[tuple[str, str], bytes]) -> None:
        self.files = files
        self.requests: list[tuple[str, str, str]] = []
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        for server in (self.hub, self.cdn):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def close(self) -> None:
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    def _handler(self, role: str) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                fake.requests.append((role, self.command, self.path))
                if role == "cdn":
                    data = next((d for d in fake.files.values() if hashlib.sha256(d).hexdigest() in self.path), None)
                    if data is None:
                        return self._status(404, {})
                    etag = hashlib.sha256(data).hexdigest()
                    return self._status(200, {"ETag": f'"{etag}"', "Content-Length": str(len(data)),
                                              "Content-Type": "application/octet-stream"}, data if body else b"")
                repo, sep, rest = self.path.lstrip("/").partition("/resolve/")
                revision, _, filename = rest.partition("/")
                data = fake.files.get((repo, filename.split("?")[0]))
                if not sep or revision not in ("main", COMMIT):
                    return self._status(404, {"X-Error-Code": "RepoNotFound"})
                if data is None:
                    return self._status(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                etag = hashlib.sha256(data).hexdigest()
                self._status(302, {"Location": f"{fake.cdn_url}/blobs/{etag}", "X-Repo-Commit": COMMIT,
                                   "X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data)),
                                   "ETag": '"pointer-etag"', "Content-Length": "0"})

            def _status(self, code: int, headers: dict[str, str], data: bytes = b"") -> None:
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data:
                    self.wfile.write(data)

        return Handler


def test_online_the_weights_are_downloaded_into_the_cache_then_used_offline(tmp_path, hub):
    from safetensors.torch import save

    weights = timm_weights(seed=3)
    fake = FakeHub({(REPO, "model.safetensors"): save(weights)})
    try:
        cache = tmp_path / "hub"
        hub(HF_ENDPOINT=fake.endpoint, HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(cache))
        assert_has_weights(backbone(), weights)
        assert ("hub", "HEAD", f"/{REPO}/resolve/main/model.safetensors") in fake.requests
        assert any(role == "cdn" and method == "GET" for role, method, _ in fake.requests)
        # The hub's own layout: refs/main -> the commit, snapshots/<commit>/model.safetensors -> blobs/<sha256>.
        folder = cache / "models--timm--test_resnet.r160_in1k"
        assert (folder / "refs" / "main").read_text() == COMMIT
        snapshot = folder / "snapshots" / COMMIT / "model.safetensors"
        assert snapshot.is_file()
        assert snapshot.resolve().parent == (folder / "blobs").resolve()
    finally:
        fake.close()
    # Offline (the endpoint is gone too), the second build reads the cache.
    hub(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(cache))
    assert_has_weights(backbone(), weights)


def test_online_a_repository_without_the_file_is_a_clear_error(tmp_path, hub):
    fake = FakeHub({})
    try:
        hub(HF_ENDPOINT=fake.endpoint, HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "hub"))
        with pytest.raises(ComponentError, match="not in the Hugging Face cache|cannot fetch") as caught:
            backbone()
        assert TAG in str(caught.value)
        # timm's order: model.safetensors, then pytorch_model.bin.
        asked = [path for role, method, path in fake.requests if method == "HEAD"]
        assert asked[:2] == [f"/{REPO}/resolve/main/model.safetensors", f"/{REPO}/resolve/main/pytorch_model.bin"]
    finally:
        fake.close()


# ------------------------------------------------------------------------------------------------ validate time


def test_validate_rejects_an_unknown_tag_and_a_model_without_weights():
    with pytest.raises(RecipeError, match="no pretrained tag 'nope'"):
        backbone(model=f"{MODEL}.nope")
    with pytest.raises(RecipeError, match="timm has no pretrained weights for 'coatnet_0_224'"):
        backbone(model="coatnet_0_224")
    with pytest.raises(RecipeError, match="no pretrained weights"):
        backbone(model="coatnet_0_224.untrained")


def test_a_tag_given_as_pretrained_string_is_rejected_with_the_recipe_to_write():
    for value in ("tv_in1k", "resnet50.tv_in1k"):
        with pytest.raises(RecipeError, match="model = 'resnet50.tv_in1k', pretrained = true"):
            backbone(model="resnet50", pretrained=value)


def test_a_recipe_naming_a_tag_validates_offline_without_timm_or_torch():
    root = Path(__file__).resolve().parents[3]
    code = ("import sys, dmlplug\n"
            "dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet50.tv_in1k\"', "
            "'backbone.pretrained=true'])\n"
            "try:\n"
            "    dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet50.tv_in2k\"', "
            "'backbone.pretrained=true'])\n"
            "except Exception as exc:\n"
            "    assert 'tv_in1k' in str(exc), exc\n"
            "else:\n"
            "    raise SystemExit('resnet50.tv_in2k validated')\n"
            "assert 'torch' not in sys.modules and 'timm' not in sys.modules, 'imported'\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
