"""Validation at the edge of the evaluation API, and conversion to the kernels' layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from lbhash.codes import as_packed, as_words
from lbhash.cpus import num_threads
from lbhash.labels import as_multihot_pair
from lbhash.errors import InputError


@dataclass
class Retrieval:
    """Queries and database in kernel layout, with labels both as bitmask words and multi-hot."""

    bits: int
    db_packed: np.ndarray    # (n, bytes) uint8, for the lower bound
    q_words: np.ndarray      # (nq, w) uint64
    db_t: np.ndarray         # (w, n) uint64, word-major
    q_label_words: np.ndarray   # (nq, lw) uint64
    db_label_words: np.ndarray  # (n, lw) uint64
    db_label_words_t: np.ndarray  # (lw, n) uint64, word-major
    q_labels: np.ndarray     # (nq, C) bool
    db_labels: np.ndarray    # (n, C) bool
    q_class: np.ndarray      # (nq,) class ids when every item has exactly one label, else empty
    db_class: np.ndarray     # (n,)

    @property
    def n_query(self) -> int:
        return len(self.q_words)

    @property
    def n_db(self) -> int:
        return self.db_t.shape[1]


def prepare(query_codes, db_codes, query_labels, db_labels, bits=None) -> Retrieval:
    q, bits_q = as_packed(query_codes, bits, "query_codes")
    d, bits_d = as_packed(db_codes, bits, "db_codes")
    if bits_q != bits_d:
        raise InputError(f"query_codes has {bits_q} bits but db_codes has {bits_d}")
    if len(q) == 0:
        raise InputError("query_codes is empty (0 queries)")
    if len(d) == 0:
        raise InputError("db_codes is empty (0 database items)")
    ql, dl = as_multihot_pair(query_labels, db_labels, ("query_labels", "db_labels"))
    if len(ql) != len(q):
        raise InputError(f"query_labels has {len(ql)} rows but query_codes has {len(q)}")
    if len(dl) != len(d):
        raise InputError(f"db_labels has {len(dl)} rows but db_codes has {len(d)}")
    db_label_words = label_words(dl)
    return Retrieval(
        bits=bits_q,
        db_packed=d,
        q_words=as_words(q),
        db_t=np.ascontiguousarray(as_words(d).T),
        q_label_words=label_words(ql),
        db_label_words=db_label_words,
        db_label_words_t=np.ascontiguousarray(db_label_words.T),
        q_labels=ql,
        db_labels=dl,
        **dict(zip(("q_class", "db_class"), class_ids(ql, dl))),
    )


def class_ids(*multihots: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each row's one class id (the narrowest unsigned type) when every row of every array has
    exactly one label, so that relevance is one comparison; else empty arrays."""
    if not all(m.shape[1] > 0 and bool((m.sum(axis=1) == 1).all()) for m in multihots):
        return tuple(np.empty(0, np.uint8) for _ in multihots)
    classes = multihots[0].shape[1]
    dtype = np.uint8 if classes <= 256 else np.uint16 if classes <= 65536 else np.uint32
    return tuple(m.argmax(axis=1).astype(dtype) for m in multihots)


def label_words(multihot: np.ndarray) -> np.ndarray:
    """Multi-hot rows as uint64 bitmasks: two items share a label iff their AND is non-zero."""
    if multihot.shape[1] == 0:
        return np.zeros((len(multihot), 1), dtype=np.uint64)
    return as_words(np.packbits(multihot, axis=1, bitorder="little"))


def check_topk(topk, n_db: int) -> int:
    """Number of ranked items to use: None means the whole database; more is capped at it."""
    if topk is None:
        return n_db
    if isinstance(topk, bool) or not isinstance(topk, (int, np.integer)):
        raise InputError(f"topk must be a positive integer or None (whole database), got {topk!r}")
    if topk <= 0:
        raise InputError(f"topk must be a positive integer or None (whole database), got {topk}")
    return int(min(topk, n_db))


def check_ks(ks) -> np.ndarray:
    """Rank cut-offs K of P@K: a non-empty list of positive integers."""
    arr = np.asarray(ks)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu" or (arr <= 0).any():
        raise InputError(f"ks must be a non-empty list of positive integers, got {list(np.ravel(ks))!r}")
    return arr


def check_percentile(value) -> float:
    if not (isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
            and 50 <= value <= 100):
        raise InputError(f"percentile must be a number in [50, 100], got {value!r}")
    return float(value)


def for_query_ranges(n: int, work: Callable[[int, int], None]) -> None:
    """Call work(start, stop) over ranges covering [0, n), in `num_threads()` parallel threads."""
    from lbhash.ranking import for_query_ranges as in_threads  # numba: only once a metric runs

    in_threads(n, work, num_threads())
