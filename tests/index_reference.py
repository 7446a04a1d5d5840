"""Brute-force search references for the index tests, independent of lbhash and FAISS:
distances by unpacking every bit, orders by Python's sort on (distance, id) tuples."""

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
    for q in range(len(queries)):
        mask = np.ones(len(ids), bool) if allowed is None else allowed[q]
        pairs = sorted((int(dist[q, j]), int(ids[j])) for j in range(len(ids)) if mask[j])[:k]
        for r, (d, i) in enumerate(pairs):
            out_d[q, r], out_i[q, r] = d, i
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
    for row, f in enumerate(flips):
        cols = rng.choice(bits, size=f, replace=False)
        bitsets[row, cols] ^= 1
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
