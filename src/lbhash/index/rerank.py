"""Re-ranking a Hamming search by the queries' real-valued outputs (docs/search.md, "Re-ranking").

The index's own search (any kind, any backend, label filters included) returns each query's
top `k * factor` candidates by Hamming distance (fewer when the index holds fewer items); the
candidates are then scored `sum_j r_qj * b_dj` (r the query's real output, b the candidate's
+/-1 code) by `lbhash.evaluate.asymmetric.candidate_scores`, the scoring of asymmetric
evaluation, bit for bit, and the best k are kept: **descending score, ties by ascending id**,
evaluation's rule (ties by database index) when ids are database positions. With enough
candidates to hold every item, an exact (flat) index returns the full asymmetric ranking.

The real outputs are used as given: pass the head's raw u, or np.tanh(u) for the tanh variant.

Re-ranking is this function over a backend, never a mode of the backend's `search`, so that
`search` always returns Hamming distances.
"""

from __future__ import annotations

import numpy as np

from lbhash.errors import InputError
from lbhash.evaluate.asymmetric import CHUNK, candidate_scores, check_query_real
from lbhash.index import _checks
from lbhash.index._padding import PAD_DISTANCE, PAD_ID
from lbhash.index.backend import Backend, Reranked

RERANK_FACTOR = 4  # Hamming candidates per result when a search re-ranks (docs/search.md)


def check_real(real, nq: int, bits: int, name: str = "rerank") -> np.ndarray:
    """The queries' real outputs as float64 (nq, bits): finite, and small enough that every
    score (a sum of bits of them) is finite too."""
    arr = check_query_real(real, nq, bits, name)
    limit = np.finfo(np.float64).max / max(bits, 1)
    big = np.abs(arr) > limit
    if big.any():
        r, c = (int(i) for i in np.argwhere(big)[0])
        raise InputError(f"{name} holds {arr[r, c]!r} at row {r}, column {c}; values must be at most {limit:.3g} "
                         "in magnitude, so that every score stays finite")
    return arr


def candidate_count(k: int, factor: int, ntotal: int) -> int:
    """Hamming candidates to fetch: k * factor, at most the index's size (at least 1)."""
    return max(1, min(k * factor, ntotal))


def rerank_search(index: Backend, queries, k, real, labels=None, factor=RERANK_FACTOR) -> Reranked:
    """Top-k of `index` (any `Backend`; its `check_k` holds the candidates to its cap on
    results, as Milvus has one) re-ranked by `real`.

    Returns `Reranked` (scores float64, distances int32, ids int64), each (nq, k): the
    asymmetric score, the Hamming distance to the query's code and the id of each hit, in
    (descending score, id) order; rows with fewer than k hits are padded with -inf,
    PAD_DISTANCE and PAD_ID.
    """
    k = _checks.top_k(k)
    factor = _checks.rerank_factor(factor)
    queries = _checks.packed_codes(queries, index.bits, "queries")
    real = check_real(real, len(queries), index.bits)
    wanted = candidate_count(k, factor, index.ntotal)
    index.check_k(wanted, f"k * rerank_factor ({wanted} candidates)")
    dist, ids = index.search(queries, wanted, labels)
    return rerank_candidates(real, dist, ids, index.get_codes, k)


def rerank_candidates(real: np.ndarray, dist: np.ndarray, ids: np.ndarray, codes_of, k: int) -> Reranked:
    """Score candidate rows (dist, ids: (nq, c), ids < 0 are padding) and keep the best k.
    `codes_of(unique_ids)` gives their packed codes."""
    nq, c = ids.shape
    out_s = np.full((nq, k), -np.inf)
    out_d = np.full((nq, k), PAD_DISTANCE, np.int32)
    out_i = np.full((nq, k), PAD_ID, np.int64)
    valid = ids >= 0
    if not valid.any():
        return Reranked(out_s, out_d, out_i)
    found = np.unique(ids[valid])
    codes = np.asarray(codes_of(found))
    keep = min(k, c)
    for s in range(0, nq, CHUNK):  # bounded memory: byte tables are (chunk, bytes, 256) float64
        e = min(nq, s + CHUNK)
        ok = valid[s:e]
        where = np.searchsorted(found, np.where(ok, ids[s:e], found[0]))
        scores = candidate_scores(real[s:e], codes[where])
        scores[~ok] = -np.inf  # padding goes last (a real score is finite)
        # ascending (-score, id): a stable order of exactly equal scores by id
        order = np.lexsort((ids[s:e], -scores), axis=1)[:, :keep]
        rows_s = np.take_along_axis(scores, order, 1)
        rows_ok = np.take_along_axis(ok, order, 1)
        out_s[s:e, :keep] = rows_s
        out_d[s:e, :keep] = np.where(rows_ok, np.take_along_axis(dist[s:e], order, 1), PAD_DISTANCE)
        out_i[s:e, :keep] = np.where(rows_ok, np.take_along_axis(ids[s:e], order, 1), PAD_ID)
    return Reranked(out_s, out_d, out_i)
