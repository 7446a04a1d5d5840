"""Decoding the service's requests into arrays: hex codes, JSON feature rows, comma-separated
ids, uploaded files, and a search request's checked `Search`. Every refusal is a one-line InputError (HTTP 400).

Images are decoded within two budgets of pixels, read from their headers: one request's
(`check_pixels`) and the whole service's (`PixelBudget`, shared with the thumbnails), so that
concurrent uploads cannot add up.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time

import numpy as np
from PIL import Image

from lbhash.checks import parse_int_list
from lbhash.codes import from_hex
from lbhash.errors import InputError, TooLarge
from lbhash.limits import IMAGE_FORMATS, MAX_DECODING_PIXELS, MAX_IMAGE_PIXELS, MAX_REQUEST_PIXELS, check_ids
from lbhash.serving.searcher import QueryEncoder, SearchOptions, ranked_queries
from lbhash.serving.requests import Queries, Search, given_embeddings
from lbhash.service import models

WAIT_S = 5.0  # the longest a decode waits for the service's pixel budget


class DecodersBusy(Exception):
    """The service's budget of pixels decoded at once is taken for longer than a decode waits
    (HTTP 503, Retry-After)."""


class PixelBudget:
    """At most `limit` pixels of images being decoded at once, over every request of the
    service: `with budget.hold(pixels, what): decode...` waits up to `wait_s` for room (first
    come, first served), then DecodersBusy; more than `limit` pixels at all is TooLarge (413)."""

    def __init__(self, limit: int = MAX_DECODING_PIXELS, wait_s: float = WAIT_S):
        self.limit, self.wait_s, self.used = int(limit), wait_s, 0
        self._room = threading.Condition()
        self._queue: list[object] = []  # the waiting decodes, in arrival order

    @contextlib.contextmanager
    def hold(self, pixels: int, what: str):
        if pixels > self.limit:
            raise TooLarge(f"{what} holds {pixels:,} pixels; the service decodes at most {self.limit:,} at once "
                           "(max_decoding_pixels)")
        ticket, deadline = object(), time.monotonic() + self.wait_s
        with self._room:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or self.used + pixels > self.limit:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DecodersBusy(f"{what}: {self.used:,} of the service's {self.limit:,} pixels decoded at "
                                           "once (max_decoding_pixels) are in use; retry shortly")
                    self._room.wait(left)
            finally:
                self._queue.remove(ticket)
                self._room.notify_all()
            self.used += pixels
        try:
            yield
        finally:
            with self._room:
                self.used -= pixels
                self._room.notify_all()


def check_batch(limits, n: int, what: str) -> None:
    if n == 0:
        raise InputError(f"no {what} given")
    if n > limits.max_batch:
        raise InputError(f"at most {limits.max_batch} {what} per request, got {n}")


def need_encoder(encoder: QueryEncoder | None, kind: str) -> QueryEncoder:
    """The attached run, which must encode `kind` ("features" or "images")."""
    if encoder is None:
        raise InputError(f"{kind} need a run attached to the service (lbhash serve --run RUN_DIR)")
    if encoder.input_kind != kind:
        raise InputError(f"the attached run encodes {encoder.input_kind}, not {kind}")
    return encoder


def to_codes(body: models.SearchRequest | models.ItemsRequest, what: str, limits, bits: int,
             encoder: QueryEncoder | None, keeps: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(packed codes, embeddings or None) of a request body's hex `codes` (and `embeddings`) or `features`
    (encoded by the run, with their embeddings where `keeps`, the index's embedding width, is set)."""
    hex_codes, features, embeddings = body.codes, body.features, body.embeddings
    if (hex_codes is None) == (features is None):
        raise InputError(f"give {what} as exactly one of 'codes' and 'features'")
    check_batch(limits, len(hex_codes if features is None else features), what)
    if hex_codes is not None:
        codes = from_hex(hex_codes, bits)
        return codes, None if embeddings is None else given_embeddings(embeddings, len(codes), what, keeps)
    if embeddings is not None:
        raise InputError("'embeddings' go with 'codes' (the attached run gives the embeddings of 'features')")
    run = need_encoder(encoder, "features")
    if keeps is None:
        return run.encode(feature_rows(features), json_numbers=True), None
    return run.embeddings(feature_rows(features), json_numbers=True)


