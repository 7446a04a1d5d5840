"""Items' images in the service: where each came from, thumbnails, and the images it keeps.

`ItemMedia(store)` reads the index's sources record (lbhash.indexes.origins) and the images added
through the service (lbhash.serving.uploads). Thumbnails are decoded within bounds (THUMBNAIL_*,
MAX_IMAGE_PIXELS, the shared PixelBudget; 429 after 5 s) and cached (LRU). A store without an
index directory (Milvus) has no images.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict

import numpy as np

from lbhash import limits as table
from lbhash.errors import InputError, NotFound, one_line
from lbhash.indexes.origins import DataImages, read_sources, thumbnail_png
from lbhash.serving.uploads import KeptImages, item_origin, media_dir_for
from lbhash.service.decode import PixelBudget

WAIT_S = 5.0


class TooBusy(Exception):
    """More thumbnail decodes than the service's rate allows (HTTP 429)."""


class DecodeGate:
    """At most `slots` decodes at once and `rate` per second (a token bucket of `rate`); a
    decode waits at most `wait_s` for its turn, then TooBusy."""

    def __init__(self, rate: float, slots: int, wait_s: float = WAIT_S, clock=time.monotonic):
        self.rate, self.clock, self.wait_s = float(rate), clock, wait_s
        self.tokens, self.stamp = float(rate), clock()
        self.slots = threading.BoundedSemaphore(slots)
        self.lock = threading.Lock()

    def _take(self, deadline: float) -> None:
        while True:
            with self.lock:
                now = self.clock()
                self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.rate
            if now + wait > deadline:
                raise TooBusy(f"more than {self.rate:g} thumbnail decodes per second; retry shortly")
            time.sleep(wait)

    @contextlib.contextmanager
    def turn(self):
        deadline = self.clock() + self.wait_s
        self._take(deadline)
        if not self.slots.acquire(timeout=max(0.0, deadline - self.clock())):
            raise TooBusy(f"{table.THUMBNAIL_DECODERS} thumbnails are being decoded; retry shortly")
        try:
            yield
        finally:
            self.slots.release()


class ThumbnailCache:
    """Thumbnails by key ((id, side) in the service), at most `limit` bytes in all (least
    recently used dropped first)."""

    def __init__(self, limit: int):
        self.limit, self.size, self.items = limit, 0, OrderedDict()
        self.lock = threading.Lock()
        self.generation = 0  # bumped by every change: a thumbnail made before one is not cached

    def get(self, key) -> bytes | None:
        with self.lock:
            blob = self.items.get(key)
            if blob is not None:
                self.items.move_to_end(key)
            return blob

    def put(self, key, blob: bytes, generation: int) -> None:
        with self.lock:
            if generation != self.generation or len(blob) > self.limit:
                return
            self.size += len(blob) - len(self.items.pop(key, b""))
            self.items[key] = blob
            while self.size > self.limit:
                _, old = self.items.popitem(last=False)
                self.size -= len(old)

    def drop(self, keys) -> None:
        with self.lock:
            self.generation += 1
            for key in keys:
                self.size -= len(self.items.pop(key, b""))


