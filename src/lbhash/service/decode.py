"""Decoding the service's requests into arrays: hex codes, JSON feature rows, comma-separated
ids, uploaded files, and the queries of a search (codes, or the attached run's encoding of
features or images; with their real outputs when the search re-ranks).

`state` is the app's state (`app.state`): `store`, `searcher` (None without a run attached)
and `limits`. Every refusal is a one-line InputError (HTTP 400).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from lbhash.errors import InputError, TooLarge
from lbhash.index import Searcher
from lbhash.index.rerank import check_real
from lbhash.index.searcher import codes_of
from lbhash.limits import MAX_IMAGE_PIXELS, MAX_REQUEST_PIXELS, check_ids
from lbhash.service import models


def check_batch(limits, n: int, what: str) -> None:
    if n == 0:
        raise InputError(f"no {what} given")
    if n > limits.max_batch:
        raise InputError(f"at most {limits.max_batch} {what} per request, got {n}")


def need_searcher(searcher: Searcher | None, kind: str) -> Searcher:
    """The attached run, which must encode `kind` ("features" or "images")."""
    if searcher is None:
        raise InputError(f"{kind} need a run attached to the service (lbhash serve --run RUN_DIR)")
    if searcher.input_kind != kind:
        raise InputError(f"the attached run encodes {searcher.input_kind}, not {kind}")
    return searcher


def to_codes(state, hex_codes, features, what: str) -> np.ndarray:
    """Packed codes of a request that gives `hex_codes` or `features` (encoded by the run)."""
    if (hex_codes is None) == (features is None):
        raise InputError(f"give {what} as exactly one of 'codes' and 'features'")
    check_batch(state.limits, len(hex_codes if features is None else features), what)
    if hex_codes is not None:
        return decode_hex(hex_codes, state.store.bits)
    return need_searcher(state.searcher, "features").encode(feature_rows(features), json_numbers=True)


def reranked_queries(state, body: models.SearchRequest) -> tuple[np.ndarray, np.ndarray]:
    """(codes, real outputs) of a search that re-ranks: `real` beside `codes`, or the attached
    run's outputs for `features` (one forward pass gives both)."""
    if body.real is not None:
        if body.codes is None:
            raise InputError("'real' goes with 'codes' (with 'features', rerank_factor alone asks the attached "
                             "run for the real outputs)")
        codes = to_codes(state, body.codes, body.features, "queries")
        if len(body.real) != len(codes):
            raise InputError(f"real has {len(body.real)} rows but there are {len(codes)} queries")
        try:
            real = np.asarray(body.real, dtype=np.float64)
        except ValueError:
            raise InputError("real must be lists of numbers of one length") from None
        return codes, check_real(real, len(codes), state.store.bits, "real")
    if body.features is None:
        raise InputError("rerank_factor needs the queries' real outputs: 'real' beside 'codes', or "
                         "'features' with a run attached")
    check_batch(state.limits, len(body.features), "queries")
    real = need_searcher(state.searcher, "features").embed(feature_rows(body.features), json_numbers=True)
    return codes_of(real), real


def encode_images(searcher: Searcher, blobs: list[bytes], names: list[str],
                  real: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(codes, real outputs, or None when real=False) of uploaded image files."""
    images = searcher.decode_images(blobs, names)
    if not real:
        return searcher.encode(images), None
    outputs = searcher.embed(images)
    return codes_of(outputs), outputs


def read_uploads(files) -> tuple[list[bytes], list[str]]:
    """The bytes and names of uploaded files ("upload" for a file sent without a name), whose
    pixels are within the budgets (`check_pixels`)."""
    blobs, names = [f.file.read() for f in files], [f.filename or "upload" for f in files]
    check_pixels(blobs, names)
    return blobs, names


def check_pixels(blobs: list[bytes], names: list[str], per_image: int = MAX_IMAGE_PIXELS,
                 per_request: int = MAX_REQUEST_PIXELS) -> None:
    """Width x height of each image, read from its header before anything decodes it: at most
    `per_image` each and `per_request` together, else TooLarge (413). A PNG of 100 KB can
    declare 6000 x 6000 pixels, 108 MB once decoded. Files that do not open are left to the
    decoder, whose error names them."""
    total = 0
    for k, (blob, name) in enumerate(zip(blobs, names)):
        try:
            with Image.open(io.BytesIO(blob)) as im:  # reads the header, decodes nothing
                width, height = im.size
        except Image.DecompressionBombError:
            raise TooLarge(f"files[{k}] ({name}) declares more pixels than Pillow opens") from None
        except (OSError, SyntaxError, ValueError):
            continue
        if width * height > per_image:
            raise TooLarge(f"files[{k}] ({name}) has {width} x {height} pixels; the service decodes images of at "
                           f"most {per_image:,} pixels (lbhash.limits.MAX_IMAGE_PIXELS)")
        total += width * height
        if total > per_request:
            raise TooLarge(f"files[0..{k}] hold {total:,} pixels together; one request may hold at most "
                           f"{per_request:,} (lbhash.limits.MAX_REQUEST_PIXELS)")


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


def parse_ids(text: str, name: str, allow_empty: bool = False, check=check_ids) -> list[int]:
    """Comma-separated integers of a form field, checked by `check`: item ids (`check_ids`) or
    class ids (`check_class_ids`)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise InputError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not values and not allow_empty:
        raise InputError(f"{name} must list at least one integer")
    return check(values, name)
