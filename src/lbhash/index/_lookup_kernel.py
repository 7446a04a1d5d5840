"""The numba kernel of the chunk-table lookup (lbhash.index._lookup), imported with the first search
that uses it."""

from __future__ import annotations

import numpy as np
from numba import njit

from lbhash.ranking import NO_DISTANCE, row_distance

_POSITION = (1 << 40) - 1  # a candidate's key: distance << 40 | position


@njit(nogil=True, cache=True)
def lookup_knn(q_words, q_keys, offsets, order, db, covered, allowed, flips, out_pos, out_dist):
    """For each query (q_words: packed rows as unsigned words, as `db`'s; their chunk keys q_keys
    (nq, tables)): the candidates are
    the positions p < covered whose chunk t is q_keys[i, t] ^ flips[f] for some t and f, and every
    p >= covered; those `allowed` (empty: all) ranked by (Hamming distance, position), each once,
    into out_pos / out_dist (nq, top), padded with -1 / int32 max."""
    nq, tables = q_keys.shape
    n = db.shape[0]
    top = out_pos.shape[1]
    filtered = allowed.shape[0] > 0
    for i in range(nq):
        q_row = q_words[i]
        cap = n - covered
        for t in range(tables):
            for f in range(flips.shape[0]):
                key = q_keys[i, t] ^ flips[f]
                cap += offsets[t, key + 1] - offsets[t, key]
        keys = np.empty(cap, np.int64)
        m = 0
        for t in range(tables):
            for f in range(flips.shape[0]):
                key = q_keys[i, t] ^ flips[f]
                for s in range(offsets[t, key], offsets[t, key + 1]):
                    p = order[t, s]
                    if filtered and not allowed[p]:
                        continue
                    keys[m] = (np.int64(row_distance(q_row, db, p)) << 40) | p
                    m += 1
        for p in range(covered, n):
            if filtered and not allowed[p]:
                continue
            keys[m] = (np.int64(row_distance(q_row, db, p)) << 40) | p
            m += 1
        keys = np.sort(keys[:m])
        c = 0
        last = -1
        for j in range(m):
            if keys[j] == last:  # the same item through another table
                continue
            if c == top:
                break
            out_dist[i, c] = keys[j] >> 40
            out_pos[i, c] = keys[j] & _POSITION
            last = keys[j]
            c += 1
        for j in range(c, top):
            out_pos[i, j] = -1
            out_dist[i, j] = NO_DISTANCE
