"""The search page at `/`, its JSON helpers, item thumbnails and the offline API docs.

`add_page(app, ...)` adds to a service app:
- `GET /`: the page (lbhash/service/static: plain HTML, JavaScript and CSS, no build step),
  which uses only the JSON API below and the service's own endpoints;
- `GET /about`: the index (backend, kind, bits, size, classes, data) and the run it serves
  (method, bits, data; mAP, lower bound, precision-recall curve from its metrics.json);
- `POST /sources`: where items came from (file, archive member, array row, or upload), and
  their codes (hex);
- `GET /items/{id}/image`: an item's thumbnail (PNG; `?size=large` for the page's larger
  view), from its recorded source only;
- `POST /encode`, `POST /encode/image`: the codes (hex) and real outputs of feature rows or
  image files, through the attached run;
- `GET /docs`, `GET /redoc`: Swagger UI and ReDoc from the assets of the `fastapi-offline`
  package, served here: no request leaves the service.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
from typing import Literal

from fastapi import APIRouter, FastAPI, File, Path as PathParam, Query, Request, UploadFile
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from lbhash.errors import NotFound, one_line
from lbhash.evaluate.formatting import RATIO_SCALE
from lbhash.index.searcher import codes_of
from lbhash.limits import MAX_ID, THUMBNAIL_SIDE, VIEW_SIDE, check_ids
from lbhash.service.decode import check_batch, feature_rows, need_searcher, read_uploads
from lbhash.service.media import TooBusy
from lbhash.service.models import Int, Number

logger = logging.getLogger("lbhash")
STATIC = Path(__file__).resolve().parent / "static"
# the page's modules (page.js imports the others) and its style
PAGE_FILES = {**{name: "text/javascript" for name in ("page.js", "api.js", "dom.js", "charts.js", "cards.js",
                                                      "address.js")}, "page.css": "text/css"}
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


class EncodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    features: list[list[Number]] = Field(description="Feature rows, through the run's input contract.")


class EncodeResponse(BaseModel):
    codes: list[str] = Field(description="Packed codes in hex, as /search takes them.")
    real: list[list[float]] = Field(description="The real outputs whose signs are the codes (/search's 'real').")


class About(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: dict
    run: dict | None
    input_kind: str | None
    limits: dict
    access: dict  # which keys the service asks for (lbhash.service.access), never the keys


def add_page(app: FastAPI) -> None:
    """Add the page, its helpers, thumbnails and offline docs to `app` (see the module doc);
    the handlers read the app's `state`: store, searcher, media and limits."""
    app.add_exception_handler(TooBusy, _too_busy)
    app.include_router(router)
    _add_docs(app)


async def _too_busy(request: Request, exc: TooBusy):
    return JSONResponse({"detail": one_line(exc)}, status_code=429, headers={"Retry-After": "1"})


@router.get("/", include_in_schema=False)
def page():
    return HTMLResponse((STATIC / "index.html").read_text(), headers=_page_headers())


@router.get("/page/{name}", include_in_schema=False)
def page_file(name: str):
    if name not in PAGE_FILES:  # a fixed list: no name from the request reaches the file system
        return JSONResponse({"detail": f"no page file {name!r}"}, status_code=404)
    return Response((STATIC / name).read_bytes(), media_type=PAGE_FILES[name], headers=_page_headers())


@router.get("/about", response_model=About)
def about(request: Request):
    """The index and the run the service serves, for the page's header."""
    state = request.app.state
    index, record, searcher = getattr(state.store, "index", None), state.media.record, state.searcher
    info = {**state.store.stats(), "data": (getattr(index, "metadata", None) or {}).get("data"),
            "sources": 0 if record is None else len(record),
            "class_names": None if record is None else record.class_names,
            "keeps_uploads": state.media.kept is not None}
    return About(index=info, run=run_summary(searcher), input_kind=None if searcher is None else searcher.input_kind,
                 limits=asdict(state.limits), access=state.access.public())


