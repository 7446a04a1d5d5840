"""The search page at `/`, its JSON helpers, item thumbnails and the offline API docs.

`add_page(app, ...)` adds `GET /` (lbhash/service/static, no build step), `GET /about`, `POST
/sources`, `GET /items/{id}/image` and `GET /docs`, `GET /redoc` (served from the assets of
`fastapi-offline`: no request leaves the service).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Literal

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Path as PathParam, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from lbhash.codes import to_hex
from lbhash.errors import NotFound
from lbhash.limits import MAX_ID, THUMBNAIL_SIDE, VIEW_SIDE, check_ids
from lbhash.service.access import reads_data
from lbhash.service.decode import check_batch
from lbhash.service.depends import AccessDep, EncoderDep, LimitsDep, MediaDep, StoreDep
from lbhash.service.media import ItemMedia
from lbhash.service.models import Int
from lbhash.serving.index_store import Store
from lbhash.indexes.instance_codes import default_looks_like, mark_summary
from lbhash.serving.requests import run_summary

logger = logging.getLogger("lbhash")
STATIC = Path(__file__).resolve().parent / "static"
# the page's modules (page.js imports the others) and its style
PAGE_FILES = {**{name: "text/javascript" for name in ("page.js", "api.js", "dom.js", "charts.js", "cards.js",
                                                      "address.js", "duplicates.js")}, "page.css": "text/css"}
IMAGE_SIDES = {"small": THUMBNAIL_SIDE, "large": VIEW_SIDE}
DOC_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
             "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}
REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
# the page asks for nothing but this server; inline scripts only on the docs pages (theirs)
PAGE_CSP = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
            "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
DOCS_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
            "script-src 'self' 'unsafe-inline'; worker-src 'self' blob:; connect-src 'self'; object-src 'none'")
ERRORS = {code: {"description": "one line: {\"detail\": \"...\"}"} for code in (400, 404, 422, 429)}
router = APIRouter()


class SourcesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[Int] = Field(description="Item ids (at most the service's batch size).")


class ItemSource(BaseModel):
    id: int
    source: str | None = Field(description="The item's file, archive member (TARBALL:MEMBER), array row "
                                           "(FILE row N), or 'uploaded: NAME'; null when none is recorded.")
    image: bool = Field(description="Whether GET /items/{id}/image has a thumbnail for it.")
    code: str | None = Field(description="The item's code (hex, as /search takes it); null when the id is "
                                         "not in the index.")


class SourcesResponse(BaseModel):
    items: list[ItemSource]


class About(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: dict
    run: dict | None
    input_kind: str | None
    limits: dict
    access: dict  # which keys the service asks for (lbhash.service.access), never the keys


def add_page(app: FastAPI) -> None:
    """Add the page, its helpers, thumbnails and offline docs to `app` (see the module doc)."""
    app.include_router(router)
    _add_docs(app)


@router.get("/", include_in_schema=False)
def page():
    return HTMLResponse((STATIC / "index.html").read_text(), headers=_page_headers())


@router.get("/page/{name}", include_in_schema=False)
def page_file(name: str):
    if name not in PAGE_FILES:  # a fixed list: no name from the request reaches the file system
        return JSONResponse({"detail": f"no page file {name!r}"}, status_code=404)
    return Response((STATIC / name).read_bytes(), media_type=PAGE_FILES[name], headers=_page_headers())


@router.get("/about", response_model=About)
def about(store: StoreDep, encoder: EncoderDep, limits: LimitsDep, media: MediaDep, access: AccessDep):
    """The index and the run the service serves, for the page's header."""
    record = media.record
    info = {**store.stats(), "data": store.metadata.get("data"), "sources": 0 if record is None else len(record),
            "class_names": None if record is None else record.class_names, "keeps_uploads": media.kept is not None,
            "looks_like": default_looks_like(store.transform is not None, store.index.embedding_dim is not None,
                                             store.transform is not None and store.transform.method == "learned"),
            # the calibrated same-picture mark, or why hits are never marked (docs/instance-codes.md, "The same picture")
            "same_picture": None if store.transform is None else mark_summary(store.metadata)}
    return About(index=info, run=run_summary(encoder), input_kind=None if encoder is None else encoder.input_kind,
                 limits=asdict(limits), access=access.public())


