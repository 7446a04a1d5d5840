"""Enumerating small binary linear codes and picking far-apart codewords from them."""

from __future__ import annotations

import numpy as np

from lbhash.codes import as_words, unpack
from lbhash.errors import InputError

# Largest code dimension we enumerate: 2^16 candidates of at most a few 64-bit words each.
MAX_DIMENSION = 16


def enumerate_code(generator: np.ndarray) -> np.ndarray:
    """All 2^k codewords of the binary code spanned by the 0/1 rows of `generator` (k, n), as 64-bit words
    (2^k, ceil(n/64)) (`lbhash.codes.as_words`); codeword i is the XOR of the rows whose bit is set in i."""
    gen = np.asarray(generator, dtype=np.uint8)
    k = gen.shape[0]
    if k > MAX_DIMENSION:
        raise InputError(f"code dimension {k} is too large to enumerate (at most {MAX_DIMENSION})")
    rows = as_words(np.packbits(gen.astype(bool), axis=1, bitorder="little"))
    words = np.zeros((1 << k, rows.shape[1]), dtype=np.uint64)
    # Doubling: the words with bit i set are those without it XOR row i.
    for i in range(k):
        words[1 << i: 2 << i] = words[: 1 << i] ^ rows[i]
    return words


def words_to_signs(words: np.ndarray, bits: int) -> np.ndarray:
    """64-bit words (n, w) -> int8 +/-1 codes (n, bits)."""
    packed = np.ascontiguousarray(words).view(np.uint8)[:, : (bits + 7) // 8]
    return unpack(packed, bits)


def greedy_max_min(words: np.ndarray, count: int, stop_at: int = -1) -> tuple[np.ndarray, int] | None:
    """Farthest-first pick of `count` rows of `words` (64-bit packed codes): (indices, min pairwise distance).

    Starts from row 0; each step adds the candidate farthest from the picked set (ties: lowest index). The running
    minimum only shrinks, so the search returns None as soon as it falls to `stop_at` or below: a caller holding a set
    with min distance `stop_at` cannot gain from this one. Each step is one vectorised popcount over all candidates."""
    n = len(words)
    if count > n:
        return None
    to_set = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
    picked = np.empty(count, dtype=np.int64)
    min_dist = np.iinfo(np.int32).max
    j = 0
    for step in range(count):
        if step:
            j = int(np.argmax(to_set))  # first maximum: lowest index among ties
            min_dist = min(min_dist, int(to_set[j]))
            if min_dist <= stop_at or min_dist == 0:
                return None
        picked[step] = j
        dist = np.bitwise_count(words ^ words[j]).sum(axis=1, dtype=np.int32)
        np.minimum(to_set, dist, out=to_set)
    return picked, int(min_dist)
