"""Hadamard and random center sets, and pairwise-distance statistics of a set."""

from __future__ import annotations

import numpy as np

from lbhash.codes import hamming_distance, pack, unpack
from lbhash.errors import InputError

# Pair distances computed per random draw are capped so that many classes stay fast.
_RANDOM_PAIR_BUDGET = 2 * 10**7
_RANDOM_MAX_DRAWS = 1000


def hadamard_centers(bits: int, classes: int) -> np.ndarray:
    """The first `classes` rows of [H; -H], H = scipy.linalg.hadamard(bits) (CSQ's centers): min distance
    bits/2 (1 at bits = 1), as rows of H are mutually at bits/2 and at `bits` from their negations."""
    if bits & (bits - 1) or classes > 2 * bits:
        raise InputError(
            "hadamard centers need bits to be a power of 2 and classes <= 2*bits, "
            f"got bits={bits}, classes={classes}")
    from scipy.linalg import hadamard

    h = hadamard(bits).astype(np.int8)
    return np.concatenate([h, -h])[:classes]


def random_centers(bits: int, classes: int, seed: int, draws: int | None = None) -> np.ndarray:
    """Best of `draws` sets of uniform +/-1 codewords by min pairwise distance (ties: the earliest). Each
    draw has distinct rows (duplicates are redrawn), usable even when the classes nearly fill 2^bits."""
    if (classes - 1).bit_length() > bits:  # classes > 2^bits, without a float that overflows
        raise InputError(f"random centers need classes <= 2^bits, got bits={bits}, classes={classes}")
    if draws is None:  # 1000, fewer when classes^2 pairs get large
        draws = int(max(1, min(_RANDOM_MAX_DRAWS, _RANDOM_PAIR_BUDGET // (classes * classes))))
    rng = np.random.default_rng(seed)
    best, best_dist = None, -1
    for _ in range(draws):
        codes = _distinct_codes(rng, bits, classes)
        dist = pairwise_distance_stats(codes)[0]
        if dist > best_dist:
            best, best_dist = codes, dist
    return best


def _distinct_codes(rng: np.random.Generator, bits: int, classes: int) -> np.ndarray:
    if bits <= 20:
        # Small spaces: sample distinct integers, i.e. uniform codes conditioned on distinct.
        ints = rng.choice(1 << bits, size=classes, replace=False).astype("<u4")
        return unpack(ints[:, None].view(np.uint8)[:, : (bits + 7) // 8], bits)
    codes = np.where(rng.random((classes, bits)) < 0.5, -1, 1).astype(np.int8)
    while True:  # duplicates are rare at > 20 bits: redraw them until none is left
        _, first = np.unique(pack(codes), axis=0, return_index=True)
        dup = np.setdiff1d(np.arange(classes), first)
        if not len(dup):
            return codes
        codes[dup] = np.where(rng.random((len(dup), bits)) < 0.5, -1, 1)


def pairwise_distance_stats(codes: np.ndarray) -> tuple[int, float]:
    """(min, mean) Hamming distance over distinct pairs of rows, in row blocks (bounded memory)."""
    packed = pack(codes)
    n, bits = codes.shape
    block = max(1, (32 << 20) // (4 * n))
    lo, total = np.iinfo(np.int64).max, 0
    for start in range(0, n, block):
        d = hamming_distance(packed[start:start + block], packed, bits=bits)
        rows = np.arange(start, min(n, start + block))
        d[rows - start, rows] = bits + 1  # leave out each row's distance to itself
        lo = min(lo, int(d.min()))
        total += int(d.sum(dtype=np.int64)) - (bits + 1) * len(rows)
    return lo, total / (n * (n - 1))