@router.post("/sources", response_model=SourcesResponse, responses=ERRORS, dependencies=[Depends(reads_data)])
def sources(body: SourcesRequest, store: StoreDep, limits: LimitsDep, media: MediaDep):
    """Where each item came from, whether it has a thumbnail, and its code."""
    check_batch(limits, len(body.ids), "ids")
    details = item_details(store, media, check_ids(body.ids, "ids"))
    return SourcesResponse(items=[ItemSource(id=i, **details[i]) for i in body.ids])


def item_details(store: Store, media: ItemMedia, ids: list[int]) -> dict[int, dict]:
    """id -> {"source", "image" (whether it has a thumbnail), "code" (hex; None for an id not
    in the index, such as one deleted since the search that named it)}."""
    ids = sorted(set(ids))
    try:
        codes = dict(zip(ids, to_hex(store.get(np.array(ids, np.int64))[0]))) if ids else {}
    except NotFound:  # (rare) one at a time, to tell which
        codes = {}
        for item_id in ids:
            with contextlib.suppress(NotFound):
                codes[item_id] = to_hex(store.get(np.array([item_id], np.int64))[0])[0]
    origins = {i: media.origin(i) for i in ids}  # (source, how its image is read)
    return {i: {"source": s, "image": how is not None, "code": codes.get(i)} for i, (s, how) in origins.items()}


@router.get("/items/{item_id}/image", responses={200: {"content": {"image/png": {}}}, **ERRORS},
            response_class=Response)
def item_image(media: MediaDep, item_id: int = PathParam(..., ge=0, le=MAX_ID),
               size: Literal["small", "large"] = Query("small")):
    """The item's thumbnail: a PNG of at most 128 x 128 pixels (size=large: 512 x 512) decoded
    from its recorded source (or the image it was added with); 404 when it has none."""
    blob = media.thumbnail(item_id, IMAGE_SIDES[size])
    return Response(blob, media_type="image/png", headers={"Cache-Control": "no-cache"})


def _page_headers() -> dict:
    return {"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def _add_docs(app: FastAPI) -> None:
    """Swagger UI at /docs and ReDoc at /redoc, their assets served here (fastapi-offline)."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html

    try:
        import fastapi_offline
        assets = Path(fastapi_offline.__file__).resolve().parent / "static"
    except ImportError:
        assets = None
    headers = {"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"}

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_redirect():
        return get_swagger_ui_oauth2_redirect_html()

    if assets is None:  # the docs, the ReDoc page and their assets: one answer
        missing = "the offline API docs need the fastapi-offline package (pip install 'lbhash[serve]')"
        for route in ("/docs-assets/{name}", "/docs", "/redoc"):
            app.add_api_route(route, lambda: JSONResponse({"detail": missing}, status_code=404),
                              include_in_schema=False)
        return

    @app.get("/docs-assets/{name}", include_in_schema=False)
    def docs_asset(name: str):
        if name not in DOC_FILES:  # a fixed list: no name from the request reaches the file system
            return JSONResponse({"detail": f"no docs asset {name!r}"}, status_code=404)
        data = (assets / name).read_bytes()
        if name == "redoc.standalone.js":  # its footer logo is an image on Redocly's CDN: ours instead
            data = data.replace(REDOC_LOGO, b"/docs-assets/favicon.png")
        return Response(data, media_type=DOC_FILES[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/docs", include_in_schema=False)
    def swagger():
        page = get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url="/docs/oauth2-redirect",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None})
        page.headers.update(headers)
        return page

    @app.get("/redoc", include_in_schema=False)
    def redoc():
        page = get_redoc_html(openapi_url=app.openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url="/docs-assets/redoc.standalone.js",
                              redoc_favicon_url="/docs-assets/favicon.png", with_google_fonts=False)
        page.headers.update(headers)
        return page
