"""GF(2^m) arithmetic and the generator matrices of binary BCH and Reed-Solomon codes, in numpy.

The matrices are the ones galois 0.4.11 gives (`galois.BCH(n, d=delta).G`,
`galois.ReedSolomon(n, k).G`), which lbhash used before, so that centers stay the same:
- the field GF(2^m) is built on Matlab's default primitive polynomial (galois'
  `matlab_primitive_poly(2, m)`, the default of both codes), with alpha = x as primitive element;
- the codes are narrow-sense: their generator polynomial has the zeros alpha^1, alpha^2, ...;
- the generator matrix is systematic, [I_k | P], with coefficients of the highest degree first:
  row i is the codeword x^(n-1-i) + (x^(n-1-i) mod g(x)).

Field elements are integers whose bit j is the coefficient of x^j; `element_bits` lists
them highest coefficient first (galois' `FieldArray.vector()`). Polynomials are arrays of
coefficients, highest degree first.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

# Matlab's default primitive polynomial of GF(2^m) (gfprimdf(m)), bit j = coefficient of x^j:
# the lexicographically first primitive one with fewest terms, except for m = 7, 14 and 16.
PRIMITIVE_POLYS = {
    2: 0b111, 3: 0b1011, 4: 0b10011, 5: 0b100101, 6: 0b1000011, 7: 0b10001001,  # x^7 + x^3 + 1
    8: 0b100011101, 9: 0b1000010001, 10: 0b10000001001, 11: 0b100000000101,
    12: 0b1000001010011, 13: 0b10000000011011, 14: 0b100010001000011,  # x^14 + x^10 + x^6 + x + 1
    15: 0b1000000000000011, 16: 0b10001000000001011,  # x^16 + x^12 + x^3 + x + 1
}
MAX_DEGREE = max(PRIMITIVE_POLYS)


class Field(NamedTuple):
    """GF(2^m) by log/antilog tables: exp[i] = alpha^i for 0 <= i < 2(2^m - 1), log[exp[i]] = i."""

    m: int
    exp: np.ndarray
    log: np.ndarray

    @property
    def order(self) -> int:
        return 1 << self.m

    def mul(self, a, b) -> np.ndarray:
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        product = self.exp[self.log[a] + self.log[b]]
        return np.where((a == 0) | (b == 0), 0, product)

    def inverse(self, a: int) -> int:
        if a == 0:
            raise ZeroDivisionError("0 has no inverse in GF(2^m)")
        return int(self.exp[(self.order - 1 - self.log[a]) % (self.order - 1)])


@lru_cache(maxsize=None)
def gf(m: int) -> Field:
    """GF(2^m) on Matlab's default primitive polynomial, 2 <= m <= MAX_DEGREE."""
    if m not in PRIMITIVE_POLYS:
        raise ValueError(f"GF(2^m) is available for 2 <= m <= {MAX_DEGREE}, got m={m}")
    n = (1 << m) - 1
    exp = np.zeros(2 * n, dtype=np.int64)
    value = 1
    for i in range(2 * n):
        exp[i] = value
        value <<= 1  # times alpha = x, reduced by the primitive polynomial
        if value >> m:
            value ^= PRIMITIVE_POLYS[m]
    log = np.zeros(n + 1, dtype=np.int64)  # log[0] is never read: mul masks zeros
    log[exp[:n]] = np.arange(n)
    return Field(m, exp, log)


def element_bits(field: Field, values) -> np.ndarray:
    """(..., m) 0/1 coefficients of field elements, highest power of x first."""
    shifts = np.arange(field.m - 1, -1, -1)
    return ((np.asarray(values, dtype=np.int64)[..., None] >> shifts) & 1).astype(np.uint8)


def times_linear(field: Field, poly: np.ndarray, root: int) -> np.ndarray:
    """poly(x) * (x - root); in characteristic 2, minus is plus."""
    return np.append(poly, 0) ^ np.insert(field.mul(poly, root), 0, 0)


def cyclotomic_coset(i: int, n: int) -> tuple[int, ...]:
    """{i, 2i, 4i, ...} mod n: the exponents of the conjugates of alpha^i over GF(2)."""
    coset = [i % n]
    while (2 * coset[-1]) % n != coset[0]:
        coset.append(2 * coset[-1] % n)
    return tuple(coset)


@lru_cache(maxsize=None)
def minimal_poly(m: int, leader: int) -> np.ndarray:
    """Minimal polynomial over GF(2) of alpha^leader: the product of x - alpha^j over its coset."""
    field = gf(m)
    poly = np.ones(1, dtype=np.int64)
    for j in cyclotomic_coset(leader, field.order - 1):
        poly = times_linear(field, poly, int(field.exp[j]))
    if np.any(poly > 1):
        raise RuntimeError(f"minimal polynomial of alpha^{leader} in GF(2^{m}) is not binary")
    return poly


def bch_generator_poly(m: int, delta: int) -> np.ndarray:
    """g(x) of the narrow-sense binary BCH code of length 2^m - 1 and design distance delta:
    the lcm of the minimal polynomials of alpha^1 .. alpha^(delta-1), one per coset."""
    n = (1 << m) - 1
    poly, covered = np.ones(1, dtype=np.int64), set()
    for i in range(1, delta):
        if i % n in covered:
            continue
        covered.update(cyclotomic_coset(i, n))
        poly = np.convolve(poly, minimal_poly(m, i % n)) % 2
    return poly


def reed_solomon_generator_poly(m: int, k: int) -> np.ndarray:
    """g(x) = (x - alpha)(x - alpha^2)...(x - alpha^(n-k)) of RS(2^m - 1, k) over GF(2^m)."""
    field = gf(m)
    poly = np.ones(1, dtype=np.int64)
    for i in range(1, (1 << m) - k):
        poly = times_linear(field, poly, int(field.exp[i]))
    return poly


def systematic_generator(field: Field, n: int, poly: np.ndarray) -> np.ndarray:
    """(k, n) systematic generator [I_k | P] of the cyclic code of length n generated by `poly`.

    P's row i is x^(n-1-i) mod g(x). Since g divides x^n - 1, row 0 is x^-1 mod g, that is
    (g(x) - g_0) / (g_0 x); each next row is the previous one times x^-1 (galois' recurrence).
    """
    r = len(poly) - 1
    k = n - r
    parity = np.zeros((k, r), dtype=np.int64)
    if r:
        parity[0] = field.mul(poly[:-1], field.inverse(int(poly[-1])))
        for i in range(1, k):
            parity[i, 1:] = parity[i - 1, :-1]
            parity[i] ^= field.mul(parity[i - 1, -1], parity[0])
    return np.concatenate([np.eye(k, dtype=np.int64), parity], axis=1)


def bch_generator_matrix(m: int, delta: int) -> np.ndarray:
    """0/1 uint8 systematic generator of the narrow-sense binary BCH(2^m - 1, d=delta) code:
    galois' `BCH(n, d=delta).G`."""
    poly = bch_generator_poly(m, delta)
    return systematic_generator(gf(m), (1 << m) - 1, poly).astype(np.uint8)


def reed_solomon_generator_matrix(m: int, k: int) -> np.ndarray:
    """(k, 2^m - 1) systematic generator over GF(2^m) of RS(2^m - 1, k), elements as integers:
    galois' `ReedSolomon(n, k).G`."""
    return systematic_generator(gf(m), (1 << m) - 1, reed_solomon_generator_poly(m, k))
