"""The HTTP service: `create_app(index_dir_or_store, encoder=None)` -> a FastAPI app.

Endpoints: POST /search, POST /search/image, POST /items, POST /items/image,
GET /items/{id}, DELETE /items/{id}, GET /health, GET /stats (OpenAPI at /docs); the search
page at / and its helpers (lbhash.service.page: /about, /sources, /items/{id}/image, /encode).
Bad input is a 4xx with {"detail": one line}: 400 bad values, 404 unknown id, 409 id taken,
413 body too large, 422 malformed request. Nothing else leaks: a bug is a bare 500.
Searches may re-rank their Hamming top k * rerank_factor by the queries' real-valued outputs
(lbhash.index.rerank); the hits then carry a `score`.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from fastapi import FastAPI, File, Form, HTTPException, Path as PathParam, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lbhash import limits as table
from lbhash.errors import InputError
from lbhash.index import RERANK_FACTOR, Searcher
from lbhash.index.rerank import check_real
from lbhash.index.searcher import codes_of
from lbhash.limits import MAX_ID, check_class_ids, check_ids, check_k
from lbhash.service import models
from lbhash.service.media import ItemMedia
from lbhash.service.page import add_page
from lbhash.service.store import Conflict, IndexStore, NotFound, lists_to_labels

logger = logging.getLogger("lbhash")


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


def create_app(source, encoder=None, *, limits: Limits | None = None, compact_every: int = 1000) -> FastAPI:
    """`source`: an index directory (served with a write-ahead log beside it) or a store
    (`IndexStore`, `MilvusStore`). `encoder` (from a run) enables feature and image queries."""
    limits = limits or Limits()
    store = source if hasattr(source, "search") else IndexStore(Path(source), compact_every=compact_every)
    searcher = Searcher(store, encoder) if encoder is not None else None

    @asynccontextmanager
    async def lifespan(app):
        yield
        store.close()  # compacts: the log is folded into the saved index

    app = FastAPI(title="lbhash search", lifespan=lifespan, docs_url=None, redoc_url=None,  # offline: page.py
                  description="Hamming search over packed binary codes (docs/search.md).")
    app.state.store = store
    media = ItemMedia(store)  # sources, thumbnails and the images added here (NAME.media/ beside the index)
    _install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)

    def check_batch(n: int, what: str) -> None:
        if n == 0:
            raise InputError(f"no {what} given")
        if n > limits.max_batch:
            raise InputError(f"at most {limits.max_batch} {what} per request, got {n}")

    def check_labels(lists):
        if lists is not None:
            for row in lists:
                check_class_ids(row, "labels")
                if any(c > limits.max_class_id for c in row):
                    raise InputError(f"labels must be class ids between 0 and {limits.max_class_id}, "
                                     f"got {max(row)}")
        return lists

    def to_codes(hex_codes, features, what: str) -> np.ndarray:
        if (hex_codes is None) == (features is None):
            raise InputError(f"give {what} as exactly one of 'codes' and 'features'")
        check_batch(len(hex_codes if features is None else features), what)
        if hex_codes is not None:
            return decode_hex(hex_codes, store.bits)
        return need_searcher("features").encode(feature_rows(features), json_numbers=True)

    def need_searcher(kind: str) -> Searcher:
        if searcher is None:
            raise InputError(f"{kind} need a run attached to the service (lbhash serve --run RUN_DIR)")
        if searcher.input_kind != kind:
            raise InputError(f"the attached run encodes {searcher.input_kind}, not {kind}")
        return searcher

    def run_search(codes, k, radius, label_lists, real=None, factor=None) -> models.SearchResponse:
        if k is not None and radius is not None:
            raise InputError("give either k or radius, not both")
        if real is not None and radius is not None:
            raise InputError("re-ranking orders a top k: give k, not radius, with 'real' or 'rerank_factor'")
        k = 10 if k is None and radius is None else k
        if k is not None:
            check_k(k, "k", limits.max_k)
        filters = None
        if label_lists is not None:
            filters = lists_to_labels(check_labels(label_lists), len(codes))
        if real is None:
            rows = store.search(codes, k=k, radius=radius, labels=filters)
            return models.SearchResponse(results=[
                models.QueryResult(hits=[models.Hit(id=i, distance=d, labels=lab) for d, i, lab in zip(*row)])
                for row in rows])
        factor = RERANK_FACTOR if factor is None else factor
        if k * factor > limits.max_rerank_candidates:
            raise InputError(f"k * rerank_factor must be at most {limits.max_rerank_candidates} (Hamming candidates "
                             f"re-ranked per query), got {k} * {factor} = {k * factor}")
        rows = store.rerank(codes, k, real, filters, factor)
        return models.SearchResponse(results=[
            models.QueryResult(hits=[models.Hit(id=i, distance=d, labels=lab, score=sc)
                                     for d, i, lab, sc in zip(*row)])
            for row in rows])

    def reranked_queries(body: models.SearchRequest):
        """(codes, real outputs) of a request that re-ranks: `real` beside `codes`, or the
        attached run's outputs for `features` (one forward pass gives both)."""
        if body.real is not None:
            if body.codes is None:
                raise InputError("'real' goes with 'codes' (with 'features', rerank_factor alone asks the attached "
                                 "run for the real outputs)")
            codes = to_codes(body.codes, body.features, "queries")
            if len(body.real) != len(codes):
                raise InputError(f"real has {len(body.real)} rows but there are {len(codes)} queries")
            try:
                real = np.asarray(body.real, dtype=np.float64)
            except ValueError:
                raise InputError("real must be lists of numbers of one length") from None
            return codes, check_real(real, len(codes), store.bits, "real")
        if body.features is None:
            raise InputError("rerank_factor needs the queries' real outputs: 'real' beside 'codes', or "
                             "'features' with a run attached")
        check_batch(len(body.features), "queries")
        real = need_searcher("features").encode(feature_rows(body.features), real=True, json_numbers=True)
        return codes_of(real), real

    @app.post("/search", response_model=models.SearchResponse, response_model_exclude_none=True,
              responses=_ERRORS)
    def search(body: models.SearchRequest):
        if body.real is None and body.rerank_factor is None:
            return run_search(to_codes(body.codes, body.features, "queries"), body.k, body.radius, body.labels)
        codes, real = reranked_queries(body)
        return run_search(codes, body.k, body.radius, body.labels, real, body.rerank_factor)

    @app.post("/search/image", response_model=models.SearchResponse, response_model_exclude_none=True,
              responses=_ERRORS)
    def search_image(files: list[UploadFile] = File(...), k: int | None = Form(None, ge=1),
                     radius: int | None = Form(None, ge=0), labels: str | None = Form(None),
                     rerank_factor: int | None = Form(None, ge=1)):
        """Query with uploaded image files; `labels`: comma-separated class ids for every query;
        `rerank_factor`: re-rank the Hamming top k * rerank_factor by the images' real outputs."""
        check_batch(len(files), "images")
        searcher_ = need_searcher("images")
        blobs, names = [f.file.read() for f in files], [f.filename or "upload" for f in files]
        label_lists = None if labels is None else [parse_ids(labels, "labels")] * len(files)
        if rerank_factor is None:
            return run_search(searcher_.encode_image_files(blobs, names), k, radius, label_lists)
        real = searcher_.encode_image_files(blobs, names, real=True)
        return run_search(codes_of(real), k, radius, label_lists, real, rerank_factor)

    @app.post("/items", response_model=models.ItemsResponse, responses=_ERRORS)
    def add_items(body: models.ItemsRequest):
        codes = to_codes(body.codes, body.features, "items")
        labels = None if body.labels is None else lists_to_labels(check_labels(body.labels), len(codes))
        given_ids = None if body.ids is None else check_ids(body.ids, "ids")
        with media.adding(given_ids, body.upsert) as done:
            ids, seq = store.add(codes, ids=given_ids, labels=labels, upsert=body.upsert)
            done(ids)
        return models.ItemsResponse(ids=np.asarray(ids).tolist(), seq=seq, ntotal=store.ntotal)

    @app.post("/items/image", response_model=models.ItemsResponse, responses=_ERRORS)
    def add_images(files: list[UploadFile] = File(...), ids: str | None = Form(None),
                   labels: str | None = Form(None), upsert: bool = Form(False)):
        """Add uploaded images; `ids` comma-separated; `labels` per image, separated by ';'
        (e.g. "1,2;0")."""
        check_batch(len(files), "images")
        blobs, names = [f.file.read() for f in files], [f.filename or "upload" for f in files]
        media.check_uploads(blobs, names)
        codes = need_searcher("images").encode_image_files(blobs, names)
        label_lists = None if labels is None else [parse_ids(part, "labels", allow_empty=True)
                                                   for part in labels.split(";")]
        item_labels = None if label_lists is None else lists_to_labels(check_labels(label_lists), len(codes))
        given_ids = None if ids is None else parse_ids(ids, "ids")
        with media.adding(given_ids, upsert, blobs, names) as done:  # the images are kept for thumbnails
            added, seq = store.add(codes, ids=given_ids, labels=item_labels, upsert=upsert)
            done(added)
        return models.ItemsResponse(ids=np.asarray(added).tolist(), seq=seq, ntotal=store.ntotal)

    @app.get("/items/{item_id}", response_model=models.Item, responses=_ERRORS)
    def get_item(item_id: int = PathParam(..., ge=0, le=MAX_ID)):
        codes, labels = store.get(np.array([item_id], np.int64))
        return models.Item(id=item_id, code=codes[0].tobytes().hex(), labels=labels[0])

    @app.delete("/items/{item_id}", response_model=models.DeleteResponse, responses=_ERRORS)
    def delete_item(item_id: int = PathParam(..., ge=0, le=MAX_ID)):
        with media.removing([item_id]):
            seq = store.remove(np.array([item_id], np.int64))
        return models.DeleteResponse(id=item_id, seq=seq, ntotal=store.ntotal)

    @app.get("/health", response_model=models.Health)
    def health():
        return models.Health(status="ok", ntotal=store.ntotal)

    @app.get("/stats", response_model=models.Stats)
    def stats():
        return models.Stats(**store.stats(), input_kind=None if searcher is None else searcher.input_kind,
                            limits=asdict(limits))

    add_page(app, store, searcher, media, limits, feature_rows)
    return app


