"""The FastAPI application: routes, errors as JSON, metrics, the page; :func:`create_app` builds it.

The event loop parses requests, decodes and preprocesses small uploads and writes answers; the model runs in the
:class:`~.batching.Batcher`'s one thread (a job with a large upload runs there whole), and other work that takes
CPU (a large search, re-ranking, writes) runs in a thread; a small search runs on the loop, where it costs less
than a hand-off. Errors the client caused are
``4xx`` with ``{"error", "where", "fix"}``; anything else is a ``500`` whose body says only that the server failed
(the traceback goes to the server's log, never to the client).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from dmlplug.errors import DmlplugError

from .auth import bearer_token, key_matches, read_api_key
from .batching import Batcher, Reservation
from .decode import BadImage, decode_image
from .form import Form, FormError, parse_form
from .limits import BodyLimit
from .metrics import CountRequests, ServiceMetrics
from .service import ClientError, SearchService
from .settings import SETTINGS_VARIABLE, ServeSettings

log = logging.getLogger("dmlplug.serve")

#: Largest ``gallery items × queries`` searched on the event loop itself (no re-ranking): an exact search of
#: that size takes tens of microseconds, less than handing it to a thread; larger ones run in a thread.
INLINE_SEARCH_ROWS = 20_000
#: Largest upload (bytes) decoded on the event loop: a small file decodes in tens of microseconds, a large
#: photograph in tens of milliseconds that every other request would wait; a job holding one runs in the thread.
INLINE_UPLOAD_BYTES = 64 * 1024
#: The multipart field that carries images.
IMAGES_FIELD = "images"
#: Request bodies documented for ``POST /v1/search`` (one route takes either).
_SEARCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": {
                "type": "object", "required": [IMAGES_FIELD],
                "properties": {IMAGES_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"}},
                               "k": {"type": "integer", "minimum": 1, "default": 10},
                               "threshold": {"type": "number"}, "rerank": {"type": "string"}}}},
            "application/json": {"schema": {
                "type": "object", "required": ["vectors"],
                "properties": {"vectors": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                               "names": {"type": "array", "items": {"type": "string"}},
                               "k": {"type": "integer", "minimum": 1, "default": 10},
                               "threshold": {"type": "number"}, "rerank": {"type": "string"}}}},
        },
    }
}
_IMAGES_BODY = {
    "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": [IMAGES_FIELD],
        "properties": {IMAGES_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"}}}}}}}
}


def create_app(service: SearchService, settings: ServeSettings, api_key: bytes | None = None) -> Any:
    """The ASGI app serving ``service`` (FastAPI inside the body-size limit).

    Args:
        service: The loaded bundle and index.
        settings: The server's settings (batching, limits).
        api_key: The key that writes need; ``None``: writes are refused.
    """
    metrics = ServiceMetrics()
    metrics.describe_index(service.index().size, service.index().codec)
    # small uploads are decoded and preprocessed on the loop, the model runs in the batcher's thread (batching.py)
    batcher = Batcher(service.bundle.run, max_batch=settings.max_batch, max_wait_ms=settings.max_wait_ms,
                      prepare=functools.partial(_decode_upload, max_pixels=settings.max_pixels),
                      collate=service.bundle.preprocess, on_batch=metrics.observe_batch, inline_ms=settings.inline_ms,
                      inline_ok=lambda upload: len(upload[1]) <= INLINE_UPLOAD_BYTES)

    answered = [0]  # requests answered by this worker, said when it stops

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        yield
        await batcher.stop()
        # uvicorn runs this after the requests in flight have finished; said on stderr for operators and tests.
        print(f"dmlplug serve: worker {os.getpid()} stopped after answering {answered[0]} requests",
              file=sys.stderr, flush=True)

    app = FastAPI(title="dmlplug serve", version="1",
                  description="Search a dmlplug bundle's index by image or by embedding (docs/serve.md).",
                  lifespan=lifespan)

    # -- errors ---------------------------------------------------------------------------------------------

    @app.exception_handler(ClientError)
    async def client_error(_: Request, exc: ClientError) -> JSONResponse:
        return JSONResponse(_error_body(exc.what, exc.where, exc.fix), status_code=exc.status)

    @app.exception_handler(DmlplugError)
    async def refused(_: Request, exc: DmlplugError) -> JSONResponse:
        # What dmlplug's own checks refuse (e.g. adding an image the index already holds): the client's doing.
        return JSONResponse(_error_body(exc.what, exc.where, exc.fix), status_code=409)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in error['loc'][1:]) or 'body'}: {error['msg']}"
                    for error in exc.errors()]
        return JSONResponse(_error_body("; ".join(problems), None, None), status_code=422)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": "the server failed to answer this request; its log says why"},
                            status_code=500)

    # -- shared steps ---------------------------------------------------------------------------------------

    async def uploaded(request: Request) -> list[tuple[str, bytes]]:
        """The request's uploads, read but not decoded (``(name, bytes)``); the form's other fields are kept."""
        content_type = request.headers.get("content-type", "")
        form = Form()
        if content_type.startswith("multipart/form-data"):
            try:
                form = parse_form(await request.body(), content_type, max_files=settings.max_images, max_fields=16)
            except FormError as exc:
                raise ClientError(f"cannot read the multipart body: {exc}", where="body",
                                  fix=f"send the images as multipart/form-data files in the field "
                                      f"{IMAGES_FIELD!r}") from None
        files = [(filename, data) for name, filename, data in form.files if name == IMAGES_FIELD]
        if not files:
            raise ClientError(f"no image in the request's {IMAGES_FIELD!r} field", where=IMAGES_FIELD,
                              fix=f"send one or more image files as multipart/form-data field {IMAGES_FIELD!r}")
        request.state.form_fields = form.fields
        return [(os.path.basename(filename) or f"image-{number}", data)
                for number, (filename, data) in enumerate(files)]

    async def embedded(reservation: Reservation, uploads: list[tuple[str, bytes]]) -> tuple[np.ndarray, float]:
        """The uploads' embeddings, decoded and embedded in shared batches; decode and embed times recorded."""
        started = time.perf_counter()
        try:
            result = await reservation.embed(uploads)
        except BadImage as exc:
            raise ClientError(str(exc), where=IMAGES_FIELD, fix="send JPEG, PNG, WebP, … files Pillow decodes, "
                              f"of at most {settings.max_pixels:,} pixels") from None
        seconds = time.perf_counter() - started - result.prepare_seconds  # the wait, preprocessing and model
        metrics.stages["decode"].observe(result.prepare_seconds)
        metrics.stages["embed"].observe(seconds)
        return result.vectors, seconds

    def require_key(request: Request) -> None:
        if api_key is None:
            raise ClientError("this server takes no writes: it was started without an API key", status=403,
                              fix="start it with --api-key-file FILE to allow adding and removing items")
        given = bearer_token(request.headers.get("authorization")) or request.headers.get("x-api-key")
        if given is None:
            raise ClientError("a write needs the API key", status=401,
                              fix="send it as 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
        if not key_matches(api_key, given):
            raise ClientError("the API key is wrong", status=401, fix="send the key in the server's --api-key-file")

    # -- routes ---------------------------------------------------------------------------------------------

    @app.post("/v1/search", openapi_extra=_SEARCH_BODY, summary="The nearest gallery items of images or vectors")
    async def search(request: Request) -> JSONResponse:
        """Matches per query: gallery id and path, cosine similarity, accepted at the threshold."""
        timings: dict[str, float] = {}
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            body = await _json_body(request)
            vectors = service.check_vectors(body.get("vectors"))
            names = body.get("names") or [f"vector-{i}" for i in range(len(vectors))]
            if not isinstance(names, list) or len(names) != len(vectors):
                raise ClientError("names must list one name per vector", where="names")
            options = body
        elif content_type.startswith("multipart/form-data"):
            async with batcher.reserve() as reservation:
                uploads = await uploaded(request)
                vectors, timings["embed"] = await embedded(reservation, uploads)
            names = [name for name, _ in uploads]
            options = request.state.form_fields
        else:
            raise ClientError(f"unsupported content type {content_type or 'none'!r}", status=415,
                              fix="send images as multipart/form-data or vectors as application/json")
        k = _integer(options.get("k", 10), "k")
        threshold = _number(options.get("threshold"), "threshold")
        index = service.index()
        service.check_k(k, index)
        rerank = service.parse_rerank(options.get("rerank")) if options.get("rerank") else service.default_rerank
        if rerank is None and index.size * len(vectors) <= INLINE_SEARCH_ROWS:
            # microseconds: less than the hand-off to a thread would cost
            results, stage = service.search(vectors, names, k=k, threshold=threshold, rerank=None, index=index)
        else:
            results, stage = await run_in_threadpool(service.search, vectors, names, k=k, threshold=threshold,
                                                     rerank=rerank, index=index)
        for name, seconds in stage.items():
            metrics.stages[name].observe(seconds)
        timings.update(stage)
        limit = threshold if threshold is not None else service.bundle.threshold
        return JSONResponse({"threshold": limit, "results": results,
                             "timing_ms": {key: round(value * 1000, 3) for key, value in timings.items()}})

    @app.post("/v1/embed", openapi_extra=_IMAGES_BODY, summary="Embeddings of images")
    async def embed(request: Request) -> JSONResponse:
        """Unit-length embeddings, the bundle's preprocessing (as ``dmlplug embed``)."""
        async with batcher.reserve() as reservation:
            uploads = await uploaded(request)
            vectors, seconds = await embedded(reservation, uploads)
        return JSONResponse({"names": [name for name, _ in uploads], "dim": int(vectors.shape[1]),
                             "embeddings": vectors.astype(float).tolist(),
                             "timing_ms": {"embed": round(seconds * 1000, 3)}})

    @app.post("/v1/items", openapi_extra=_IMAGES_BODY, summary="Add images to the gallery (API key)")
    async def add_items(request: Request) -> JSONResponse:
        """Store the images in the gallery folder and add them to the index, atomically."""
        require_key(request)
        async with batcher.reserve() as reservation:
            uploads = await uploaded(request)
            vectors, _ = await embedded(reservation, uploads)
        added = await run_in_threadpool(service.add, uploads, vectors)
        index = service.index()
        metrics.describe_index(index.size, index.codec)
        return JSONResponse({"added": added, "items": int(index.size)}, status_code=201)

    @app.delete("/v1/items/{item_id}", summary="Remove an item from the gallery (API key)")
    async def remove_item(request: Request, item_id: Annotated[int, Path(ge=0)]) -> JSONResponse:
        """Remove one item from the index, atomically (its image file stays)."""
        require_key(request)
        result = await run_in_threadpool(service.remove, item_id)
        index = service.index()
        metrics.describe_index(index.size, index.codec)
        return JSONResponse(result)

    @app.get("/v1/items/{item_id}/image", summary="A gallery item's image (thumbnails)")
    async def item_image(item_id: Annotated[int, Path(ge=0)]) -> FileResponse:
        """The image file of a gallery item, by id: only files inside the gallery folder are ever served."""
        return FileResponse(await run_in_threadpool(service.image_file, item_id))

    @app.get("/v1/info", summary="The bundle and the index served")
    async def info() -> dict[str, Any]:
        """Embedding size, threshold, codec, gallery size, writes allowed, batching."""
        index = service.index()
        return {"embedding_size": service.embedding_size, "threshold": service.bundle.threshold,
                "codec": index.codec, "items": int(index.size), "writes": api_key is not None,
                "max_batch": settings.max_batch, "max_wait_ms": settings.max_wait_ms,
                "inline_ms": settings.inline_ms, "rerank": settings.rerank, "max_images": settings.max_images}

    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        """Always ``ok`` while the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", summary="Bundle and index loaded, the probe re-checked")
    async def readyz() -> JSONResponse:
        """``200`` when the model still embeds the index's probe input as recorded, else ``503``."""
        return JSONResponse(await run_in_threadpool(service.readiness))

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=False)
    async def metrics_route() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_page_file("index.html"))

    @app.get("/page/{name}", include_in_schema=False)
    async def page_asset(name: str) -> Response:
        if name not in _PAGE_ASSETS:
            raise ClientError(f"no page file {name!r}", status=404)
        return Response(_page_file(name), media_type=_PAGE_ASSETS[name])

    app.add_middleware(CountRequests, metrics=metrics, answered=answered)
    return BodyLimit(app, settings.max_body_bytes)


