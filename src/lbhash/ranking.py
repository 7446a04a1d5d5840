"""Numba kernels that rank a database of packed codes by Hamming distance from one query.

Distances are integers in [0, bits], so a ranking is a counting sort: histogram the distances, find the bucket where the
top T is reached, and order only the items up to it (ties keep database order). The evaluation ranks word-major (w, n)
uint64 databases; a flat index ranks its row-major codes, 64 rows at a time (`_near_mask`), up to 32 queries per pass.
Every kernel releases the GIL; `for_query_ranges` runs chunks of queries in parallel threads.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
NO_DISTANCE = np.iinfo(np.int32).max  # FAISS's distance for a missing neighbour


@njit(inline="always", cache=True)
def popcount64(x):
    # LLVM turns this into vectorised popcount instructions.
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)


@njit(nogil=True, cache=True)
def fill_distances(q_row, db_t, dist):
    """dist[j] = Hamming distance of q_row (w,) uint64 to item j of the word-major db_t (w, n)."""
    words, n = db_t.shape
    q0 = q_row[0]
    for j in range(n):
        dist[j] = popcount64(q0 ^ db_t[0, j])
    for k in range(1, words):
        qk = q_row[k]
        for j in range(n):
            dist[j] += popcount64(qk ^ db_t[k, j])


@njit(nogil=True, cache=True)
def fill_distances_rows(q_row, db_rows, dist):
    """dist[j] = Hamming distance of q_row (w,) to row j of db_rows (n, w), both of one unsigned word type."""
    n, words = db_rows.shape
    if words == 1:  # one contiguous column: the loop vectorises
        column = db_rows.reshape(n)
        q0 = np.uint64(q_row[0])
        for j in range(n):
            dist[j] = popcount64(q0 ^ np.uint64(column[j]))
        return
    for j in range(n):
        dist[j] = row_distance(q_row, db_rows, j)


@njit(inline="always", cache=True)
def _cutoff_from_sample(sample_hist, taken, n, top):
    """The smallest distance whose sampled count reaches the top `top`'s share of the sample,
    with a margin: only a guess, which `rank_distances` checks and redoes when it falls short."""
    need = top * taken / n
    need = 1.1 * need + 3.0 * np.sqrt(need) + 1.0
    cum = 0
    for d in range(sample_hist.shape[0]):
        cum += sample_hist[d]
        if cum >= need:
            return d
    return sample_hist.shape[0] - 1


@njit(nogil=True, cache=True)
def _guess_cutoff(dist, top, sample_hist):
    """A distance that very likely reaches the top `top`, from a strided sample of ~16k items."""
    n = dist.shape[0]
    stride = max(1, n // 16384)
    sample_hist[:] = 0
    taken = 0
    for j in range(0, n, stride):
        sample_hist[dist[j]] += 1
        taken += 1
    return _cutoff_from_sample(sample_hist, taken, n, top)


@njit(inline="always", cache=True)
def _set_bits(masks, blocks, cand):
    """The positions of the set bits of masks[:blocks] (bit k of word b: 64 b + k) into cand, ascending; their count."""
    m = 0
    for b in range(blocks):
        mask = masks[b]
        while mask:
            cand[m] = b * 64 + popcount64((mask & -mask) - np.uint64(1))  # lowest set bit
            m += 1
            mask &= mask - np.uint64(1)
    return m


@njit(nogil=True, cache=True)
def _collect_within(dist, limit, masks, cand):
    """Write, in index order, the items at distance <= limit into cand; return their count. One 64-bit
    mask per 64 items (a vectorised loop), then its set bits: no branch, so no mispredictions, per item."""
    n = dist.shape[0]
    full = n // 64
    for b in range(full):
        mask = np.uint64(0)
        base = b * 64
        for k in range(64):
            mask |= np.uint64(dist[base + k] <= limit) << np.uint64(k)
        masks[b] = mask
    m = _set_bits(masks, full, cand)
    for j in range(full * 64, n):
        if dist[j] <= limit:
            cand[m] = j
            m += 1
    return m


@njit(nogil=True, cache=True)
def rank_distances(dist, top, hist, masks, cand, offsets, order):
    """Rank items by dist (n,): order[:top] gets the nearest items, ties by index (top <= n).

    A counting sort restricted to the head of the ranking: collect the items within a guessed cutoff distance, histogram
    only those, and sort only those. If the guess falls short of `top` items, the full histogram gives the exact cutoff
    and we collect again. Returns (cutoff, m): the distance of the last bucket reached and the number of collected items
    cand[:m] (index order), which include every item at distance <= cutoff and maybe farther ones, which callers skip.
    hist[d] is exact for d <= cutoff. Buffers: hist (nbins,), masks (n // 64 + 1,), cand (n,), offsets (nbins + 1,),
    order (top + 1,).
    """
    nbins = hist.shape[0]
    limit = _guess_cutoff(dist, top, hist)
    m = _collect_within(dist, limit, masks, cand)
    if m < top:  # rare: the sample misled the guess
        hist[:] = 0
        for j in range(dist.shape[0]):
            hist[dist[j]] += 1
        cum = 0
        for d in range(nbins):
            cum += hist[d]
            if cum >= top:
                limit = d
                break
        m = _collect_within(dist, limit, masks, cand)
    hist[:] = 0
    for c in range(m):
        hist[dist[cand[c]]] += 1
    cum = 0
    cutoff = limit
    for d in range(limit + 1):
        offsets[d] = cum
        cum += hist[d]
        if cum >= top:
            cutoff = d
            break
    # Branch-free placement: items past the cutoff go to a spare bucket, and positions past
    # `top` to the spare slot order[top] (unpredictable branches cost more than the stores).
    spare = nbins
    offsets[spare] = top
    for c in range(m):
        j = cand[c]
        d = dist[j]
        b = d if d <= cutoff else spare
        p = offsets[b]
        order[min(p, top)] = j
        offsets[b] = p + 1
    return cutoff, m


@njit(inline="always", cache=True)
def row_distance(q_row, db_rows, j):
    total = np.uint64(0)
    for k in range(db_rows.shape[1]):
        total += popcount64(np.uint64(q_row[k]) ^ np.uint64(db_rows[j, k]))
    return total


@njit(inline="always", cache=True)
def _sampled_cutoff(q_row, db_rows, top, sample_hist):
    """`_guess_cutoff` from the distances of a strided sample of rows, computed here."""
    n = db_rows.shape[0]
    stride = max(1, n // 16384)
    sample_hist[:] = 0
    taken = 0
    for j in range(0, n, stride):
        sample_hist[row_distance(q_row, db_rows, j)] += 1
        taken += 1
    return _cutoff_from_sample(sample_hist, taken, n, top)


@intrinsic
def _near_mask(typingctx, flat, base, tiled, limit, words):
    """Bit k of a uint64 set when row k of the 64 rows of `words` words that start at flat[base] is within `limit` of
    the query, whose words `tiled` repeats 64 times, as vector operations: LLVM lowers them to the machine's widest
    popcount and compare, which numba's loop vectoriser does not find for a packed mask. `words` is a literal int; flat
    and tiled have one unsigned type; 0 <= limit <= the row's width."""
    if not (isinstance(flat, types.Array) and isinstance(flat.dtype, types.Integer) and isinstance(tiled, types.Array)
            and tiled.dtype == flat.dtype and isinstance(words, types.IntegerLiteral)):
        return None
    w = words.literal_value

    def codegen(context, builder, signature, args):
        flat_value, base_value, tiled_value, limit_value, _ = args
        word = context.get_value_type(flat.dtype)
        vector = ir.VectorType(word, 64 * w)

        def load(array_type, array_value, offset):  # an unaligned array (a mapped file's codes) promises one byte
            data = context.make_array(array_type)(context, builder, value=array_value).data
            align = array_type.dtype.bitwidth // 8 if array_type.aligned else 1
            return builder.load(builder.bitcast(builder.gep(data, [offset]), vector.as_pointer()), align=align)

        name = f"llvm.ctpop.v{64 * w}i{word.width}"
        popcount = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(vector, [vector]), name)
        if w == 1:  # one scalar load, broadcast: no second vector stream through the loop
            first = context.make_array(tiled)(context, builder, value=tiled_value).data
            query = builder.insert_element(ir.Constant(vector, ir.Undefined), builder.load(first), ir.Constant(ir.IntType(32), 0))
            query = builder.shuffle_vector(query, ir.Constant(vector, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), 64), [0] * 64))
        else:
            query = load(tiled, tiled_value, ir.Constant(ir.IntType(64), 0))
        counts = builder.call(popcount, [builder.xor(load(flat, flat_value, base_value), query)])
        rows = ir.VectorType(word, 64)
        distances = None
        for k in range(w):  # a row's distance: the sum of its words' counts (w words of at most 64 bits fit any type)
            lanes = ir.Constant(ir.VectorType(ir.IntType(32), 64), [j * w + k for j in range(64)])
            part = builder.shuffle_vector(counts, ir.Constant(vector, ir.Undefined), lanes) if w > 1 else counts
            distances = part if distances is None else builder.add(distances, part)
        bound = builder.insert_element(ir.Constant(rows, ir.Undefined), builder.trunc(limit_value, word), ir.Constant(ir.IntType(32), 0))
        bound = builder.shuffle_vector(bound, ir.Constant(rows, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), 64), [0] * 64))
        return builder.bitcast(builder.icmp_unsigned("<=", distances, bound), ir.IntType(64))

    return types.uint64(flat, base, tiled, limit, words), codegen