@router.post("/sources", response_model=SourcesResponse, responses=ERRORS)
def sources(body: SourcesRequest, request: Request):
    """Where each item came from, whether it has a thumbnail, and its code."""
    state = request.app.state
    check_batch(state.limits, len(body.ids), "ids")
    items = []
    for item_id in check_ids(body.ids, "ids"):
        source, how = state.media.origin(item_id)
        try:  # an id deleted since the search that named it: no code
            code = state.store.get(np.array([item_id], np.int64))[0][0].tobytes().hex()
        except NotFound:
            code = None
        items.append(ItemSource(id=item_id, source=source, image=how is not None, code=code))
    return SourcesResponse(items=items)


@router.get("/items/{item_id}/image", responses={200: {"content": {"image/png": {}}}, **ERRORS},
            response_class=Response)
def item_image(request: Request, item_id: int = PathParam(..., ge=0, le=MAX_ID),
               size: Literal["small", "large"] = Query("small")):
    """The item's thumbnail: a PNG of at most 128 x 128 pixels (size=large: 512 x 512) decoded
    from its recorded source (or the image it was added with); 404 when it has none."""
    blob = request.app.state.media.thumbnail(item_id, IMAGE_SIDES[size])
    return Response(blob, media_type="image/png", headers={"Cache-Control": "no-cache"})


@router.post("/encode", response_model=EncodeResponse, responses=ERRORS)
def encode(body: EncodeRequest, request: Request):
    """Codes and real outputs of feature rows (one forward pass of the attached run)."""
    state = request.app.state
    check_batch(state.limits, len(body.features), "rows")
    searcher = need_searcher(state.searcher, "features")
    return encoded(searcher.embed(feature_rows(body.features), json_numbers=True))


@router.post("/encode/image", response_model=EncodeResponse, responses=ERRORS)
def encode_image(request: Request, files: list[UploadFile] = File(...)):
    """Codes and real outputs of uploaded image files."""
    state = request.app.state
    check_batch(state.limits, len(files), "images")
    blobs, names = read_uploads(files)
    searcher = need_searcher(state.searcher, "images")
    return encoded(searcher.embed(searcher.decode_images(blobs, names)))


def encoded(real: np.ndarray) -> EncodeResponse:
    codes = codes_of(real)
    return EncodeResponse(codes=[c.tobytes().hex() for c in codes], real=np.asarray(real, np.float64).tolist())


def run_summary(searcher) -> dict | None:
    """The attached run: its method, bits and data, and its quality from metrics.json."""
    info = None if searcher is None else searcher.encoder.run_info()
    return None if info is None else {**info, "lower_bound": _with_scale(info.get("lower_bound"))}


def _with_scale(bound: dict | None) -> dict | None:
    """The run's lower bound with what its ratio means (`scale`, shown beside it)."""
    return None if not isinstance(bound, dict) else {**bound, "scale": RATIO_SCALE}


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
    missing = "the offline API docs need the fastapi-offline package (pip install 'lbhash[serve]')"
    headers = {"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"}

    @app.get("/docs-assets/{name}", include_in_schema=False)
    def docs_asset(name: str):
        if assets is None:
            return JSONResponse({"detail": missing}, status_code=404)
        if name not in DOC_FILES:  # a fixed list: no name from the request reaches the file system
            return JSONResponse({"detail": f"no docs asset {name!r}"}, status_code=404)
        data = (assets / name).read_bytes()
        if name == "redoc.standalone.js":  # its footer logo is an image on Redocly's CDN: ours instead
            data = data.replace(REDOC_LOGO, b"/docs-assets/favicon.png")
        return Response(data, media_type=DOC_FILES[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/docs", include_in_schema=False)
    def swagger():
        if assets is None:
            return JSONResponse({"detail": missing}, status_code=404)
        page = get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url="/docs/oauth2-redirect",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None})
        page.headers.update(headers)
        return page

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_redirect():
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc():
        if assets is None:
            return JSONResponse({"detail": missing}, status_code=404)
        page = get_redoc_html(openapi_url=app.openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url="/docs-assets/redoc.standalone.js",
                              redoc_favicon_url="/docs-assets/favicon.png", with_google_fonts=False)
        page.headers.update(headers)
        return page
