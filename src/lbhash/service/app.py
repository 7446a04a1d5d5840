"""The HTTP service: `create_app(index_dir_or_store, encoder=None)` -> a FastAPI app.

Endpoints: POST /search, POST /search/image, POST /items, POST /items/image,
GET /items/{id}, DELETE /items/{id}, GET /health, GET /stats (OpenAPI at /docs); GET /duplicates
(lbhash.service.duplicates); the search page at / and its helpers (lbhash.service.page: /about,
/sources, /items/{id}/image).
Bad input is a 4xx with {"detail": one line}: 400 bad values, 401 a key missing or wrong
(lbhash.service.access), 403 a change refused or a request naming another host, 404 unknown id,
409 id taken, 413 body or images too large, 422 malformed request (its first errors named, a JSON
body checked in bounded memory first: lbhash.service.bodies), 429 / 503 (Retry-After) too
much decoding at once, 507 uploads over their byte budget. A bug is a bare 500.
Where the index keeps embeddings or instance codes, a top k is ranked by them (lbhash.index.blend;
`rescore` false for Hamming order) and hits carry a `score`; added items bring their embeddings.

The handlers take what they use as FastAPI dependencies (lbhash.service.depends), decode a request
(lbhash.service.decode) for the application layer (lbhash.serving.index_store's `Store`,
lbhash.serving.requests's `Search`) and shape its answer. `/search` requests that arrive together share
one scan (lbhash.service.batching); a well-formed one is answered by the `SearchPath` middleware.
"""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Form, HTTPException, Path as PathParam, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from lbhash import limits as table
from lbhash.codes import to_hex
from lbhash.encoders import Encoder
from lbhash.errors import Conflict, InputError, NotFound, TooLarge, one_line
from lbhash.limits import MAX_ID, check_class_ids, check_ids
from lbhash.indexes.duplicates import ServedGroups
from lbhash.serving.index_store import IndexStore, Store
from lbhash.serving.searcher import QueryEncoder, SearchOptions
from lbhash.serving.requests import Search, item_labels
from lbhash.serving.uploads import OverBudget
from lbhash.service import models
from lbhash.service.access import Access, AccessControl, change_routes, changes_data, reads_data
from lbhash.service.batching import Batching, SearchBatcher
from lbhash.service.bodies import (MAX_ERRORS, BodyErrors, CheckedBody, check_body, check_lists, error_line,
                                  json_content)
from lbhash.service.decode import (DecodersBusy, PixelBudget, check_batch, decode_search, need_encoder, parse_ids,
                                  read_uploads, to_codes, wants_ranking)
from lbhash.service import duplicates
from lbhash.service.depends import BatcherDep, DecodingDep, EncoderDep, Limits, LimitsDep, MediaDep, StoreDep
from lbhash.service.media import ItemMedia, TooBusy
from lbhash.service.offload import Offload
from lbhash.service.page import add_page, item_details

logger = logging.getLogger("lbhash")
_ERRORS = {code: {"model": models.ErrorBody} for code in (400, 404, 409, 413, 422)}
# one router per resource; JSON bodies are checked in bounded memory first (bodies.py), and each route
# that is not a GET declares whether it changes the index (lbhash.service.access.change_routes)
searches = APIRouter(route_class=CheckedBody, dependencies=[Depends(reads_data)])
items = APIRouter(route_class=CheckedBody)
status = APIRouter(route_class=CheckedBody)
CHANGES = [Depends(changes_data)]


