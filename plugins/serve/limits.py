"""A limit on request bodies, enforced before a handler or the multipart parser sees them.

Starlette reads a body as it arrives and has no limit of its own. This ASGI middleware refuses a declared
``Content-Length`` over the limit at once (the server's HTTP parser holds a client to the length it declared).
A body sent without one (chunked) is read here first, up to the limit, and refused as soon as it passes it, else
handed on: the app never starts on a body it would have to abandon. Both refusals are ``413`` with a JSON error.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


class BodyLimit:
    """ASGI middleware: request bodies of at most ``max_bytes``.

    Args:
        app: The wrapped ASGI app.
        max_bytes: Largest request body accepted.
    """

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass the request on, or answer 413 when its body is over the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                await self._refuse(send, int(declared))
                return
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away; the app sees it
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send, size)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, size: int) -> None:
        body = json.dumps({"error": f"the request body ({size:,} bytes or more) is over the limit of "
                                    f"{self.max_bytes:,} bytes",
                           "fix": "send fewer or smaller images per request, or start the server with a larger "
                                  "--max-body-mb"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
