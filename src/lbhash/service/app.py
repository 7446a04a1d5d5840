"""The HTTP service: `create_app(index_dir_or_store, encoder=None)` -> a FastAPI app.

Endpoints: POST /search, POST /search/image, POST /items, POST /items/image,
GET /items/{id}, DELETE /items/{id}, GET /health, GET /stats (OpenAPI at /docs); the search
page at / and its helpers (lbhash.service.page: /about, /sources, /items/{id}/image, /encode).
Bad input is a 4xx with {"detail": one line}: 400 bad values, 401 a key missing or wrong, 403
a change refused (read-only, or from another web site), 404 unknown id, 409 id taken, 413 body
or images too large, 422 malformed request; 507 uploads over their byte budget
(lbhash.service.access has the rules of keys). Nothing else leaks: a bug is a bare 500.
Searches may re-rank their Hamming top k * rerank_factor by the queries' real-valued outputs
(lbhash.index.rerank); the hits then carry a `score`.

The handlers are module-level functions: they decode a request (lbhash.service.decode), call
the store (whose searches follow `lbhash.index.search_hits`, the rules `lbhash search` uses
too) and shape the answer. What they share is on `app.state`: `store`, `searcher` (None
without a run attached), `media`, `limits`, `offload` (the blocking work's threads) and
`batcher` (lbhash.service.batching: concurrent `/search` requests share one scan).
"""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
from fastapi import APIRouter, FastAPI, File, Form, HTTPException, Path as PathParam, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from lbhash import limits as table
from lbhash.errors import Conflict, InputError, NotFound, TooLarge, one_line
from lbhash.index import Searcher, check_classes, plan_search
from lbhash.index.uploads import OverBudget
from lbhash.limits import MAX_ID, check_class_ids, check_ids
from lbhash.service import models
from lbhash.service.access import Access, AccessControl
from lbhash.service.batching import MAX_ROWS, Query, SearchBatcher
from lbhash.service.decode import (check_batch, encode_images, need_searcher, parse_ids, read_uploads,
                                   reranked_queries, to_codes)
from lbhash.service.media import ItemMedia
from lbhash.service.offload import Offload
from lbhash.service.page import add_page
from lbhash.service.store import IndexStore, lists_to_labels

logger = logging.getLogger("lbhash")
_ERRORS = {code: {"model": models.ErrorBody} for code in (400, 404, 409, 413, 422)}
router = APIRouter()


@dataclass(frozen=True)
class Limits:
    """The service's limits: the table of lbhash.limits, which a server may only lower."""

    max_body_bytes: int = table.MAX_BODY_BYTES
    max_batch: int = table.MAX_BATCH
    max_k: int = table.MAX_K
    max_class_id: int = table.MAX_CLASS_ID
    max_rerank_candidates: int = table.MAX_RERANK_CANDIDATES

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            ceiling = table.TABLE[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
                raise InputError(f"{name} must be an integer from 1 to {ceiling} (lbhash.limits), got {value!r}")


def create_app(source, encoder=None, *, limits: Limits | None = None, compact_every: int = 1000,
               access: Access | None = None, media_budget: int = table.MEDIA_BUDGET_BYTES,
               batch_window: float = 0.0, batch_rows: int = MAX_ROWS) -> FastAPI:
    """`source`: an index directory (served with a write-ahead log beside it) or a store
    (`IndexStore`, `MilvusStore`). `encoder` (from a run) enables feature and image queries.
    `access`: keys and read-only mode (lbhash.service.access; default: open, as on loopback).
    `batch_window` (seconds) and `batch_rows`: how `/search` requests share scans
    (lbhash.service.batching)."""
    store = source if hasattr(source, "search") else IndexStore(Path(source), compact_every=compact_every)

    @asynccontextmanager
    async def lifespan(app):
        if isinstance(store, IndexStore):
            await app.state.offload.run(store.warm)
        yield
        app.state.batcher.close()
        app.state.offload.close()
        store.close()  # compacts: the log is folded into the saved index

    app = FastAPI(title="lbhash search", lifespan=lifespan, docs_url=None, redoc_url=None,  # offline: page.py
                  description="Hamming search over packed binary codes (docs/search.md).")
    app.state.store, app.state.limits, app.state.access = store, limits or Limits(), access or Access()
    app.state.offload = Offload(getattr(store, "search_threads", None))  # the searches' worker threads
    # /search's shared scans: a batch in flight per core, so that one's Python overlaps the other's scan
    app.state.batcher = SearchBatcher(store, window=batch_window, max_rows=batch_rows,
                                      threads=getattr(store, "search_threads", None) or 1)
    app.state.searcher = Searcher(store, encoder) if encoder is not None else None
    # sources, thumbnails and the images added here (NAME.media/ beside the index)
    app.state.media = ItemMedia(store, budget=media_budget)
    _install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=app.state.limits.max_body_bytes)
    app.add_middleware(AccessControl, access=app.state.access)  # outermost: refused before the body is read
    app.include_router(router)
    add_page(app)
    return app