def create_app(source: str | Path | Store, encoder: Encoder | None = None, *, limits: Limits | None = None,
               compact_every: int = 1000, access: Access | None = None,
               media_budget: int = table.MEDIA_BUDGET_BYTES, batching: Batching | None = None) -> FastAPI:
    """`source`: an index directory (served with a write-ahead log beside it) or a `Store`.
    `encoder` (from a run) enables feature and image queries. `access` (default: open, on the
    loopback names and IP addresses; its keys, read-only mode and `allowed_hosts`):
    lbhash.service.access. `batching` (its `window` in seconds and `max_rows`): how `/search`
    requests share scans (lbhash.service.batching)."""
    if isinstance(source, Store):
        store = source
    elif isinstance(source, (str, Path)):
        store = IndexStore(Path(source), compact_every=compact_every)
    else:
        raise TypeError(f"create_app serves an index directory or a lbhash.serving.index_store.Store, not {type(source).__name__}")

    @asynccontextmanager
    async def lifespan(app):
        await app.state.offload.run(store.warm)
        yield
        app.state.batcher.close()
        app.state.offload.close()
        store.close()  # compacts: the log is folded into the saved index

    app = FastAPI(title="lbhash search", lifespan=lifespan, docs_url=None, redoc_url=None,  # offline: page.py
                  description="Hamming search over packed binary codes (docs/search.md).")
    app.state.store, app.state.limits, app.state.access = store, limits or Limits(), access or Access()
    app.state.offload = Offload(store.search_threads)  # the blocking work's threads
    # /search's shared scans: a batch in flight per core, so that one's Python overlaps the other's scan
    app.state.batcher = SearchBatcher(store, batching or Batching(), threads=store.search_threads or 1)
    app.state.encoder = QueryEncoder(encoder, store.bits) if encoder is not None else None
    # the pixels of images decoded at once, over every request: uploads and thumbnails
    app.state.decoding = PixelBudget(app.state.limits.max_decoding_pixels)
    # sources, thumbnails and the images added here (NAME.media/ beside the index)
    app.state.media = ItemMedia(store, budget=media_budget, decoding=app.state.decoding)
    app.state.groups = ServedGroups(store)  # GET /duplicates' groups, kept until the index changes
    _install_error_handlers(app)
    app.add_middleware(SearchPath, state=app.state)  # innermost: behind the key and size checks
    app.add_middleware(BodyLimit, limit=app.state.limits.max_body_bytes)
    # outermost: a request for another host, or without the key, is refused before the body is read
    app.add_middleware(AccessControl, access=app.state.access, state=app.state)
    for router in (searches, items, status, duplicates.router):
        app.include_router(router)
    add_page(app)
    app.state.change_routes = change_routes(app.routes)  # (each route declares whether it changes data)
    return app


def hits_response(store: Store, media: ItemMedia, search: Search, hits) -> Response:
    """The hits of a query with their `item_details`, as a `SearchResponse` body encoded here:
    FastAPI's validation and encoding of it took more CPU than a search of a million codes
    (docs/results/search-benchmarks.md, "The service's own cost")."""
    details = item_details(store, media, sorted({i for h in hits for i in h.ids}))
    results = [{"code": code, "hits": [{"id": i, "distance": d, "labels": lab,
                                        **({} if score is None else {"score": score}),
                                        **({} if rows.instance_distances is None else
                                           {"instance_distance": rows.instance_distances[r]}),
                                        **({} if rows.same is None else {"same": rows.same[r]}),
                                        **details.get(i, {})}
                                       for r, (i, d, lab, score) in enumerate(rows.rows())]}
               for code, rows in zip(to_hex(search.queries.codes), hits)]
    return Response(json.dumps({"results": results}, separators=(",", ":"), allow_nan=False),
                    media_type="application/json")


@searches.post("/search", response_model=models.SearchResponse, response_model_exclude_none=True, responses=_ERRORS)
async def search(body: models.SearchRequest, store: StoreDep, encoder: EncoderDep, limits: LimitsDep,
                 batcher: BatcherDep, media: MediaDep):
    # SearchPath answers a valid body: this route documents /search and gives the 422 of an invalid one
    return await search_response(body, store, encoder, limits, batcher, media)


async def search_response(body: models.SearchRequest, store: Store, encoder: QueryEncoder | None, limits: Limits,
                          batcher: SearchBatcher, media: ItemMedia) -> Response:
    # decoded, searched (in a scan shared with the requests beside it) and encoded on the batcher's threads
    rows = len(body.codes) if body.codes is not None else len(body.features or ())
    search = partial(decode_search, body, limits, store.bits, encoder, store.index.embedding_dim, store.transform)
    return await batcher.run(search, partial(hits_response, store, media), rows)


@searches.post("/search/image", response_model=models.SearchResponse, response_model_exclude_none=True,
             responses=_ERRORS)
