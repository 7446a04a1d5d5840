"""Search limits: one table for the Python API (lbhash.index), `lbhash index`/`lbhash search`
and the HTTP service (docs/indexes.md, "Limits"), and the longest code (`MAX_BITS`). A
bottom-layer module, so that the command line reads it without importing FAISS.

Each limit keeps a mistyped number from turning into a huge allocation, checked before any
work with a one-line InputError naming the value.
"""

from __future__ import annotations

from lbhash.checks import positive_int
from lbhash.errors import InputError

MAX_BITS = 4096             # code length of a run (train --bits) and of centers (lbhash centers --bits)
MAX_K = 1000                # results per query: CLI and service (the Python API allocates what it is asked)
MAX_BATCH = 1024            # queries or items per service request; `lbhash search` works in batches of it
MAX_CLASS_ID = 65535        # class ids of labels and label filters, everywhere
MAX_ID = 2**63 - 1          # item ids are non-negative int64, everywhere
MAX_BODY_BYTES = 16 << 20   # one HTTP request body
MAX_RESCORE_CANDIDATES = 10_000  # k * rescore_factor: Hamming candidates re-scored per query (service)
BATCH_ROWS = 256            # query rows of concurrent /search requests in one shared scan (lbhash serve --batch-rows)
MAX_CONNECTIONS = 256       # open connections and requests in progress (service); beyond it: 503
MAX_HEADER_BYTES = 64 << 10  # request line and headers of one HTTP request (service); beyond it: 400
HEADER_TIMEOUT_S = 10       # a connection's request headers must be complete this long after it opens
KEEP_ALIVE_S = 5            # an idle keep-alive connection is closed after this long
MAX_IMAGE_BYTES = 4 << 20   # one image the service keeps for its thumbnail (POST /items/image)
MEDIA_BUDGET_BYTES = 1 << 30  # the images one index keeps from uploads, together (lbhash serve --media-budget-mb)
MAX_SOURCE_BYTES = 64 << 20  # a thumbnail's source file under an image folder: read up to this, never more
MAX_IMAGE_PIXELS = 40_000_000  # one image, width x height: an upload or a thumbnail's source, read from its header
MAX_REQUEST_PIXELS = 80_000_000  # the images of one upload or image search together (about 240 MB as RGB)
MAX_DECODING_PIXELS = 80_000_000  # images being decoded at once in the whole service (uploads and thumbnails):
#                                   beyond it a decode waits up to 5 s, then 503 (lbhash serve --max-decoding-mpixels)
# the image formats decoded (Pillow's names): each decodes its first frame at the size its header
# gives, which the pixel budgets count; a container of several images (ICO, ICNS, ...) is refused
# before it decodes anything, since the image it decodes need not be the size its header gives
IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF", "PPM")  # (JPEG's reader opens MPO too)
THUMBNAIL_SIDE = 128        # GET /items/{id}/image: the longer side, at most (never enlarged)
VIEW_SIDE = 512             # GET /items/{id}/image?size=large (the page's larger view): the longer side, at most
THUMBNAIL_DECODES_PER_S = 100  # thumbnail decodes per second (a burst of as many); beyond: wait, then 429
THUMBNAIL_DECODERS = 2      # thumbnails decoded at once
THUMBNAIL_CACHE_BYTES = 32 << 20  # the service's cache of thumbnails (least recently used dropped first)
MAX_KEY_FILE_BYTES = 4096   # a key file (lbhash serve --write-key-file): a regular file read up to this, never a stream

TABLE = {"max_k": MAX_K, "max_batch": MAX_BATCH, "max_class_id": MAX_CLASS_ID, "max_id": MAX_ID,
         "max_body_bytes": MAX_BODY_BYTES, "max_rescore_candidates": MAX_RESCORE_CANDIDATES,
         "max_connections": MAX_CONNECTIONS, "max_header_bytes": MAX_HEADER_BYTES,
         "header_timeout_s": HEADER_TIMEOUT_S, "keep_alive_s": KEEP_ALIVE_S,
         "max_decoding_pixels": MAX_DECODING_PIXELS}


def check_k(k: int, name: str = "k", limit: int = MAX_K) -> int:
    k = positive_int(k, name)
    if k > limit:
        raise InputError(f"{name} must be at most {limit}, got {k}")
    return k


def check_class_ids(values, name: str) -> list[int]:
    """Class ids of a label filter or an item, as given on a command line or in a request."""
    return _in_range(values, MAX_CLASS_ID, f"{name} must be class ids between 0 and {MAX_CLASS_ID}")


def check_ids(values, name: str) -> list[int]:
    """Item ids given as Python integers (before they meet an int64 array)."""
    return _in_range(values, MAX_ID, f"{name} must be between 0 and {MAX_ID} (non-negative int64)")


def _in_range(values, top: int, message: str) -> list[int]:
    values = [int(v) for v in values]
    bad = [v for v in values if v < 0 or v > top]
    if bad:
        raise InputError(f"{message}, got {bad[0]}")
    return values
