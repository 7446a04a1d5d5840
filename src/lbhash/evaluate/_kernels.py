"""Numba kernels for ranking by Hamming distance (docs/evaluation.md).

Every kernel handles a chunk of queries against the whole database and releases the GIL, so
chunks run in parallel threads. The ranking itself (a counting sort over distances, ties in
database order) is lbhash.ranking's, which a flat index shares.

Shapes: q_words (nq, w) uint64; db_t (w, n) uint64, word-major so the distance loop
vectorises; label words (., lw) uint64 bitmasks of the multi-hot labels.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from lbhash.ranking import fill_distances, rank_distances


@njit(inline="always", cache=True)
def _relevant(q_lab, db_lab, j):
    for k in range(q_lab.shape[0]):
        if q_lab[k] & db_lab[j, k]:
            return 1
    return 0


@njit(inline="always", cache=True)
def _rank(q_row, db_t, top, dist, hist, masks, cand, offsets, order):
    """Rank the word-major database for one query (lbhash.ranking.rank_distances)."""
    fill_distances(q_row, db_t, dist)
    return rank_distances(dist, top, hist, masks, cand, offsets, order)


@njit(inline="always", cache=True)
def _rank_scratch(db_t, top):
    """The arrays `_rank` works in, for a database of n items: dist, hist, masks, cand, offsets, order."""
    n = db_t.shape[1]
    nbins = 64 * db_t.shape[0] + 1
    return (np.empty(n, np.uint16), np.empty(nbins, np.int64), np.empty(n // 64 + 1, np.uint64),
            np.empty(n, np.int32), np.empty(nbins + 1, np.int64), np.empty(top + 1, np.int64))


@njit(cache=True)
def _group_sums(before, size):
    """h1 = sum_{p=1..size} 1/(before+p) and h2 = sum_{p=1..size} (p-1)/(before+p)."""
    h1 = 0.0
    h2 = 0.0
    for p in range(1, size + 1):
        inv = 1.0 / (before + p)
        h1 += inv
        h2 += (p - 1) * inv
    return h1, h2


@njit(cache=True)
def _group_expected_sum(before, rel_before, size, rel, h1, h2):
    """Expected sum of precisions at the relevant positions of a tie group.

    The group holds `size` items, `rel` of them relevant, in uniformly random order, after
    `before` items of which `rel_before` are relevant (McSherry & Najork, ECIR 2008).
    """
    if rel == 0:
        return 0.0
    if size == 1:
        return (rel_before + 1.0) / (before + 1.0)
    return rel / size * ((rel_before + 1.0) * h1 + (rel - 1.0) / (size - 1.0) * h2)


@njit(cache=True)
def _log_choose(a, b):
    return math.lgamma(a + 1.0) - math.lgamma(b + 1.0) - math.lgamma(a - b + 1.0)


@njit(cache=True)
def _tie_averaged_ap(hist, rhist, cutoff, top):
    """Exact expectation of AP@top over random orders inside tied distances.

    Buckets before the cutoff are taken whole. From the cutoff bucket only m = top - before
    items are taken; the number X of relevant ones among them is hypergeometric, and AP
    divides by the (random) number of relevant items retrieved, so we sum over X exactly.
    """
    before = 0
    rel_before = 0
    s_before = 0.0
    for d in range(cutoff):
        size = hist[d]
        if size > 0:
            h1, h2 = _group_sums(before, size)
            s_before += _group_expected_sum(before, rel_before, size, rhist[d], h1, h2)
            before += size
            rel_before += rhist[d]
    size = hist[cutoff]
    rel = rhist[cutoff]
    m = top - before
    h1, h2 = _group_sums(before, m)
    log_total = _log_choose(size, m)
    ap = 0.0
    for x in range(max(0, m - (size - rel)), min(rel, m) + 1):
        if rel_before + x == 0:
            continue
        px = math.exp(_log_choose(rel, x) + _log_choose(size - rel, m - x) - log_total)
        s_last = _group_expected_sum(before, rel_before, m, x, h1, h2)
        ap += px * (s_before + s_last) / (rel_before + x)
    return ap


@njit(nogil=True, cache=True)
def average_precision_chunk(q_words, db_t, q_labels, db_labels, top, ap_index, ap_average):
    """AP@top per query with stable ties (ap_index), and tie-averaged (ap_average, if sized)."""
    dist, hist, masks, cand, offsets, order = _rank_scratch(db_t, top)
    rhist = np.empty(hist.shape[0], np.int64)
    want_average = ap_average.shape[0] > 0
    for i in range(q_words.shape[0]):
        q_lab = q_labels[i]
        cutoff, m = _rank(q_words[i], db_t, top, dist, hist, masks, cand, offsets, order)
        hits = 0
        total = 0.0
        for p in range(top):  # branch-free: relevance is unpredictable
            rel = _relevant(q_lab, db_labels, order[p])
            hits += rel
            total += rel * hits / (p + 1.0)
        ap_index[i] = total / hits if hits > 0 else 0.0
        if want_average:
            rhist[: cutoff + 1] = 0
            for c in range(m):
                j = cand[c]
                if dist[j] <= cutoff:
                    rhist[dist[j]] += _relevant(q_lab, db_labels, j)
            ap_average[i] = _tie_averaged_ap(hist, rhist, cutoff, top)


@njit(nogil=True, cache=True)
def top_ranked_chunk(q_words, db_t, top, out_index, out_dist):
    """Indices and distances of the `top` nearest items per query, ties in index order."""
    dist, hist, masks, cand, offsets, order = _rank_scratch(db_t, top)
    for i in range(q_words.shape[0]):
        _rank(q_words[i], db_t, top, dist, hist, masks, cand, offsets, order)
        for p in range(top):
            out_index[i, p] = order[p]
            out_dist[i, p] = dist[order[p]]


@njit(nogil=True, cache=True)
def radius_counts_chunk(q_words, db_t, q_labels, db_labels_t, out_hist, out_rhist):
    """Per query and distance d: number of database items, and of relevant ones, at d.

    db_labels_t is the label bitmask word-major (lw, n), so that the relevance pass
    vectorises; each item's key 2 * distance + relevant is then histogrammed once.
    """
    n = db_t.shape[1]
    dist = np.empty(n, np.uint16)
    key = np.empty(n, np.uint16)
    scratch = np.empty((4, 2 * out_hist.shape[1]), np.int64)
    for i in range(q_words.shape[0]):
        q_lab = q_labels[i]
        fill_distances(q_words[i], db_t, dist)
        for j in range(n):
            key[j] = dist[j] << 1
        for k in range(q_lab.shape[0]):
            qk = q_lab[k]
            for j in range(n):
                key[j] |= np.uint16((db_labels_t[k, j] & qk) != 0)
        # four interleaved histograms avoid store-to-load stalls on repeated keys
        scratch[:] = 0
        m = n - n % 4
        for j in range(0, m, 4):
            scratch[0, key[j]] += 1
            scratch[1, key[j + 1]] += 1
            scratch[2, key[j + 2]] += 1
            scratch[3, key[j + 3]] += 1
        for j in range(m, n):
            scratch[0, key[j]] += 1
        for d in range(out_hist.shape[1]):
            near = scratch[0, 2 * d + 1] + scratch[1, 2 * d + 1] + scratch[2, 2 * d + 1] + scratch[3, 2 * d + 1]
            out_hist[i, d] = scratch[0, 2 * d] + scratch[1, 2 * d] + scratch[2, 2 * d] + scratch[3, 2 * d] + near
            out_rhist[i, d] = near