_ERRORS = {code: {"model": models.ErrorBody} for code in (400, 404, 409, 413, 422)}


def feature_rows(features: list[list[int | float]]) -> np.ndarray:
    """JSON feature rows as an array: int64 when every number is an integer (stored values for a
    run trained on quantised features), else float64."""
    try:
        rows = np.asarray(features)
    except (ValueError, OverflowError):
        raise InputError("features must be lists of numbers of one length") from None
    if rows.ndim != 2 or rows.dtype.kind not in "iuf":
        raise InputError("features must be lists of numbers of one length")
    return rows


def decode_hex(hex_codes: list[str], bits: int) -> np.ndarray:
    width = bits // 8
    out = np.empty((len(hex_codes), width), np.uint8)
    for row, text in enumerate(hex_codes):
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise InputError(f"codes[{row}] is not a hex string") from None
        if len(raw) != width:
            raise InputError(f"codes[{row}] has {len(raw)} bytes, but the index holds {bits}-bit codes "
                             f"({2 * width} hex digits)")
        out[row] = np.frombuffer(raw, np.uint8)
    return out


def parse_ids(text: str, name: str, allow_empty: bool = False) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise InputError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not values and not allow_empty:
        raise InputError(f"{name} must list at least one integer")
    return check_ids(values, name)


def _install_error_handlers(app: FastAPI) -> None:
    def one_line(status: int):
        async def handler(request: Request, exc: Exception):
            return JSONResponse({"detail": " ".join(str(exc).split())}, status_code=status)
        return handler

    app.add_exception_handler(NotFound, one_line(404))
    app.add_exception_handler(Conflict, one_line(409))
    app.add_exception_handler(InputError, one_line(400))

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
