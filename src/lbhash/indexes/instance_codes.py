"""An index's instance codes as the application layer makes them (docs/instance-codes.md, "Instance codes"):
the transform fitted on a run's training embeddings when `lbhash index build` indexes the run, kept in
the index directory (`instance-transform.npz`, checksummed with its other files, its identity in the
index's metadata), and applied to every embedding that comes in: the items added, the queries.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from lbhash.errors import InputError
from lbhash.index.blend import default_looks_like
from lbhash.instance import (FILE_NAME, INSTANCE_BITS, LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES, LOOKS_LIKE_CODES_LEARNED,
                              LOOKS_LIKE_LEARNED, RECORD_KEY,
                             InstanceTransform, check_instance_bits, mark_rule, mark_summary)

__all__ = ["INSTANCE_BITS", "default_looks_like", "mark_summary", "LOOKS_LIKE", "LOOKS_LIKE_APART", "LOOKS_LIKE_CODES", "LOOKS_LIKE_CODES_LEARNED",
           "LOOKS_LIKE_LEARNED", "ITEM_VIEW_KEY", "attach", "fit_transform", "index_transform", "payload_of"]

logger = logging.getLogger("lbhash")

METADATA_KEY = RECORD_KEY
ITEM_VIEW_KEY = "item_view"  # the metadata of an index whose photos' embeddings include their blurred views
MAX_FIT_ITEMS = 20_000  # training embeddings a transform is fitted on at most (a seeded sample beyond)


def fit_transform(embeddings: np.ndarray, bits: int = INSTANCE_BITS, seed: int = 0, method: str = "itq") -> InstanceTransform:
    """The transform of `bits`-bit instance codes fitted on `embeddings` (at most MAX_FIT_ITEMS of
    them, a seeded sample)."""
    check_instance_bits(bits, embeddings.shape[1])
    if len(embeddings) > MAX_FIT_ITEMS:
        rows = np.sort(np.random.default_rng(seed).choice(len(embeddings), MAX_FIT_ITEMS, replace=False))
        embeddings = embeddings[rows]
    logger.info("instance code: fitting %d bits (%s) on %d embeddings", bits, method, len(embeddings))
    started = time.perf_counter()
    transform = InstanceTransform.fit(embeddings, bits, method, seed=seed)
    logger.info("instance code: fitted in %.1f s", time.perf_counter() - started)
    return transform


def attach(index, transform: InstanceTransform, fitted_on: str) -> None:
    """Keep `transform` in `index` (an attachment, written and checksummed with the index) and its
    identity in the index's metadata."""
    attachments = dict(getattr(index, "attachments", None) or {})
    attachments[FILE_NAME] = transform.to_bytes()
    index.attachments = attachments
    index.metadata[METADATA_KEY] = {"bits": transform.bits, "method": transform.method, "dim": transform.dim,
                                    "sha256": transform.digest(), "fitted_on": fitted_on,
                                    "perceptual_bits": transform.perceptual_bits}


def index_transform(index, where: str = "the index") -> InstanceTransform | None:
    """The instance transform an index keeps (None: it keeps no instance codes), checked against the
    identity its metadata records and the codes it holds; one line otherwise."""
    record = (index.metadata or {}).get(METADATA_KEY)
    blob = (getattr(index, "attachments", None) or {}).get(FILE_NAME)
    bits = index.instance_bits
    if record is None and blob is None and bits is None:
        return None
    if blob is None or not isinstance(record, dict):
        missing = FILE_NAME if blob is None else f"its metadata's {METADATA_KEY!r} record"
        raise InputError(f"{where} keeps instance codes but not {missing}: rebuild it with `lbhash index build`")
    transform = InstanceTransform.from_bytes(blob, f"{where}: {FILE_NAME}")
    if transform.digest() != record.get("sha256"):
        raise InputError(f"{where}: {FILE_NAME} is not the instance transform its instance codes were made with "
                         "(its SHA-256 differs from the metadata's): rebuild the index")
    if transform.bits != bits:
        raise InputError(f"{where}: its instance transform makes {transform.bits}-bit codes but it holds "
                         f"{bits}-bit instance codes")
    mark = mark_rule(index.metadata, where=where)  # a same-picture record it cannot read is refused on opening
    if mark.perceptual_bits and mark.perceptual_bits != transform.perceptual_bits:
        raise InputError(f"{where}: its same-picture mark reads {mark.perceptual_bits} perceptual bits but its "
                         f"instance codes end in {transform.perceptual_bits}: rebuild the index")
    return transform


def payload_of(transform: InstanceTransform | None, index, embeddings, n: int, what: str, perceptual=None):
    """(the embeddings `index` keeps, the instance codes) of `n` items added with `embeddings` to an
    index with `transform` (None: it keeps no instance codes), and the photos' `perceptual` codes where its
    code keeps them (lbhash.data.perceptual). An index that keeps instance codes but no float rows takes the
    embeddings for its codes only; one that keeps instance codes refuses items without embeddings (or
    without photos, for perceptual bits) in one line."""
    if transform is None:
        return embeddings, None
    if embeddings is None:
        if not n:
            return None, np.empty((0, transform.bits // 8), np.uint8)
        raise InputError(f"the index keeps a {transform.bits}-bit instance code per item, made from its embedding: "
                         f"{what} must give the items' embeddings")
    instance = transform.apply(embeddings, f"{what}: embeddings", perceptual)
    return (None if index.embedding_dim is None else transform.rows(embeddings, f"{what}: embeddings")), instance
