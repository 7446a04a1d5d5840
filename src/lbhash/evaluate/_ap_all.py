"""Numba kernel for AP over the whole database (R = all), docs/evaluation.md.

Nothing is sorted: an item's rank is the number of items at smaller distances plus its position
among the earlier items at its own distance (ties by index). Per query, one pass computes
keys 2 * distance + relevant, a walk counts the items at each distance and records the relevant
ones, and the histogram then gives AP with the same divisions in the same order as a walk that
knew it in advance, so the result is bit-identical to it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from lbhash.evaluate._kernels import _tie_averaged_ap
from lbhash.ranking import popcount64


ROWS = 8  # interleaved counter rows in _walk and _walk_bytes
BLOCK = 8192  # items per block: its keys (8 or 16 KB) stay in L1/L2 between keying and walking


def key_dtype(bits: int):
    """The narrowest unsigned type that holds 2 * distance + 1 for codes of `bits` bits."""
    words = -(-bits // 64)
    return np.uint8 if 2 * 64 * words + 1 <= 255 else np.uint16


@njit(inline="always", cache=True)
def _keys(q_row, q_lab, q_class, db_t, db_labels_t, db_class, start, n, key):
    """key[j] = 2 * distance + relevant for database item start + j, j < n. Relevance compares
    class ids when every item has exactly one label (db_class sized), else ANDs the label
    bitmask words. The loops read 1-D slices of 1-D rows and write the whole key buffer: over
    those numba vectorises (2-D slices, or an offset added to each index, it does not)."""
    words = db_t[0][start:start + n]
    q0 = q_row[0]
    for j in range(n):
        key[j] = popcount64(q0 ^ words[j])
    for k in range(1, db_t.shape[0]):
        words = db_t[k][start:start + n]
        qk = q_row[k]
        for j in range(n):
            key[j] += popcount64(qk ^ words[j])
    if db_class.shape[0] > 0:
        classes = db_class[start:start + n]
        for j in range(n):
            key[j] = (key[j] << 1) | (classes[j] == q_class)
        return
    for j in range(n):
        key[j] = key[j] << 1
    for k in range(q_lab.shape[0]):
        mask = db_labels_t[k][start:start + n]
        qk = q_lab[k]
        for j in range(n):
            key[j] |= (mask[j] & qk) != 0


@njit(inline="always", cache=True)
def _record(key, base, t, d, seen, rel_d, rel_pos, r):
    """Record relevant item base + t at distance d: its position among the items at d that
    come before it (the ROWS rows of `seen` so far, plus key[base:base + t] not yet counted)."""
    row = seen.shape[0] // ROWS
    position = 0
    for u in range(ROWS):
        position += seen[u * row + 2 * d] + seen[u * row + 2 * d + 1]
    for u in range(t):
        position += (key[base + u] >> 1) == d
    rel_d[r] = d
    rel_pos[r] = position


@njit(inline="always", cache=True)
def _walk_one_by_one(key, start, n, seen, rel_d, rel_pos, r):
    """The walk of key[start:n] one key at a time: the few keys left after the wide steps."""
    for j in range(start, n):
        k = key[j]
        if k & 1:
            _record(key, j, 0, k >> 1, seen, rel_d, rel_pos, r)
            r += 1
        seen[k] += 1
    return r


@njit(inline="always", cache=True)
def _walk_bytes(key, n, seen, rel_d, rel_pos, r):
    """_walk for one-byte keys (codes of up to 64 bits): reads eight keys as one word and
    counts them in the ROWS (eight) rows of `seen`, one row per byte, so that no two counts in
    a word wait on one counter; one test per word finds the (rare) relevant items."""
    row = seen.shape[0] // ROWS
    m = n - n % 8
    words = key[:m].view(np.uint64)
    relevant = np.uint64(0x0101010101010101)
    for w in range(words.shape[0]):
        x = words[w]
        if x & relevant:
            for t in range(8):
                k = key[8 * w + t]
                if k & 1:
                    _record(key, 8 * w, t, k >> 1, seen, rel_d, rel_pos, r)
                    r += 1
        seen[x & np.uint64(255)] += 1
        seen[row + ((x >> np.uint64(8)) & np.uint64(255))] += 1
        seen[2 * row + ((x >> np.uint64(16)) & np.uint64(255))] += 1
        seen[3 * row + ((x >> np.uint64(24)) & np.uint64(255))] += 1
        seen[4 * row + ((x >> np.uint64(32)) & np.uint64(255))] += 1
        seen[5 * row + ((x >> np.uint64(40)) & np.uint64(255))] += 1
        seen[6 * row + ((x >> np.uint64(48)) & np.uint64(255))] += 1
        seen[7 * row + (x >> np.uint64(56))] += 1
    return _walk_one_by_one(key, m, n, seen, rel_d, rel_pos, r)


@njit(inline="always", cache=True)
def _walk(key, n, seen, rel_d, rel_pos, r):
    """Count one block's items per key (keys of any width, four at a time, into the first four
    of the ROWS interleaved rows of 2 * nbins counters in `seen`) and record each relevant
    item's distance and its position among the earlier items at that distance, from record r
    on. Reads key[:n]. Returns the new number recorded."""
    row = seen.shape[0] // ROWS
    m = n - n % 4
    for j in range(0, m, 4):
        k0, k1, k2, k3 = key[j], key[j + 1], key[j + 2], key[j + 3]
        if (k0 | k1 | k2 | k3) & 1:  # rare for many classes: one branch per four items
            for t in range(4):
                if key[j + t] & 1:
                    _record(key, j, t, key[j + t] >> 1, seen, rel_d, rel_pos, r)
                    r += 1
        seen[k0] += 1
        seen[row + k1] += 1
        seen[2 * row + k2] += 1
        seen[3 * row + k3] += 1
    return _walk_one_by_one(key, m, n, seen, rel_d, rel_pos, r)


@njit(nogil=True, cache=True)
def average_precision_all_chunk(q_words, db_t, q_labels, db_labels_t, q_class, db_class, key, ap_index,
                                ap_average):
    """AP over the whole database per query, ties by index (ap_index) and, if sized,
    tie-averaged (ap_average). `key` is scratch of key_dtype(bits) and length BLOCK; q_class
    and db_class are empty unless every item has exactly one label."""
    n = db_t.shape[1]
    nbins = 64 * db_t.shape[0] + 1
    seen = np.empty(ROWS * 2 * nbins, np.int32)  # int32 like rel_pos: n is below 2**31
    rel_d = np.empty(n, key.dtype)
    rel_pos = np.empty(n, np.int32)
    hist = np.empty(nbins, np.int64)
    rhist = np.empty(nbins, np.int64)
    before = np.empty(nbins, np.int64)
    rel_before = np.empty(nbins, np.int64)
    rel_seen = np.empty(nbins, np.int64)
    by_class = db_class.shape[0] > 0
    # of q_class's type: a literal 0 would widen the comparison in _keys and stop it vectorising
    no_class = np.zeros(1, q_class.dtype)[0]
    want_average = ap_average.shape[0] > 0
    for i in range(q_words.shape[0]):
        seen[:] = 0
        r = 0
        for a in range(0, n, BLOCK):  # a block's keys stay in cache between the two passes
            b = min(n, a + BLOCK)
            _keys(q_words[i], q_labels[i], q_class[i] if by_class else no_class, db_t, db_labels_t, db_class,
                  a, b - a, key)
            if key.itemsize == 1:
                r = _walk_bytes(key, b - a, seen, rel_d, rel_pos, r)
            else:
                r = _walk(key, b - a, seen, rel_d, rel_pos, r)
        for d in range(nbins):
            rhist[d] = 0
            hist[d] = 0
            for u in range(ROWS):
                rhist[d] += seen[u * 2 * nbins + 2 * d + 1]
                hist[d] += seen[u * 2 * nbins + 2 * d] + seen[u * 2 * nbins + 2 * d + 1]
            before[d] = 0 if d == 0 else before[d - 1] + hist[d - 1]
            rel_before[d] = 0 if d == 0 else rel_before[d - 1] + rhist[d - 1]
        if r == 0:
            ap_index[i] = 0.0
            if want_average:
                ap_average[i] = 0.0
            continue
        rel_seen[:] = 0
        total = 0.0
        for t in range(r):  # index order: the order in which a single walk would add them
            d = rel_d[t]
            rel_seen[d] += 1
            total += (rel_before[d] + rel_seen[d]) / (before[d] + rel_pos[t] + 1)
        ap_index[i] = total / r
        if want_average:
            last = 0
            for d in range(nbins):
                if hist[d] > 0:
                    last = d
            ap_average[i] = _tie_averaged_ap(hist, rhist, last, n)
