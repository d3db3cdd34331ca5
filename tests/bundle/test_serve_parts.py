"""The parts of `dmlplug serve` that need no server: safe decoding, dynamic batching, the API key file."""

from __future__ import annotations

import asyncio
import io
import struct
import threading
import time
import zlib

import numpy as np
import pytest

from dmlplug.errors import DmlplugError
from dmlplug_builtins.serve.auth import bearer_token, key_matches, read_api_key
from dmlplug_builtins.serve.batching import Batcher
from dmlplug_builtins.serve.decode import BadImage, decode_image
from dmlplug_builtins.serve.form import FormError, parse_form


def _png(width: int, height: int, mode: str = "RGB") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height), 120 if mode == "L" else (10, 200, 30)).save(out, format="PNG")
    return out.getvalue()


def _noise_png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width × height but whose data is a few bytes: a decompression bomb's shape."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + \
        chunk(b"IEND", b"")


def test_decode_gives_rgb_images():
    image = decode_image(_png(7, 5, "L"), name="grey.png")
    assert image.mode == "RGB" and image.size == (7, 5)


@pytest.mark.parametrize(("data", "said"), [
    (b"", "empty"),
    (b"%PDF-1.7 not an image at all", "not an image"),
    (_noise_png()[:2000], "truncated or corrupt"),
    (_png_header_only(20_000, 20_000), "over the limit"),
])
def test_decode_refuses_what_must_not_be_decoded(data, said):
    with pytest.raises(BadImage, match=said) as caught:
        decode_image(data, name="upload.png", max_pixels=40_000_000)
    assert str(caught.value).startswith("upload.png: ")