@njit(inline="always", cache=True)
def _fill_near_masks(tiled, db_rows, limit, masks, first, stop):
    """masks[b], first <= b < stop: bit k set when row 64 b + k is within `limit` of the query (`tiled`: 64 copies)."""
    n, words = db_rows.shape
    flat = db_rows.reshape(n * words)
    clamped = min(limit, words * db_rows.itemsize * 8)
    # a branch per width: the vector's width must be a literal when numba compiles the call
    if words == 1:
        for b in range(first, stop):
            masks[b] = _near_mask(flat, b * 64, tiled, clamped, 1)
    elif words == 2:
        for b in range(first, stop):
            masks[b] = _near_mask(flat, b * 128, tiled, clamped, 2)
    elif words == 3:
        for b in range(first, stop):
            masks[b] = _near_mask(flat, b * 192, tiled, clamped, 3)
    elif words == 4:
        for b in range(first, stop):
            masks[b] = _near_mask(flat, b * 256, tiled, clamped, 4)
    else:
        for b in range(first, stop):
            mask = np.uint64(0)
            for k in range(64):
                mask |= np.uint64(row_distance(tiled, db_rows, b * 64 + k) <= limit) << np.uint64(k)
            masks[b] = mask


@njit(inline="always", cache=True)
def _rows_from_masks(q_row, db_rows, limit, masks, cand):
    """The rows `masks` marks, then those past the last full block within `limit`, into cand in order; their count."""
    n = db_rows.shape[0]
    full = n // 64
    m = _set_bits(masks, full, cand)
    for j in range(full * 64, n):
        if row_distance(q_row, db_rows, j) <= limit:
            cand[m] = j
            m += 1
    return m


