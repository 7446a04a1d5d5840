"""The numba kernel of the chunk-table lookup (lbhash.index._lookup), imported with the first search
that uses it."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from lbhash.ranking import NO_DISTANCE, row_distance

_POSITION = (1 << 40) - 1  # a candidate's key: distance << 40 | position
# candidates whose rows are asked for ahead of their distance: at 1M items a lookup reads about 4,000 rows
# at random, and asking ahead overlaps their cache misses (the instance step after the class scan 0.21 ->
# 0.15 ms a query: docs/instance-codes.md, "Cost at scale")
AHEAD = 16


@intrinsic
def _prefetch(typingctx, flat, offset):
    """Ask the CPU for the cache line of flat[offset] (a hint: no fault, no result)."""
    if not (isinstance(flat, types.Array) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(flat)(context, builder, value=args[0]).data
        byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        name = "llvm.prefetch.p0"  # (address, read, the highest locality, data cache)
        hint = builder.module.globals.get(name) or ir.Function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), name)
        builder.call(hint, [builder.bitcast(builder.gep(data, [args[1]]), byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(flat, offset), codegen


@njit(inline="always", cache=True)
def _unique_up_to(dist, pos, m, cut):
    """The keys (distance << 40 | position) of the first m candidates at distance `cut` at most,
    sorted, each once (an item is found through every table one of whose chunks is near the query's)."""
    keys = np.empty(m, np.int64)
    c = 0
    for j in range(m):
        if dist[j] <= cut:
            keys[c] = (dist[j] << 40) | pos[j]
            c += 1
    keys = np.sort(keys[:c])
    u = 0
    for j in range(c):
        if u == 0 or keys[j] != keys[u - 1]:
            keys[u] = keys[j]
            u += 1
    return keys[:u]


@njit(inline="always", cache=True)
def _top_keys(dist, pos, m, top, hist):
    """The keys of the first m candidates up to the smallest distance whose candidates, and those below,
    hold `top` distinct items (all of them where fewer), sorted, each once."""
    hist[:] = 0
    for j in range(m):
        hist[dist[j]] += 1
    # the cut fills the top counted with repeats; raised by the shortfall while repeats leave it short
    cut, held, need = -1, 0, top
    while True:
        while held < need and cut + 1 < hist.shape[0]:
            cut += 1
            held += hist[cut]
        keys = _unique_up_to(dist, pos, m, cut)
        if keys.shape[0] >= top or cut + 1 == hist.shape[0]:
            return keys
        need = held + top - keys.shape[0]


@njit(inline="always", cache=True)
def _candidates(q_keys, offsets, order, n, covered, allowed, flips):
    """(positions, count) of one query's candidates (as `lookup_knn` says), in table and bucket order,
    repeats kept: those p < covered in a bucket of q_keys[t] ^ flips[f], then every p >= covered."""
    filtered = allowed.shape[0] > 0
    cap = n - covered
    for t in range(q_keys.shape[0]):
        for f in range(flips.shape[0]):
            key = q_keys[t] ^ flips[f]
            cap += offsets[t, key + 1] - offsets[t, key]
    pos = np.empty(cap, np.int64)
    m = 0
    for t in range(q_keys.shape[0]):
        for f in range(flips.shape[0]):
            key = q_keys[t] ^ flips[f]
            for s in range(offsets[t, key], offsets[t, key + 1]):
                p = order[t, s]
                if filtered and not allowed[p]:
                    continue
                pos[m] = p
                m += 1
    for p in range(covered, n):
        if filtered and not allowed[p]:
            continue
        pos[m] = p
        m += 1
    return pos, m


@njit(nogil=True, cache=True)
def lookup_knn(q_words, q_bytes, offsets, order, db, covered, allowed, flips, out_pos, out_dist):
    """For each query (q_words: packed rows as unsigned words, as `db`'s; q_bytes the same rows as bytes,
    whose 16-bit chunk t, q_key(t), is bytes 2t and 2t + 1): the candidates are the positions p < covered
    whose chunk t is q_key(t) ^ flips[f] for some t and f, and every p >= covered; those `allowed` (empty: all)
    ranked by (Hamming distance, position), each once, into out_pos / out_dist (nq, top), padded with
    -1 / int32 max. The candidates are listed first, then their rows read, each asked for AHEAD candidates
    before its distance. The top is cut by a histogram of the distances, not by sorting every candidate
    (a sort of the ~4,000 candidates of a 1M-item index cost more than reading them)."""
    nq, tables = q_bytes.shape[0], q_bytes.shape[1] // 2
    n, words = db.shape
    flat = db.reshape(n * words)  # (db is C-contiguous: the prefetch addresses its rows by element offset)
    top = out_pos.shape[1]
    hist = np.zeros(q_bytes.shape[1] * 8 + 1, np.int64)
    q_keys = np.empty(tables, np.int64)
    for i in range(nq):
        q_row = q_words[i]
        for t in range(tables):
            q_keys[t] = np.int64(q_bytes[i, 2 * t]) | (np.int64(q_bytes[i, 2 * t + 1]) << 8)
        pos, m = _candidates(q_keys, offsets, order, n, covered, allowed, flips)
        dist = np.empty(m, np.int64)
        for j in range(min(AHEAD, m)):
            _prefetch(flat, pos[j] * words)
        for j in range(m):
            if j + AHEAD < m:
                _prefetch(flat, pos[j + AHEAD] * words)
            dist[j] = row_distance(q_row, db, pos[j])
        keys = _top_keys(dist, pos, m, top, hist)
        c = min(keys.shape[0], top)
        for j in range(c):
            out_dist[i, j] = keys[j] >> 40
            out_pos[i, j] = keys[j] & _POSITION
        for j in range(c, top):
            out_pos[i, j] = -1
            out_dist[i, j] = NO_DISTANCE


@njit(nogil=True, cache=True)
def union_distances(q_class, class_db, q_inst, inst_db, candidates, out_pos, out_dist):
    """For each query: the positions of candidates[i] (-1: padding), each once, ascending, into out_pos[i]
    (padded with -1), with their Hamming distances to q_class[i] in class_db into out_dist[0, i] and to
    q_inst[i] in inst_db into out_dist[1, i] (rows packed as unsigned words; NO_DISTANCE where padded)."""
    nq, width = out_pos.shape
    for i in range(nq):
        both = np.sort(candidates[i])
        c = 0
        for p in both:
            if p < 0 or (c > 0 and out_pos[i, c - 1] == p):
                continue
            out_pos[i, c] = p
            out_dist[0, i, c] = row_distance(q_class[i], class_db, p)
            out_dist[1, i, c] = row_distance(q_inst[i], inst_db, p)
            c += 1
        for j in range(c, width):
            out_pos[i, j] = -1
            out_dist[0, i, j] = NO_DISTANCE
            out_dist[1, i, j] = NO_DISTANCE