# --- searches -----------------------------------------------------------------------------------


def search_query(state, codes, k, radius, label_lists, real=None, factor=None) -> Query:
    """Decoded queries with their checked plan and filters (`real`: their real outputs, when
    the search re-ranks)."""
    limits = state.limits
    plan = plan_search(k, radius, rerank=real is not None, factor=factor, max_k=limits.max_k,
                       max_candidates=limits.max_rerank_candidates)
    classes = None if label_lists is None else check_classes(label_lists, "labels", limits.max_class_id)
    return Query(codes, plan, classes, real)


def hits_response(hits) -> Response:
    """The hits as a `SearchResponse` body encoded here: FastAPI's validation and encoding of a
    response model took more CPU than a search of a million codes (docs/search.md, "The
    service's own cost")."""
    results = [{"hits": [{"id": i, "distance": d, "labels": lab} if score is None else
                         {"id": i, "distance": d, "labels": lab, "score": score}
                         for i, d, lab, score in query.rows()]} for query in hits]
    return Response(json.dumps({"results": results}, separators=(",", ":"), allow_nan=False),
                    media_type="application/json")


def run_search(state, codes, k, radius, label_lists, real=None, factor=None) -> Response:
    """A search of its own (no batch): `search_query`, the store's search, `hits_response`."""
    query = search_query(state, codes, k, radius, label_lists, real, factor)
    return hits_response(state.store.search(query.codes, query.plan, classes=query.classes, real=query.real))


@router.post("/search", response_model=models.SearchResponse, response_model_exclude_none=True, responses=_ERRORS)
async def search(body: models.SearchRequest, request: Request):
    # decoded, searched (in a scan shared with the requests beside it) and encoded on the batcher's threads
    return await answer_search(body, request.app.state)


async def answer_search(body: models.SearchRequest, state) -> Response:
    rows = len(body.codes) if body.codes is not None else len(body.features or ())
    return await state.batcher.run(partial(search_body, body, state), hits_response, rows)


def search_body(body: models.SearchRequest, state) -> Query:
    if body.real is None and body.rerank_factor is None:
        codes, real = to_codes(state, body.codes, body.features, "queries"), None
    else:
        codes, real = reranked_queries(state, body)
    return search_query(state, codes, body.k, body.radius, body.labels, real, body.rerank_factor)


@router.post("/search/image", response_model=models.SearchResponse, response_model_exclude_none=True,
             responses=_ERRORS)
def search_image(request: Request, files: list[UploadFile] = File(...), k: int | None = Form(None, ge=1),
                 radius: int | None = Form(None, ge=0), labels: str | None = Form(None),
                 rerank_factor: int | None = Form(None, ge=1)):
    """Query with uploaded image files; `labels`: comma-separated class ids for every query;
    `rerank_factor`: re-rank the Hamming top k * rerank_factor by the images' real outputs."""
    state = request.app.state
    check_batch(state.limits, len(files), "images")
    searcher = need_searcher(state.searcher, "images")
    blobs, names = read_uploads(files)
    label_lists = None if labels is None else [parse_ids(labels, "labels", check=check_class_ids)] * len(files)
    codes, real = encode_images(searcher, blobs, names, real=rerank_factor is not None)
    return run_search(state, codes, k, radius, label_lists, real, rerank_factor)


# --- items --------------------------------------------------------------------------------------