#: The page's files besides index.html, with their content types (a fixed list: no client-given path is read).
_PAGE_ASSETS = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}


def _decode_upload(upload: tuple[str, bytes], *, max_pixels: int) -> Any:
    """One upload (``(name, bytes)``) to an RGB image (on the loop, or in the batcher's thread if large)."""
    name, data = upload
    return decode_image(data, name=name, max_pixels=max_pixels)


def _page_file(name: str) -> str:
    return resources.files(__package__).joinpath("page", name).read_text(encoding="utf-8")


def _error_body(what: str, where: str | None, fix: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": what}
    if where:
        body["where"] = where
    if fix:
        body["fix"] = fix
    return body


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ClientError(f"the body is not valid JSON: {exc}", where="body") from None
    if not isinstance(body, dict):
        raise ClientError("the JSON body must be an object with a 'vectors' list", where="body")
    return body


def _integer(value: Any, where: str) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ClientError(f"{where} must be a whole number, got {value!r}", where=where) from None


def _number(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ClientError(f"{where} must be a number, got {value!r}", where=where) from None
    if not np.isfinite(number):
        raise ClientError(f"{where} must be finite, got {value!r}", where=where)
    return number


def app_from_environment() -> Any:
    """The app of one worker process of ``--workers N`` (uvicorn calls it in each worker)."""
    from dmlplug import plugin_host

    from .command import freeze_startup_objects, prepare_process

    settings = ServeSettings.model_validate_json(os.environ[SETTINGS_VARIABLE])
    service = SearchService(settings, plugin_host().registry)
    prepare_process(settings)
    key = read_api_key(settings.api_key_file) if settings.api_key_file else None
    app = create_app(service, settings, key)
    freeze_startup_objects()
    return app