def wants_ranking(rescore: bool | None, factor: int | None, looks_like: float | None, radius: int | None,
                  ranks: bool, has_embeddings: bool) -> bool:
    """Whether a search is ranked (lbhash.index.blend): as asked (`rescore`, or a `rescore_factor` or
    `looks_like` given), else by default where the index keeps embeddings or instance codes (`ranks`)
    and the queries can have embeddings, for a top k."""
    asked = factor is not None or looks_like is not None
    if rescore is False:
        if asked:
            raise InputError("rescore_factor and looks_like go with a ranked search; with rescore false the order "
                             "is Hamming's")
        return False
    if rescore is None and not asked:
        return ranks and radius is None and has_embeddings
    if not ranks:
        raise InputError("the index keeps neither embeddings nor instance codes, so it cannot rank: search in "
                         "Hamming order (rescore false), or build the index with them")
    return True


def decode_search(body: models.SearchRequest, limits, bits: int, encoder: QueryEncoder | None,
                  keeps: int | None = None, transform=None) -> Search:
    """The checked `Search` of a /search body: its codes or its features' codes, with what a ranked
    search needs where it is ranked (`wants_ranking`; `keeps`: the index's embedding width, None
    where it keeps none; `transform`: its instance transform, None where it keeps no instance codes)."""
    given = body.embeddings is not None or (body.features is not None and encoder is not None
                                            and encoder.gives_embeddings)
    asked = body.rescore if body.rescore is not None or body.embeddings is None else True  # embeddings ask for it
    ranked = wants_ranking(asked, body.rescore_factor, body.looks_like, body.radius,
                           keeps is not None or transform is not None, given)
    if body.embeddings is not None and not ranked:
        raise InputError("'embeddings' are for a ranked search, which this search is not")
    if ranked and body.codes is not None and body.embeddings is None:
        raise InputError("a ranked search needs the queries' embeddings: 'embeddings' beside 'codes', or 'features' "
                         "with a run attached (or rescore false)")
    # the queries' embeddings as the model gives them: the transform's width (its rows may be another's)
    width = (transform.dim if transform is not None else keeps) if ranked else None
    codes, emb = to_codes(body, "queries", limits, bits, encoder, width)  # (the features' embeddings only where ranked)
    queries = ranked_queries(codes, emb, keeps is not None, transform) if ranked else Queries(codes)
    options = SearchOptions(body.k, body.radius, body.rescore_factor, body.looks_like)
    return Search.checked(limits, queries, options, body.labels, ranked)


def read_uploads(files) -> tuple[list[bytes], list[str], int]:
    """(bytes, names ("upload" where a file has none), pixels together) of uploaded files, whose
    pixels are within a request's budgets (`check_pixels`)."""
    blobs, names = [f.file.read() for f in files], [f.filename or "upload" for f in files]
    return blobs, names, check_pixels(blobs, names)


def check_pixels(blobs: list[bytes], names: list[str], per_image: int = MAX_IMAGE_PIXELS,
                 per_request: int = MAX_REQUEST_PIXELS) -> int:
    """The images' pixels together, read from their headers before anything decodes them (a PNG
    of 100 KB can declare 108 MB of pixels): at most `per_image` each and `per_request` together,
    else TooLarge (413). Files that do not open are left to the decoder, whose error names them."""
    total = 0
    for k, (blob, name) in enumerate(zip(blobs, names)):
        try:
            # reads the header, decodes nothing: only the readers of the formats decoded are tried (Pillow's
            # ICO reader decodes on opening); a file in another is refused by the decoder, in one line
            with Image.open(io.BytesIO(blob), formats=IMAGE_FORMATS) as im:
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
    return total


def feature_rows(features: list[list[int | float]]) -> np.ndarray:
    """JSON feature rows as int64 when every number is an integer (stored values of quantised
    features), else float64."""
    try:
        rows = np.asarray(features)
    except (ValueError, OverflowError):
        raise InputError("features must be lists of numbers of one length") from None
    if rows.ndim != 2 or rows.dtype.kind not in "iuf":
        raise InputError("features must be lists of numbers of one length")
    return rows


def parse_ids(text: str, name: str, allow_empty: bool = False, check=check_ids) -> list[int]:
    """Comma-separated integers of a form field, checked by `check` (`check_ids`, `check_class_ids`)."""
    return check(parse_int_list(text, name, allow_empty), name)
