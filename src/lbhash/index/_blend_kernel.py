"""The numba kernels of the ranking (lbhash.index.blend): the candidates' float rows scored
(`candidate_cosines`) and each query's best k of its scored candidates (`ranked_top`), imported with the
first ranked search."""

from __future__ import annotations

import numpy as np
from numba import njit

from lbhash.index._lookup_kernel import _prefetch

# rows asked for ahead of their scoring: a 1M-item index's candidates are rows read at random, and asking
# ahead overlaps their cache misses
AHEAD = 4
_LINE = 64  # bytes a cache line
_EXPONENT_BIAS = np.uint32((127 - 15) << 23)  # float16's exponent bias moved to float32's


@njit(nogil=True, fastmath=True, cache=True)
def candidate_cosines(rows, where, queries, center, centred, out):
    """For each query i and candidate j (row where[i, j] of `rows`, float16 bits uint16 (n, d); -1:
    padding, scored 0): with `centred`, the cosine of (row - center) and the centred unit query
    queries[i] (float64), as (row . q - center . q) / |row - center|; else row . queries[i]. Each
    pair's arithmetic is its own (float64 sums over the row), whatever else is scored with it."""
    n, d = rows.shape
    nq, c = where.shape
    flat = rows.reshape(n * d)
    step = max(1, _LINE // rows.itemsize)
    decoded = np.empty(d, np.float32)
    bits = decoded.view(np.uint32)
    cc = 0.0
    for t in range(d):
        cc += center[t] * center[t]
    for i in range(nq):
        q = queries[i]
        qc = 0.0
        for t in range(d):
            qc += q[t] * center[t]
        for j in range(min(AHEAD, c)):
            if where[i, j] >= 0:
                for x in range(0, d, step):
                    _prefetch(flat, where[i, j] * d + x)
        for j in range(c):
            if j + AHEAD < c and where[i, j + AHEAD] >= 0:
                for x in range(0, d, step):
                    _prefetch(flat, where[i, j + AHEAD] * d + x)
            p = where[i, j]
            if p < 0:
                out[i, j] = 0.0
                continue
            # float16 to float64 exactly, in loops that compile to vector code (no branch, no table; unit rows hold
            # no inf or NaN): the magnitude's bits moved into a float32's places and rebiased (a subnormal, whose
            # exponent bits are 0, as 2^-14 more than itself), then that 2^-14 taken off and the sign applied
            half = rows[p]
            for t in range(d):
                magnitude = (np.uint32(half[t]) & np.uint32(0x7FFF)) << np.uint32(13)
                subnormal = (magnitude & np.uint32(0x7C00 << 13)) == 0
                bits[t] = magnitude + _EXPONENT_BIAS + (np.uint32(1 << 23) if subnormal else np.uint32(0))
            dot = 0.0
            across = 0.0
            square = 0.0
            for t in range(d):
                h = half[t]
                v = np.float64(decoded[t]) - (2.0 ** -14 if (h & 0x7C00) == 0 else 0.0)
                v = -v if h & 0x8000 else v
                dot += v * q[t]
                across += v * center[t]
                square += v * v
            if not centred:
                out[i, j] = dot
                continue
            norm = np.sqrt(max(square - 2.0 * across + cc, 0.0))
            out[i, j] = (dot - qc) / max(norm, 1e-12)


@njit(inline="always", cache=True)
def _before(score, d_class, d_inst, ids, a, b):
    """Whether candidate a ranks before b: descending score, then class distance, instance distance, id."""
    if score[a] != score[b]:
        return score[a] > score[b]
    if d_class[a] != d_class[b]:
        return d_class[a] < d_class[b]
    if d_inst[a] != d_inst[b]:
        return d_inst[a] < d_inst[b]
    return ids[a] < ids[b]


@njit(inline="always", cache=True)
def _sift_up(heap, at, score, d_class, d_inst, ids):
    """Move heap[at] up while it ranks after its parent (the root ranks last)."""
    while at > 0:
        parent = (at - 1) // 2
        if not _before(score, d_class, d_inst, ids, heap[parent], heap[at]):
            break
        heap[parent], heap[at] = heap[at], heap[parent]
        at = parent


@njit(inline="always", cache=True)
def _sift_down(heap, at, size, score, d_class, d_inst, ids):
    """Move heap[at] down (heap[:size]) while a child ranks after it."""
    while True:
        child = 2 * at + 1
        if child >= size:
            return
        if child + 1 < size and _before(score, d_class, d_inst, ids, heap[child], heap[child + 1]):
            child += 1  # (the child that ranks later)
        if not _before(score, d_class, d_inst, ids, heap[at], heap[child]):
            return
        heap[at], heap[child] = heap[child], heap[at]
        at = child


NEAR_FIRST = 4.0  # added to a `near` candidate's score for the ranking (scores lie in [-1, 1])


@njit(nogil=True, cache=True)
def ranked_top(candidates, looks_like, rule, out):
    """`candidates` is (ids, d_class, d_inst, similarity, near), each (nq, c). For each query i, its candidates
    ids[i] (-1: padding) scored (1 - looks_like[i]) * (1 - 2 d_class / bits) + looks_like[i] * sign(s) |s|^power,
    with s the similarity[i] clipped to [-1, 1], and the best k in the ranking's order (`_before`) written to
    `out` (scores, class distances, instance distances, ids, same marks; each (nq, k), already padded by the
    caller). A candidate `near` (its perceptual hashes pass the mark's) is the same picture: it ranks before
    every other, keeping its score. `rule` is (bits, power, same_cut, same_by, instance_bits, neighbour,
    instance_cut): a hit is the same picture when (same_by) 0: d_inst <= same_cut * instance_bits; 1: s >=
    same_cut; 2: s less the neighbour-th best s of the query's other candidates >= same_cut (none where it
    has fewer); 3: 2, or d_inst <= instance_cut * instance_bits; same_cut < 0: never."""
    ids, d_class, d_inst, similarity, near = candidates
    bits, power, same_cut, same_by, instance_bits, neighbour, instance_cut = rule
    out_scores, out_class, out_inst, out_ids, out_same = out
    nq, c = ids.shape
    k = out_ids.shape[1]
    score = np.empty(c, np.float64)
    order = np.empty(max(k, 1), np.int64)
    best = np.empty(max(neighbour, 0) + 1, np.float64)  # (a margin mark: the query's best similarities)
    for i in range(nq):
        weight = looks_like[i]
        dc, di, idi = d_class[i], d_inst[i], ids[i]
        m = 0
        for j in range(c):
            if idi[j] < 0:
                continue
            s = min(max(similarity[i, j], -1.0), 1.0)
            sharp = abs(s) ** power
            score[j] = (1 - weight) * (1 - 2 * dc[j] / bits) + weight * (sharp if s >= 0 else -sharp)
            if near[i, j]:
                score[j] += NEAR_FIRST
            # the best k so far in a heap whose root ranks last (O(c log k): an insertion sort's O(c k) took
            # seconds a query at k 1000): a candidate enters it only by ranking before its root
            if m < k:
                order[m] = j
                _sift_up(order, m, score, dc, di, idi)
                m += 1
            elif k > 0 and _before(score, dc, di, idi, j, order[0]):
                order[0] = j
                _sift_down(order, 0, m, score, dc, di, idi)
        for last in range(m - 1, 0, -1):  # the heap sorted in place: the one ranking last goes last
            order[0], order[last] = order[last], order[0]
            _sift_down(order, 0, last, score, dc, di, idi)
        if same_by >= 2 and same_cut >= 0:
            _best_similarities(similarity[i], idi, best)
        for r in range(m):
            j = order[r]
            out_scores[i, r] = score[j] - NEAR_FIRST if near[i, j] else score[j]
            out_class[i, r] = d_class[i, j]
            out_inst[i, r] = d_inst[i, j]
            out_ids[i, r] = ids[i, j]
            s = min(max(similarity[i, j], -1.0), 1.0)
            if near[i, j]:
                out_same[i, r] = True
            elif same_cut < 0:
                out_same[i, r] = False
            elif same_by == 1:
                out_same[i, r] = s >= same_cut
            elif same_by >= 2:
                # the hit's neighbour-th best other: the neighbour-th best, or the one after where the hit is among them
                other = best[neighbour] if s >= best[neighbour - 1] else best[neighbour - 1]
                out_same[i, r] = (other > -np.inf and s - other >= same_cut) or \
                    (same_by == 3 and d_inst[i, j] <= instance_cut * instance_bits)
            else:
                out_same[i, r] = d_inst[i, j] <= same_cut * instance_bits


@njit(inline="always", cache=True)
def _best_similarities(similarity, ids, best):
    """The len(best) largest clipped similarities of the candidates (ids >= 0) in descending order into
    `best`, -inf past their count."""
    best[:] = -np.inf
    for j in range(len(ids)):
        if ids[j] < 0:
            continue
        s = min(max(similarity[j], -1.0), 1.0)
        at = len(best)
        while at > 0 and best[at - 1] < s:
            at -= 1
        if at < len(best):
            for t in range(len(best) - 1, at, -1):
                best[t] = best[t - 1]
            best[at] = s