def search_image(store: StoreDep, encoder: EncoderDep, limits: LimitsDep, media: MediaDep, decoding: DecodingDep,
                 form: Annotated[models.ImageSearchForm, Form()]):
    """Query with uploaded image files; `labels`: comma-separated class ids for every query; where
    the index keeps embeddings or instance codes, the top k * rescore_factor (default 4) candidates
    of each code are ranked by one score (`looks_like`, from 0, same class first, to 1, looks like
    first; docs/search.md, "Ranking"), unless `rescore` is false. Each hit comes with its source,
    thumbnail and code, as /search gives them: an image query is this one request."""
    files, labels = form.files, form.labels
    check_batch(limits, len(files), "images")
    run = need_encoder(encoder, "images")
    blobs, names, pixels = read_uploads(files)
    label_lists = None if labels is None else [parse_ids(labels, "labels", check=check_class_ids)] * len(files)
    floats, transform = store.index.embedding_dim is not None, store.transform
    ranked = wants_ranking(form.rescore, form.rescore_factor, form.looks_like, form.radius,
                           floats or transform is not None, run.gives_embeddings)
    with decoding.hold(pixels, "the query images"):  # the service's pixels decoded at once
        queries = run.queries(run.decode_images(blobs, names), rank=ranked, floats=floats, instance=transform)
    options = SearchOptions(form.k, form.radius, form.rescore_factor, form.looks_like)
    search = Search.checked(limits, queries, options, label_lists, ranked)
    return hits_response(store, media, search, search.run(store))


@items.post("/items", response_model=models.ItemsResponse, responses=_ERRORS, dependencies=CHANGES)
def add_items(body: models.ItemsRequest, store: StoreDep, encoder: EncoderDep, limits: LimitsDep, media: MediaDep):
    codes, emb = to_codes(body, "items", limits, store.bits, encoder, store.embedding_width)
    labels = None if body.labels is None else item_labels(body.labels, len(codes), limits.max_class_id)
    given_ids = None if body.ids is None else check_ids(body.ids, "ids")
    with media.adding(given_ids, body.upsert) as done:
        ids, seq = store.add(codes, ids=given_ids, labels=labels, upsert=body.upsert, embeddings=emb)
        done(ids)
    return models.ItemsResponse(ids=np.asarray(ids).tolist(), seq=seq, ntotal=store.ntotal)


@items.post("/items/image", response_model=models.ItemsResponse, responses=_ERRORS, dependencies=CHANGES)
def add_images(store: StoreDep, encoder: EncoderDep, limits: LimitsDep, media: MediaDep, decoding: DecodingDep,
               form: Annotated[models.ImageItemsForm, Form()]):
    """Add uploaded images; `ids` comma-separated; `labels` per image, separated by ';'
    (e.g. "1,2;0")."""
    files, ids, labels, upsert = form.files, form.ids, form.labels, form.upsert
    check_batch(limits, len(files), "images")
    blobs, names, pixels = read_uploads(files)
    media.check_uploads(blobs, names)
    run = need_encoder(encoder, "images")
    with decoding.hold(pixels, "the uploaded images"):  # the service's pixels decoded at once
        images = run.decode_images(blobs, names)
        # codes and embeddings from one forward pass where the index keeps embeddings
        kept = store.index.embedding_dim is not None or store.transform is not None
        if not kept:
            codes, emb = run.encode(images), None
        else:  # (an index built from photos keeps their views' embeddings too: lbhash.data.views)
            codes, emb = run.item_embeddings(images, store.item_view) if store.item_view else run.embeddings(images)
        hashes = run.perceptual(images, store.transform)
    label_lists = None if labels is None else [parse_ids(part, "labels", allow_empty=True, check=check_class_ids)
                                               for part in labels.split(";")]
    sets = None if label_lists is None else item_labels(label_lists, len(codes), limits.max_class_id)
    given_ids = None if ids is None else parse_ids(ids, "ids")
    with media.adding(given_ids, upsert, blobs, names) as done:  # the images are kept for thumbnails
        added, seq = store.add(codes, ids=given_ids, labels=sets, upsert=upsert, embeddings=emb, perceptual=hashes)
        done(added)
    return models.ItemsResponse(ids=np.asarray(added).tolist(), seq=seq, ntotal=store.ntotal)


@items.get("/items/{item_id}", response_model=models.Item, response_model_exclude_none=True, responses=_ERRORS)
def get_item(store: StoreDep, item_id: int = PathParam(..., ge=0, le=MAX_ID)):
    codes, labels = store.get(np.array([item_id], np.int64))
    kept = None if store.index.embedding_dim is None else store.embeddings(np.array([item_id], np.int64))
    return models.Item(id=item_id, code=to_hex(codes)[0], labels=labels[0],
                       embedding=None if kept is None else kept[0].astype(float).tolist())