def test_a_truncated_jpeg_is_refused_not_padded():
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(out, format="JPEG")
    with pytest.raises(BadImage, match="truncated"):
        decode_image(out.getvalue()[: len(out.getvalue()) // 2], name="half.jpg")


def test_the_pixel_limit_is_checked_from_the_header_before_decoding():
    # 40,000 pixels of real data pass at a 40,000 limit and fail at 39,999: the check is on width × height.
    data = _png(200, 200)
    assert decode_image(data, name="a.png", max_pixels=40_000).size == (200, 200)
    with pytest.raises(BadImage, match="200 × 200 pixels"):
        decode_image(data, name="a.png", max_pixels=39_999)


def _run(coroutine):
    return asyncio.run(coroutine)


def test_concurrent_requests_share_model_calls_and_get_their_own_rows():
    calls: list[int] = []
    threads: set[str] = set()

    def embed(images):
        calls.append(len(images))
        threads.add(threading.current_thread().name)
        return np.array([[float(i), -float(i)] for i in images], dtype=np.float32)

    async def scenario():
        batcher = Batcher(embed, max_batch=4, max_wait_ms=200)
        await batcher.start()
        results = await asyncio.gather(*(batcher.embed([3 * r, 3 * r + 1, 3 * r + 2]) for r in range(5)))
        await batcher.stop()
        return results

    results = _run(scenario())
    for r, result in enumerate(results):  # every request gets its own images' rows, in its order
        assert result.vectors.tolist() == [[3.0 * r + j, -(3.0 * r + j)] for j in range(3)]
    assert sum(calls) == 15 and max(calls) <= 4 and len(calls) == 4  # 15 images in batches of at most 4: 4 calls
    assert len(threads) == 1  # one model thread: never two model calls at once


def test_a_request_with_no_other_on_its_way_does_not_wait():
    async def scenario():
        batcher = Batcher(lambda images: np.zeros((len(images), 2), dtype=np.float32), max_batch=64,
                          max_wait_ms=600_000)
        await batcher.start()
        async with batcher.reserve() as alone:
            # nothing else announced: the batch runs at once instead of waiting ten minutes for company
            result = await asyncio.wait_for(alone.embed(["one"]), timeout=60)
        await batcher.stop()
        return result

    assert _run(scenario()).vectors.shape == (1, 2)


def test_a_batch_waits_for_announced_requests_at_most_max_wait():
    calls: list[int] = []

    def embed(images):
        calls.append(len(images))
        return np.zeros((len(images), 2), dtype=np.float32)

    async def scenario(max_wait_ms, hand_over):
        batcher = Batcher(embed, max_batch=64, max_wait_ms=max_wait_ms)
        await batcher.start()
        async with batcher.reserve() as first, batcher.reserve() as second:
            waiting = asyncio.ensure_future(first.embed(["a"]))
            await asyncio.sleep(0.05)  # the second request is still reading its body
            if hand_over:
                await second.embed(["b"])
            await asyncio.wait_for(waiting, timeout=60)
        await batcher.stop()

    _run(scenario(600_000, hand_over=True))
    assert calls == [2]  # the first upload waited for the announced second one: one model call
    calls.clear()
    _run(scenario(30, hand_over=False))  # an announced request that never hands over delays a batch by max_wait
    assert calls == [1]


def test_small_uploads_are_prepared_on_the_loop_and_the_model_runs_there_only_for_one_request_alone():
    where: dict[str, list[tuple[str, str]]] = {"prepare": [], "embed": []}

    def prepare(item):
        where["prepare"].append((item, threading.current_thread().name))
        return item

    def embed(items):
        where["embed"].append((",".join(items), threading.current_thread().name))
        return np.zeros((len(items), 2), dtype=np.float32)

    async def scenario(inline_ms, alone, together=()):
        batcher = Batcher(embed, max_batch=8, max_wait_ms=0, prepare=prepare, inline_ms=inline_ms,
                          inline_ok=lambda item: item != "large")
        await batcher.start()
        for items in alone:
            await batcher.embed(items)
        await asyncio.gather(*(batcher.embed(items) for items in together))  # queued together: one batch
        await batcher.stop()

    loop = threading.current_thread().name  # asyncio.run runs the loop in this thread
    # The first call has no prediction: the thread. Then a request alone, predicted short, runs the model on the loop;
    # a job with a refused (large) upload runs whole in the thread; two requests in one batch send the model to the
    # thread though nothing else waits. Small uploads are prepared on the loop wherever the model runs.
    _run(scenario(60_000, [["a"], ["b", "c"], ["d", "large"]], together=[["e"], ["f"]]))
    assert [(items, name == loop) for items, name in where["embed"]] == [
        ("a", False), ("b,c", True), ("d,large", False), ("e,f", False)]
    assert {item for item, name in where["prepare"] if name != loop} == {"d", "large"}
    where["embed"].clear()
    _run(scenario(0, [["a"], ["b"], ["c"]]))  # no budget: the model always in the thread
    assert all(name != loop for _, name in where["embed"])


def test_a_slow_job_sends_the_next_ones_back_to_the_model_thread():
    threads: list[str] = []
    slow = [0.0]

    def embed(items):
        threads.append(threading.current_thread().name)
        time.sleep(slow[0])
        return np.zeros((len(items), 2), dtype=np.float32)

    async def scenario():
        batcher = Batcher(embed, max_batch=8, max_wait_ms=0, inline_ms=20)
        await batcher.start()
        await batcher.embed(["first"])  # thread, measured fast
        await batcher.embed(["fast"])  # loop
        slow[0] = 0.2
        await batcher.embed(["slow"])  # predicted fast, so on the loop, and measured slow
        slow[0] = 0.0
        await batcher.embed(["next"])  # predicted slow: the thread
        await batcher.stop()

    loop_thread = threading.current_thread().name
    _run(scenario())
    assert [name == loop_thread for name in threads] == [False, True, True, False]


def test_an_upload_that_fails_to_decode_fails_its_own_request_only():
    calls: list[list[str]] = []

    def prepare(item):
        if item == "corrupt":
            raise BadImage("corrupt.png: truncated")
        return item.upper()

    def embed(items):
        calls.append(items)
        return np.ones((len(items), 2), dtype=np.float32)

    async def scenario():
        batcher = Batcher(embed, max_batch=8, max_wait_ms=50, prepare=prepare)
        await batcher.start()
        outcomes = await asyncio.gather(batcher.embed(["ok", "corrupt"]), batcher.embed(["fine"]),
                                        return_exceptions=True)
        await batcher.stop()
        return outcomes

    bad, good = _run(scenario())
    assert isinstance(bad, BadImage) and good.vectors.shape == (1, 2)
    assert calls == [["OK", "FINE"]]  # one model call, without the corrupt upload


def test_a_failing_model_call_fails_every_request_of_its_batch_and_not_the_next():
    def embed(images):
        if "bad" in images:
            raise RuntimeError("model failed")
        return np.ones((len(images), 2), dtype=np.float32)

    async def scenario():
        batcher = Batcher(embed, max_batch=8, max_wait_ms=50)
        await batcher.start()
        first = await asyncio.gather(batcher.embed(["bad"]), batcher.embed(["ok"]), return_exceptions=True)
        second = await batcher.embed(["ok"])
        await batcher.stop()
        return first, second

    first, second = _run(scenario())
    assert all(isinstance(result, RuntimeError) for result in first)
    assert second.vectors.shape == (1, 2)


def test_the_api_key_file_must_be_private_and_long(tmp_path):
    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123\n")
    key.chmod(0o644)
    with pytest.raises(DmlplugError, match="readable by other users"):
        read_api_key(key)
    key.chmod(0o600)
    assert read_api_key(key) == b"0123456789abcdef0123"
    key.write_text("short")
    with pytest.raises(DmlplugError, match="fewer than 16") as caught:
        read_api_key(key)
    assert "short" not in str(caught.value)  # the key is never echoed
    with pytest.raises(DmlplugError, match="cannot read"):
        read_api_key(tmp_path / "missing")


def test_keys_compare_exactly():
    assert key_matches(b"0123456789abcdef", "0123456789abcdef")
    assert not key_matches(b"0123456789abcdef", "0123456789abcdeF")
    assert not key_matches(b"0123456789abcdef", None)
    assert bearer_token("Bearer abc") == "abc" and bearer_token("Basic abc") is None and bearer_token(None) is None


def test_connections_to_the_served_socket_have_nagles_algorithm_off():
    # asyncio turns Nagle's algorithm off only on sockets whose proto is TCP; with it on, a response's body, written
    # after its headers, waited for the client's delayed ACK: 40 ms on every request (benchmarks/serve_throughput.py)
    import socket

    from dmlplug_builtins.serve.command import _bind

    async def nodelay_of_an_accepted_connection() -> int:
        listener = _bind("127.0.0.1", 0)
        seen = asyncio.get_running_loop().create_future()

        def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        async with await asyncio.start_server(accepted, sock=listener):
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            value = await seen
            writer.close()
        return value

    assert asyncio.run(nodelay_of_an_accepted_connection())


def _form_request(files, data):
    import httpx

    request = httpx.Request("POST", "http://server/", files=files, data=data)
    return request.read(), request.headers["content-type"]


def _starlette_form(body, content_type):
    from starlette.datastructures import Headers, UploadFile
    from starlette.formparsers import MultiPartParser

    async def stream():
        yield body

    async def parse():
        form = await MultiPartParser(Headers({"content-type": content_type}), stream()).parse()
        return [(key, value.filename, await value.read()) if isinstance(value, UploadFile) else (key, value)
                for key, value in form.multi_items()]

    return _run(parse())


@pytest.mark.parametrize(("files", "data"), [
    ([("images", ("a.png", _png(3, 2)))], {"k": "5"}),
    ([("images", ("quote \"é\".png", b"\r\n--not the boundary\r\n\r\n")), ("images", ("empty.png", b"")),
      ("other", ("x.bin", b"\0" * 100))], {"k": "3", "threshold": "0.5", "rerank": ""}),
], ids=["one image", "names, boundary-like bytes, empty file, other field"])
def test_forms_split_as_starlettes_parser_splits_them(files, data):
    body, content_type = _form_request(files, data)
    form = parse_form(body, content_type, max_files=8, max_fields=8)
    assert sorted([*form.files, *form.fields.items()]) == sorted(_starlette_form(body, content_type))


@pytest.mark.parametrize(("mangle", "said"), [
    (lambda body: body[:body.rindex(b"\r\n--")], "before its closing boundary"),
    (lambda body: body.replace(b'name="k"', b'nom="k"'), '"name" must be provided'),
    (lambda body: body[:40], "before its closing boundary"),
    (lambda body: b"no boundary here", "boundary is not found"),
])
def test_malformed_forms_are_refused(mangle, said):
    body, content_type = _form_request([("images", ("a.png", b"x"))], {"k": "5"})
    with pytest.raises(FormError, match=said):
        parse_form(mangle(body), content_type, max_files=8, max_fields=8)
    with pytest.raises(FormError, match="Missing boundary"):
        parse_form(body, "multipart/form-data", max_files=8, max_fields=8)


def test_forms_with_too_many_parts_are_refused():
    body, content_type = _form_request([("images", (f"{i}.png", b"x")) for i in range(3)], {"k": "5"})
    with pytest.raises(FormError, match="Too many files"):
        parse_form(body, content_type, max_files=2, max_fields=8)
    body, content_type = _form_request([("images", ("a.png", b"x"))], {"k": ["1", "2"]})
    with pytest.raises(FormError, match="Too many fields"):  # a repeated name counts once per part
        parse_form(body, content_type, max_files=8, max_fields=1)


def test_a_server_process_hands_the_gil_over_every_millisecond_and_freezes_its_start_up_objects():
    import gc
    import sys

    import torch

    from dmlplug_builtins.serve.command import freeze_startup_objects, prepare_process
    from dmlplug_builtins.serve.settings import ServeSettings

    interval, torch_threads = sys.getswitchinterval(), torch.get_num_threads()
    try:
        prepare_process(ServeSettings(bundle="b", index="i", threads=1))
        assert sys.getswitchinterval() == pytest.approx(0.001) and torch.get_num_threads() == 1
        freeze_startup_objects()
        assert gc.get_freeze_count() > 0  # what exists now is out of the collector's walks
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)
        torch.set_num_threads(torch_threads)
