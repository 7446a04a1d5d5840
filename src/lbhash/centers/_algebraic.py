"""BCH and Reed-Solomon center sets (docs/centers.md), picked greedily from codes built in numpy.

Both follow the same plan: list a few binary linear codes of length `bits` with at most 2^16
codewords, enumerate each, pick `classes` codewords by farthest-first search and keep the
set with the largest minimum distance. The generator matrices come from `_fields`, equal bit
for bit to the galois ones lbhash used before (tests/centers/test_code_fields.py).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterator

import numpy as np

from lbhash.centers._fields import (MAX_DEGREE, bch_generator_matrix, cyclotomic_coset, element_bits, gf,
                                   reed_solomon_generator_matrix)
from lbhash.centers._greedy import MAX_DIMENSION, enumerate_code, greedy_max_min, words_to_signs
from lbhash.errors import InputError


def bch_centers(bits: int, classes: int) -> np.ndarray:
    """Best greedy pick from extended binary BCH codes, shortened and/or punctured to `bits`."""
    m = max(2, math.ceil(math.log2(bits)))
    if m > MAX_DEGREE:  # GF(2^16) is the largest field with a default (Matlab's) polynomial
        raise InputError(f"bch centers need bits <= {1 << MAX_DEGREE}, got bits={bits}, classes={classes}")
    best = _best_pick(_bch_generators(bits, classes, m), bits, classes)
    if best is None and m < MAX_DEGREE:  # too few codewords: shorten codes of the next length instead
        best = _best_pick(_bch_generators(bits, classes, m + 1), bits, classes)
    if best is None:
        raise InputError(
            f"bch centers need a BCH code of length {bits} with at least {classes} distinct "
            f"codewords and dimension <= {MAX_DIMENSION}, got bits={bits}, classes={classes}")
    return best


def reed_solomon_centers(bits: int, classes: int) -> np.ndarray:
    """Best greedy pick from binary images of shortened Reed-Solomon codes over GF(2^m)."""
    best = None
    m = reed_solomon_field(bits, classes)
    if m is not None:
        # the binary image has symbols*m >= bits positions: puncture the last ones
        generators = (_rs_binary_generator(m, symbols, k)[:, :bits] for symbols, k in rs_dimensions(bits, classes, m))
        best = _best_pick(generators, bits, classes)
    if best is None:
        raise InputError(
            f"reed_solomon centers need a shortened RS code over GF(2^m), m <= 8, with "
            f"ceil(bits/m) <= 2^m - 1 symbols and at least `classes` distinct codewords "
            f"(k*m <= {MAX_DIMENSION}), got bits={bits}, classes={classes}")
    return best


def _best_pick(generators: Iterator[np.ndarray], bits: int, classes: int) -> np.ndarray | None:
    """Greedy pick over each candidate code; keep the first one with the largest min distance."""
    best_words, best_dist = None, 0
    for gen in generators:
        words = enumerate_code(gen)
        result = greedy_max_min(words, classes, stop_at=best_dist)
        if result is not None:
            picked, dist = result
            best_words, best_dist = words[picked], dist
    return None if best_words is None else words_to_signs(best_words, bits)


def bch_dimensions(m: int) -> dict[int, int]:
    """{k: design distance} of the narrow-sense binary BCH codes of length n = 2^m - 1, ascending k.

    A code with design distance delta has the zeros alpha^1..alpha^(delta-1) and their cyclotomic
    cosets; k = n - (number of zeros); each k gets its largest delta (the Bose distance). Delta 1 (k = n)
    is the whole space, whose extension, the even-weight code, is the fallback for many classes on few bits.
    """
    n = (1 << m) - 1
    zeros: set[int] = set()
    dims: dict[int, int] = {n: 1}
    for delta in range(2, n + 1):
        zeros.update(cyclotomic_coset(delta - 1, n))
        dims[n - len(zeros)] = delta
    return {k: dims[k] for k in sorted(dims) if k >= 1}


@lru_cache(maxsize=None)
def _bch_generator(n: int, k: int, delta: int) -> np.ndarray:
    gen = bch_generator_matrix(n.bit_length(), delta)
    if gen.shape[0] != k:
        raise RuntimeError(f"BCH({n}, d={delta}) has k={gen.shape[0]}, expected {k}")
    # The systematic form [I_k | P] makes shortening a slice.
    return gen


def _bch_generators(bits: int, classes: int, m: int) -> Iterator[np.ndarray]:
    """Generator matrices of length `bits`: eBCH(2^m, k) shortened by s, punctured by p.

    m is first the smallest with 2^m >= bits. Shortening keeps the min distance and costs s dimensions;
    puncturing keeps the dimension and may cost p in distance. We try pure puncturing, pure shortening,
    and the two splits where the enumerated dimension is 16 or just enough for `classes`. Small k (large
    BCH distance) comes first, so that the greedy search can prune the rest early.
    """
    n = (1 << m) - 1
    excess = n + 1 - bits
    need = max(1, math.ceil(math.log2(classes)))
    for k, delta in bch_dimensions(m).items():
        splits = sorted({0, excess, k - MAX_DIMENSION, k - need})
        valid = [s for s in splits if 0 <= s <= excess and need <= k - s <= MAX_DIMENSION]
        if not valid:
            continue
        gen = _bch_generator(n, k, delta)
        extended = np.concatenate([gen, gen.sum(axis=1, keepdims=True) % 2], axis=1)
        for s in valid:
            # shorten: messages whose first s bits are 0, with those s positions dropped;
            # puncture: drop the last columns (overall parity first, then parity checks).
            yield extended[s:, s: s + bits]


def reed_solomon_field(bits: int, classes: int) -> int | None:
    """m of the field GF(2^m) used for `bits`: the smallest m >= 4 (or, for short codes, any m >= 2) whose RS
    length 2^m - 1 holds ceil(bits/m) symbols, with a dimension k < that length, 2^(k*m) >= classes and k*m <= 16.
    One field only: a rule from when each field cost seconds of galois' JIT compilation, kept so that the centers
    stay as they were."""
    for m in [4, 5, 6, 7, 8, 3, 2]:
        if 2 <= math.ceil(bits / m) <= (1 << m) - 1 and next(rs_dimensions(bits, classes, m), None):
            return m
    return None


@lru_cache(maxsize=None)
def _rs_binary_generator(m: int, symbols: int, k: int) -> np.ndarray:
    """Binary generator (k*m, symbols*m) of RS(2^m - 1, k) shortened to `symbols` symbols."""
    n = (1 << m) - 1
    s = n - symbols
    field = gf(m)
    short = reed_solomon_generator_matrix(m, k + s)[s:, s:]  # systematic [I | P]: shortening is a slice
    # The code is GF(2)-linear in its binary image; alpha^j * row (j < m) span it.
    rows = [element_bits(field, field.mul(field.exp[j], short[i])).reshape(-1) for i in range(k) for j in range(m)]
    return np.stack(rows)


def rs_dimensions(bits: int, classes: int, m: int) -> Iterator[tuple[int, int]]:
    """(symbols, k) of the shortened RS codes over GF(2^m) tried for (bits, classes)."""
    symbols = math.ceil(bits / m)
    for k in range(1, min(symbols, MAX_DIMENSION // m + 1)):
        if k * m >= math.log2(classes):
            yield symbols, k
