"""Brute-force search references for the index tests, independent of lbhash and FAISS:
distances by unpacking every bit, orders by (distance, id) (numpy's lexsort, or Python's sort on
tuples)."""

from __future__ import annotations

import numpy as np

PAD_DISTANCE = np.iinfo(np.int32).max


def hamming(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    q = np.unpackbits(queries, axis=1).astype(np.int16)
    c = np.unpackbits(codes, axis=1).astype(np.int16)
    return (q[:, None, :] != c[None, :, :]).sum(axis=2)


def top_k(queries, codes, ids, k, allowed=None):
    """(distances, ids) rows sorted by (distance, id), padded with -1 / int32 max."""
    dist = hamming(queries, codes)
    out_d = np.full((len(queries), k), PAD_DISTANCE, np.int64)
    out_i = np.full((len(queries), k), -1, np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    for q in range(len(queries)):
        kept = np.arange(len(ids)) if allowed is None else np.flatnonzero(allowed[q])
        order = kept[np.lexsort((ids[kept], dist[q, kept]))][:k]  # by distance, then id
        out_d[q, :len(order)], out_i[q, :len(order)] = dist[q, order], ids[order]
    return out_d, out_i


def in_range(queries, codes, ids, radius, allowed=None):
    """Per query: sorted list of (distance, id) with distance <= radius."""
    dist = hamming(queries, codes)
    out = []
    for q in range(len(queries)):
        mask = np.ones(len(ids), bool) if allowed is None else allowed[q]
        out.append(sorted((int(dist[q, j]), int(ids[j])) for j in range(len(ids))
                          if mask[j] and dist[q, j] <= radius))
    return out


def split_ranges(lims, dist, ids):
    return [list(zip(dist[a:b].tolist(), ids[a:b].tolist())) for a, b in zip(lims[:-1], lims[1:])]


def rescored(queries, query_emb, codes, ids, emb, k, factor, allowed=None, cap=10_000):
    """Per query: the Hamming top k * factor by (distance, id) among the allowed items, and
    every other allowed item as close as the last of them (when they are at most `cap`), scored
    by cosine similarity in Python floats (dot / (norm * norm), 0 for a zero vector), sorted by
    (-score, distance, id): [(score, distance, id), ...][:k]. Exact for the tests' vectors, whose
    entries are 0 and +/-1 with four non-zeros (unit entries +/-0.5: float16 holds them)."""
    dist = hamming(queries, codes)
    out = []

    def cosine(a, b):
        a, b = [float(v) for v in a], [float(v) for v in b]
        na, nb = sum(v * v for v in a) ** 0.5, sum(v * v for v in b) ** 0.5
        return 0.0 if na == 0 or nb == 0 else sum(x * y for x, y in zip(a, b)) / (na * nb)

    for q in range(len(queries)):
        mask = np.ones(len(ids), bool) if allowed is None else allowed[q]
        ranked = sorted((int(dist[q, j]), int(ids[j]), j) for j in range(len(ids)) if mask[j])
        cands = ranked[:k * factor]
        if len(ranked) > k * factor:
            tied = [c for c in ranked if c[0] <= cands[-1][0]]
            cands = tied if len(tied) <= cap else cands
        scored = [(cosine(query_emb[q], emb[j]), d, i) for d, i, j in cands]
        out.append(sorted(scored, key=lambda t: (-t[0], t[1], t[2]))[:k])
    return out


def ternary_embeddings(rng, n, dim, nonzero=4):
    """Rows of 0 and +/-1 with `nonzero` non-zeros: cosines are exact multiples of 1/nonzero, so
    equal scores are ties between different items."""
    out = np.zeros((n, dim))
    for r in range(n):
        out[r, rng.choice(dim, nonzero, replace=False)] = rng.choice([-1.0, 1.0], nonzero)
    return out


def random_codes(rng, n, bits):
    return rng.integers(0, 256, size=(n, bits // 8), dtype=np.uint8)


def clustered_codes(rng, n, bits, centers=20, max_flips=3):
    """Codes around a few centers, each with 0..max_flips random bits flipped: many ties."""
    base = random_codes(rng, centers, bits)
    which = rng.integers(0, centers, n)
    bitsets = np.unpackbits(base[which], axis=1)
    flips = rng.integers(0, max_flips + 1, n)
    # each row's bits to flip: the first `flips` columns of its own random order, drawn for all rows
    # at once by the first steps of a Fisher-Yates shuffle (a choice per row took seconds on 20,000 rows)
    steps, rows = min(max_flips, bits), np.arange(n)
    cols = np.tile(np.arange(bits, dtype=np.int16), (n, 1))
    for j in range(steps):
        other = rng.integers(j, bits, n)
        cols[rows, j], cols[rows, other] = cols[rows, other], cols[rows, j].copy()
    chosen = np.arange(steps) < flips[:, None]
    bitsets[np.broadcast_to(rows[:, None], chosen.shape)[chosen], cols[:, :steps][chosen]] ^= 1
    return np.packbits(bitsets, axis=1), which


def tie_aware_recall(found_d, exact_d, k):
    """Share of the k returned items whose distance is at most the exact k-th distance."""
    kth = exact_d[:, k - 1][:, None]
    good = (found_d[:, :k] <= kth) & (found_d[:, :k] != PAD_DISTANCE)
    valid = exact_d[:, :k] != PAD_DISTANCE
    return good.sum() / valid.sum()


def allowed_rows(query_labels, item_labels):
    """Items sharing at least one label with each query row (multi-hot inputs)."""
    return (query_labels.astype(int) @ item_labels.astype(int).T) > 0


def near_queries(rng, codes, m, flips=2):
    """m queries drawn like the data: random items with `flips` extra bits flipped."""
    picked = np.unpackbits(codes[rng.choice(len(codes), m, replace=False)], axis=1)
    for row in picked:
        row[rng.choice(len(row), flips, replace=False)] ^= 1
    return np.packbits(picked, axis=1)


def tied_items(n=400, seed=0):
    """Class codes of 8 bits drawn from 4 values (hundreds tie), 16-bit instance codes, 3 labels."""
    rng = np.random.default_rng(seed)
    codes = rng.choice(np.array([0, 1, 3, 255], np.uint8), size=(n, 1))
    inst = rng.integers(0, 256, (n, 2), dtype=np.uint8)
    inst[::7] = inst[0]  # ties in the instance codes too
    return codes, inst, rng.integers(0, 3, n)


def brute_blend(source, q, qi, k, looks_like, factor, power, emb=None, center=None):
    """The blend's ranking (lbhash.index.blend, docs/instance-codes.md "Instance codes") recomputed from its
    definition with the similarity raised to `power`, over the items of `source`, a flat `CodeIndex` read
    only for what it holds (ids, both codes, the stored float16 rows): per query, (ids, scores) of the top k."""
    held = source.ids()
    dc = hamming(q, source.get_codes(held))
    di = hamming(qi, source.get_instance_codes(held))
    ibits = qi.shape[1] * 8
    out = []
    for r in range(len(q)):
        wanted = min(k * factor, len(held))
        by_class = held[np.lexsort((held, dc[r]))[:wanted]]
        by_look = held[np.lexsort((held, di[r]))[:wanted]]
        cand = np.union1d(by_class, by_look)
        pos = np.searchsorted(held, cand)
        if emb is None:
            sim = np.cos(np.pi * di[r][pos] / ibits)
        else:
            stored = source.get_embeddings(cand).astype(np.float64) - center
            query = emb[r] / np.linalg.norm(emb[r])
            query = query.astype(np.float16).astype(np.float64) - center
            sim = stored @ query / np.linalg.norm(stored, axis=1) / np.linalg.norm(query)
        sharp = np.sign(sim) * np.abs(sim) ** power
        weight = looks_like[r] if np.ndim(looks_like) else looks_like  # (one per query, or one for all)
        score = (1 - weight) * (1 - 2 * dc[r][pos] / (q.shape[1] * 8)) + weight * sharp
        order = np.lexsort((cand, di[r][pos], dc[r][pos], -score))[:k]
        out.append((cand[order], score[order]))
    return out


def brute_agreeing(source, q, qi, nearest=20, near=1 / 8, low=0.7, high=0.95):
    """Each query's looks_like where the two codes alone rank and the search leaves it out (lbhash.index.blend,
    `agreeing_looks_like`), from its definition over every item of `source`: the share of its `nearest`
    items by instance code (ties by id) whose class code is within `near` of the class bits of its own, from
    `low` (all) to `high` (none)."""
    held = source.ids()
    dc = hamming(q, source.get_codes(held))
    di = hamming(qi, source.get_instance_codes(held))
    share = np.array([np.mean(dc[r][np.lexsort((held, di[r]))[:nearest]] <= near * q.shape[1] * 8)
                      for r in range(len(q))])
    return low + (high - low) * (1 - share)