SHARED_PASS = 32  # queries whose masks one pass over the rows fills: 32 x n / 8 bytes
_PASS_MASKS = 64 << 20  # bytes: past 16M rows fewer queries share a pass
_BLOCK = 128  # mask words per block: 8,192 rows, in the core's cache while every query reads them


@njit(inline="always", cache=True)
def _share_a_pass(queries, db_rows, top, hist, limits, tiled, masks):
    """For each query i: its guessed cutoff into limits[i] and the rows within it into masks[i], each block of rows
    compared with every query while it is in cache."""
    full, words = db_rows.shape[0] // 64, db_rows.shape[1]
    for i in range(queries.shape[0]):
        limits[i] = _sampled_cutoff(queries[i], db_rows, top, hist)
        for j in range(64 * words):
            tiled[i, j] = queries[i, j % words]
    step = _BLOCK if queries.shape[0] > 1 else full + 1  # a lone query streams the rows once
    for b0 in range(0, full, step):
        for i in range(queries.shape[0]):
            _fill_near_masks(tiled[i], db_rows, limits[i], masks[i], b0, min(full, b0 + step))


@njit(nogil=True, cache=True)
def nearest_rows_chunk(q_words, db_rows, allowed, excluded, out_pos, out_dist):
    """The out_pos.shape[1] nearest rows of db_rows (n, w) to each query (nq, w), ties by position.

    Without a filter (`allowed` empty), one pass shared by up to 32 queries keeps the rows within a cutoff guessed from
    a sample, and only they are ranked (`rank_distances`). With `allowed` (n,) bool, or when the guess falls short,
    every distance is written (an excluded row's as `excluded`, past every real one); places past the allowed rows come
    back as position -1 and distance int32 max, as FAISS pads. Allocates n // 8 bytes of masks per query sharing a pass
    (at most 64 MiB), 8 bytes per row of candidates, and for a filtered or short-guessed query 2 bytes per row.
    """
    n = db_rows.shape[0]
    nq = q_words.shape[0]
    top = out_pos.shape[1]
    nbins = excluded + 1
    full = n // 64
    hist = np.empty(nbins, np.int64)
    group = max(1, min(nq, SHARED_PASS, _PASS_MASKS // (8 * (full + 1))))
    masks = np.empty((group, full + 1), np.uint64)
    limits = np.empty(group, np.int64)
    words = db_rows.shape[1]
    tiled = np.empty((group, 64 * words), db_rows.dtype)
    spare_masks = np.empty(full + 1, np.uint64)
    offsets = np.empty(nbins + 1, np.int64)
    cand = np.empty(n, np.int64)
    order = np.empty(top + 1, np.int64)
    filtered = allowed.shape[0] > 0
    reachable = top
    if filtered:  # rank no further than the allowed rows: the excluded ones are never collected
        reachable = min(top, np.count_nonzero(allowed))
    for g0 in range(0, nq, group):
        g1 = min(nq, g0 + group)
        if not filtered:
            _share_a_pass(q_words[g0:g1], db_rows, top, hist, limits, tiled, masks)
        for i in range(g0, g1):
            q_row = q_words[i]
            m = 0
            if not filtered:
                m = _rows_from_masks(q_row, db_rows, limits[i - g0], masks[i - g0], cand)
            if m >= top:  # rank the candidates alone: their order is the rows' order, so ties stay by position
                near = np.empty(m, np.uint16)
                for c in range(m):
                    near[c] = row_distance(q_row, db_rows, cand[c])
                rank_distances(near, top, hist, np.empty(m // 64 + 1, np.uint64), np.empty(m, np.int64), offsets, order)
                for p in range(top):
                    out_pos[i, p] = cand[order[p]]
                    out_dist[i, p] = near[order[p]]
                continue
            dist = np.empty(n, np.uint16)
            fill_distances_rows(q_row, db_rows, dist)
            if filtered:
                for j in range(n):
                    dist[j] = dist[j] if allowed[j] else excluded
            if reachable > 0:
                rank_distances(dist, reachable, hist, spare_masks, cand, offsets, order)
            for p in range(top):
                if p < reachable:
                    out_pos[i, p] = order[p]
                    out_dist[i, p] = dist[order[p]]
                else:
                    out_pos[i, p] = -1
                    out_dist[i, p] = NO_DISTANCE


def for_query_ranges(n: int, work: Callable[[int, int], None], threads: int, shared: int = 1) -> None:
    """Call work(start, stop) over ranges covering [0, n), in up to `threads` threads (the kernels release
    the GIL). A range holds at least `shared` queries where each thread still gets one (queries that share
    a pass over the rows: `nearest_rows_chunk` takes 32)."""
    threads = min(threads, n)
    if threads <= 1:
        work(0, n)
        return
    # a few ranges per thread to balance the load, but not fewer queries than share a pass
    step = max(1, -(-n // (threads * 4)), min(shared, -(-n // threads)))
    ranges = [(s, min(n, s + step)) for s in range(0, n, step)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(work, a, b) for a, b in ranges]:
            future.result()