class ItemMedia:
    """Sources and thumbnails of a store's items, and the images added through the service."""

    def __init__(self, store, rate: float = table.THUMBNAIL_DECODES_PER_S, slots: int = table.THUMBNAIL_DECODERS,
                 cache_bytes: int = table.THUMBNAIL_CACHE_BYTES, max_image_bytes: int = table.MAX_IMAGE_BYTES,
                 budget: int = table.MEDIA_BUDGET_BYTES, decoding: PixelBudget | None = None):
        self.store, self.max_image_bytes = store, max_image_bytes
        self.decoding = decoding  # the service's budget of pixels decoded at once (None: no budget)
        index_dir = store.index_dir
        self.record = read_sources(store.index) if index_dir is not None else None
        self.kept = KeptImages(media_dir_for(index_dir), budget=budget) if index_dir is not None else None
        self.data = DataImages(self.record) if self.record else None  # no sources (feature data): no images
        if self.data is not None:  # load the data set now, in the background: the first page is quick
            threading.Thread(target=self.data.warm, name="lbhash-sources", daemon=True).start()
        self.gate, self.cache = DecodeGate(rate, slots), ThumbnailCache(cache_bytes)
        self.changing = threading.Lock()  # a change of the store and of its images, one at a time

    def usage(self) -> dict | None:
        """Bytes of the kept uploads and their budget (None for a store that keeps none)."""
        return None if self.kept is None else {"bytes": self.kept.used, "budget": self.kept.budget}

    def origin(self, item_id: int) -> tuple[str | None, str | None]:
        """(source shown for the item, "upload" | "data" | None: where its image is read)."""
        return item_origin(item_id, self.record, self.kept)

    def thumbnail(self, item_id: int, side: int = table.THUMBNAIL_SIDE) -> bytes:
        """A PNG of the item's image, its longer side at most `side` (THUMBNAIL_SIDE or VIEW_SIDE)."""
        self.store.get(np.array([item_id], np.int64))  # NotFound (404) for an id not in the index
        cached = self.cache.get((item_id, side))
        if cached is not None:
            return cached
        generation = self.cache.generation
        source, how = self.origin(item_id)
        try:  # an image that cannot be read or decoded: the item has none to show (404, the reason)
            kept = self.kept.read(item_id) if how == "upload" else None  # None: deleted or replaced meanwhile
            if how is None or (how == "upload" and kept is None):
                raise NotFound(f"item {item_id} has no image (no source recorded for it)")
            image = kept[1] if kept is not None else self.data.read(item_id)  # the first read loads the data set
            with self.gate.turn():
                blob = thumbnail_png(image, source, side, decoding=self.decoding)
        except NotFound:
            raise
        except InputError as err:
            raise NotFound(str(err)) from None
        except OSError as err:  # the item's file, whatever became of it, is its own 404, never a 500
            raise NotFound(f"item {item_id}: cannot read its image ({one_line(err)})") from None
        self.cache.put((item_id, side), blob, generation)
        return blob

    # --- changes (the service calls these around its store's changes) ----------------------

    def check_uploads(self, blobs: list[bytes], names: list[str]) -> None:
        for k, (blob, name) in enumerate(zip(blobs, names)):
            if len(blob) > self.max_image_bytes:
                raise InputError(f"files[{k}] ({name}) has {len(blob)} bytes; the service keeps images of at most "
                                 f"{self.max_image_bytes} bytes (lbhash.limits.MAX_IMAGE_BYTES)")

    def _forget(self, ids) -> None:
        """Only ids with an image to lose are written down: other changes cost no disk write."""
        ids = [int(i) for i in ids]
        if self.kept is not None:
            self.kept.forget([i for i in ids if self.origin(i)[1] is not None])
        self.cache.drop(_sizes_of(ids))

    @contextlib.contextmanager
    def removing(self, ids):
        """Around a store's removal: the items' images are forgotten (fsynced) first."""
        with self.changing:
            self._forget(ids)
            yield

    @contextlib.contextmanager
    def adding(self, ids=None, upsert: bool = False, blobs=None, names=None):
        """Around a store's add: `with media.adding(...) as done: ids = store.add(...); done(ids)`.
        Uploaded images are staged (fsynced) before the add and named after their ids after it."""
        if blobs is not None:
            self.check_uploads(blobs, names)
        staged = [] if self.kept is None or blobs is None else self.kept.stage(blobs, names)
        finished = []
        with self.changing:
            try:
                if upsert and ids is not None:
                    self._forget(ids)  # the replaced items' images are no longer theirs
                yield finished.extend
            except BaseException:
                if staged:
                    self.kept.discard(staged)
                raise
            if staged:
                self.kept.commit(staged, finished)
                self.cache.drop(_sizes_of(finished))


def _sizes_of(ids) -> list[tuple[int, int]]:
    """The cache keys of the items' images, in every size served."""
    return [(int(i), side) for i in ids for side in (table.THUMBNAIL_SIDE, table.VIEW_SIDE)]