@router.post("/items", response_model=models.ItemsResponse, responses=_ERRORS)
def add_items(body: models.ItemsRequest, request: Request):
    state = request.app.state
    codes = to_codes(state, body.codes, body.features, "items")
    labels = None if body.labels is None else labels_of_items(state, body.labels, len(codes))
    given_ids = None if body.ids is None else check_ids(body.ids, "ids")
    with state.media.adding(given_ids, body.upsert) as done:
        ids, seq = state.store.add(codes, ids=given_ids, labels=labels, upsert=body.upsert)
        done(ids)
    return models.ItemsResponse(ids=np.asarray(ids).tolist(), seq=seq, ntotal=state.store.ntotal)


@router.post("/items/image", response_model=models.ItemsResponse, responses=_ERRORS)
def add_images(request: Request, files: list[UploadFile] = File(...), ids: str | None = Form(None),
               labels: str | None = Form(None), upsert: bool = Form(False)):
    """Add uploaded images; `ids` comma-separated; `labels` per image, separated by ';'
    (e.g. "1,2;0")."""
    state = request.app.state
    check_batch(state.limits, len(files), "images")
    blobs, names = read_uploads(files)
    state.media.check_uploads(blobs, names)
    searcher = need_searcher(state.searcher, "images")
    codes = searcher.encode(searcher.decode_images(blobs, names))
    label_lists = None if labels is None else [parse_ids(part, "labels", allow_empty=True, check=check_class_ids)
                                               for part in labels.split(";")]
    item_labels = None if label_lists is None else labels_of_items(state, label_lists, len(codes))
    given_ids = None if ids is None else parse_ids(ids, "ids")
    with state.media.adding(given_ids, upsert, blobs, names) as done:  # the images are kept for thumbnails
        added, seq = state.store.add(codes, ids=given_ids, labels=item_labels, upsert=upsert)
        done(added)
    return models.ItemsResponse(ids=np.asarray(added).tolist(), seq=seq, ntotal=state.store.ntotal)


def labels_of_items(state, lists: list[list[int]], n: int):
    """The labels of n added items, as class-id lists in a request (one per item)."""
    return lists_to_labels(check_classes(lists, "labels", state.limits.max_class_id), n)


@router.get("/items/{item_id}", response_model=models.Item, responses=_ERRORS)
def get_item(request: Request, item_id: int = PathParam(..., ge=0, le=MAX_ID)):
    codes, labels = request.app.state.store.get(np.array([item_id], np.int64))
    return models.Item(id=item_id, code=codes[0].tobytes().hex(), labels=labels[0])


@router.delete("/items/{item_id}", response_model=models.DeleteResponse, responses=_ERRORS)
def delete_item(request: Request, item_id: int = PathParam(..., ge=0, le=MAX_ID)):
    state = request.app.state
    with state.media.removing([item_id]):
        seq = state.store.remove(np.array([item_id], np.int64))
    return models.DeleteResponse(id=item_id, seq=seq, ntotal=state.store.ntotal)


# --- the service ----------------------------------------------------------------------------------


@router.get("/health", response_model=models.Health)
def health(request: Request):
    return models.Health(status="ok", ntotal=request.app.state.store.ntotal)


@router.get("/stats", response_model=models.Stats)
def stats(request: Request):
    state = request.app.state
    return models.Stats(**state.store.stats(), input_kind=None if state.searcher is None else state.searcher.input_kind,
                        limits=asdict(state.limits), media=state.media.usage())


def _install_error_handlers(app: FastAPI) -> None:
    def answer(status: int):
        async def handler(request: Request, exc: Exception):
            return JSONResponse({"detail": one_line(exc)}, status_code=status)
        return handler

    app.add_exception_handler(NotFound, answer(404))
    app.add_exception_handler(Conflict, answer(409))
    app.add_exception_handler(TooLarge, answer(413))
    app.add_exception_handler(OverBudget, answer(507))
    app.add_exception_handler(InputError, answer(400))

    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse({"detail": f"{where}: {first.get('msg')}" if where else str(first.get("msg"))},
                            status_code=422)

    app.add_exception_handler(RequestValidationError, invalid)

    async def internal(request: Request, exc: Exception):
        logger.error("internal error", exc_info=exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    app.add_exception_handler(Exception, internal)


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body larger than {limit} bytes")


class BodyLimit:
    """ASGI middleware refusing bodies over `limit` bytes: by Content-Length at once, else
    as soon as the bytes read pass it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            response = JSONResponse({"detail": f"request body larger than {self.limit} bytes"}, status_code=413)
            await response(scope, receive, send)
            return
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)
