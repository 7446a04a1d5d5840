"""A lean way through for `POST /search`: straight to the batcher, past FastAPI's routing.

FastAPI's routing, dependency solving and request object took about as much of the server's
CPU per search as the search itself once scans were shared (docs/search.md, "Batching").
`FastSearch` sits inside the app's own middleware (keys, body limit), reads a JSON body,
validates it with the route's model as FastAPI does (`json.loads`, then `model_validate`),
and hands it to `app.state.batcher`. Only a request that succeeds is answered here: any other
(another content type, a body that fails validation, a refused query, a bug) is replayed,
body and all, through the app, whose route and error handlers answer it as before. The route
stays registered, so the OpenAPI schema is unchanged.
"""

from __future__ import annotations

import json
from functools import partial

from fastapi import HTTPException
from fastapi.responses import JSONResponse

from lbhash.service import models


class FastSearch:
    def __init__(self, app, answer_search):
        """`answer_search(body, state)`: an awaitable of the response to a validated body."""
        self.app, self.answer_search = app, answer_search

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/search" or scope["method"] != "POST" or not _json(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read(receive)
        except HTTPException as exc:  # the body limit (BodyLimit), as FastAPI's handler answers it
            await JSONResponse({"detail": exc.detail}, status_code=exc.status_code)(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        try:
            response = await self.answer_search(models.SearchRequest.model_validate(json.loads(body)),
                                                scope["app"].state)
        except Exception:  # noqa: BLE001 - the app answers it (422, 400, ...), as without this path
            await self.app(scope, partial(_replay, [body], receive), send)
            return
        await response(scope, receive, send)


def _json(scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value == b"application/json"
    return False


async def _read(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _replay(body: list[bytes], receive):
    """The body already read, once; then the connection's own messages (a disconnect)."""
    if body:
        return {"type": "http.request", "body": body.pop(), "more_body": False}
    return await receive()