@items.delete("/items/{item_id}", response_model=models.DeleteResponse, responses=_ERRORS, dependencies=CHANGES)
def delete_item(store: StoreDep, media: MediaDep, item_id: int = PathParam(..., ge=0, le=MAX_ID)):
    with media.removing([item_id]):
        seq = store.remove(np.array([item_id], np.int64))
    return models.DeleteResponse(id=item_id, seq=seq, ntotal=store.ntotal)


@status.get("/health", response_model=models.Health)
def health(store: StoreDep):
    return models.Health(status="ok", ntotal=store.ntotal)


@status.get("/stats", response_model=models.Stats)
def stats(store: StoreDep, encoder: EncoderDep, limits: LimitsDep, media: MediaDep):
    return models.Stats(**store.stats(), input_kind=None if encoder is None else encoder.input_kind,
                        limits=asdict(limits), media=media.usage())


# what a bad request's error becomes (a 4xx with {"detail": one line}), here and in SearchPath
ERROR_STATUS = {NotFound: 404, Conflict: 409, TooLarge: 413, OverBudget: 507, InputError: 400}


def error_response(exc: Exception, status: int, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": one_line(exc)}, status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    def answer(status: int, headers: dict | None = None):
        async def handler(request: Request, exc: Exception):
            return error_response(exc, status, headers)
        return handler

    for kind, status in ERROR_STATUS.items():
        app.add_exception_handler(kind, answer(status))
    # too much decoding at once (the pixel budget, the thumbnails' rate): retry shortly
    app.add_exception_handler(DecodersBusy, answer(503, {"Retry-After": "1"}))
    app.add_exception_handler(TooBusy, answer(429, {"Retry-After": "1"}))

    async def invalid(request: Request, exc: RequestValidationError):
        # (a JSON body's list elements and keys were checked first, so these errors are few: bodies.py)
        errors = exc.errors() or [{"loc": (), "msg": "invalid request"}]
        named = [f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" if e.get("loc") else str(e.get("msg"))
                 for e in errors[:MAX_ERRORS]]
        return JSONResponse({"detail": error_line(named, len(errors))}, status_code=422)

    app.add_exception_handler(RequestValidationError, invalid)

    async def internal(request: Request, exc: Exception):
        logger.error("internal error", exc_info=exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    app.add_exception_handler(Exception, internal)


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
                    raise HTTPException(413, f"request body larger than {self.limit} bytes")
            return message

        await self.app(scope, limited, send)


class SearchPath:
    """ASGI middleware that answers a well-formed `POST /search` itself, past FastAPI's routing,
    dependencies and body handling, which cost more than the search of a million codes
    (docs/results/search-benchmarks.md, "A lean /search"); its errors are the handlers' (`ERROR_STATUS`). A body
    that is not a JSON `SearchRequest` goes on to the route, replayed, for FastAPI's own 422."""

    def __init__(self, app, state):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/search" \
                or not json_content(scope["headers"]):
            await self.app(scope, receive, send)
            return
        try:
            raw = await _read_body(receive)
        except HTTPException as exc:  # BodyLimit's, raised while reading
            response = await http_exception_handler(None, exc)  # type: ignore[arg-type]  (it reads no request)
            await response(scope, receive, send)
            return
        if raw is None:  # the client went away
            return
        try:
            check_lists(raw)  # before parsing: millions of tiny lists cost a gigabyte to parse
            data = json.loads(raw)
            check_body(data, models.SearchRequest)  # its list elements and keys, in bounded memory
            body = models.SearchRequest.model_validate(data)
        except RecursionError:  # JSON nested deeper than Python's reader goes ([[[...]]] 100,000 deep)
            await error_response(InputError("the request body nests JSON too deeply to read"), 400)(
                scope, receive, send)
            return
        except BodyErrors as exc:  # a 422 naming the first errors
            await error_response(exc, 422)(scope, receive, send)
            return
        except ValueError:  # not JSON, or not a SearchRequest: the route's 422
            await self.app(scope, _replay(raw, receive), send)
            return
        state = self.state
        try:
            response = await search_response(body, state.store, state.encoder, state.limits, state.batcher,
                                             state.media)
        except tuple(ERROR_STATUS) as exc:
            response = error_response(exc, next(s for kind, s in ERROR_STATUS.items() if isinstance(exc, kind)))
        await response(scope, receive, send)


async def _read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(raw: bytes, receive):
    first = [{"type": "http.request", "body": raw, "more_body": False}]

    async def replayed():
        return first.pop() if first else await receive()
    return replayed
