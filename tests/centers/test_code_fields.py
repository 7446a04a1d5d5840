"""The BCH and Reed-Solomon generator matrices of lbhash.centers._fields: textbook values,
code properties checked by brute force, and (slow) bit-identity with the galois 0.4.11
matrices that lbhash's centers were built from before."""

import itertools

import numpy as np
import pytest

from lbhash.centers import _algebraic
from lbhash.centers._fields import (
    PRIMITIVE_POLYS,
    bch_generator_matrix,
    bch_generator_poly,
    element_bits,
    gf,
    reed_solomon_generator_matrix,
    reed_solomon_generator_poly,
)
from lbhash.centers._greedy import enumerate_code


def naive_mul(a: int, b: int, m: int) -> int:
    """Carry-less product reduced by the field's polynomial, bit by bit (no tables)."""
    product = 0
    for j in range(m):
        if b >> j & 1:
            product ^= a << j
    for j in range(2 * m - 2, m - 1, -1):
        if product >> j & 1:
            product ^= PRIMITIVE_POLYS[m] << (j - m)
    return product


def binary_remainder(numerator, divisor):
    """Remainder of GF(2) polynomials given highest degree first."""
    rest = [int(c) for c in numerator]
    divisor = [int(c) for c in divisor]
    for i in range(len(rest) - len(divisor) + 1):
        if rest[i]:
            for j, c in enumerate(divisor):
                rest[i + j] ^= c
    return rest[len(rest) - len(divisor) + 1:]


def codewords(generator):
    words = enumerate_code(generator)
    return np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, : generator.shape[1]]


def min_weight(generator):
    return int(codewords(generator)[1:].sum(axis=1).min())


# --- the field ---------------------------------------------------------------------------------

@pytest.mark.parametrize("m, degrees", [(3, [3, 1, 0]), (4, [4, 1, 0]), (5, [5, 2, 0]), (7, [7, 3, 0]),
                                        (8, [8, 4, 3, 2, 0])])  # 0x11d, the RS field of CDs and QR codes
def test_textbook_primitive_polynomials(m, degrees):
    assert PRIMITIVE_POLYS[m] == sum(1 << d for d in degrees)


@pytest.mark.parametrize("m", sorted(PRIMITIVE_POLYS))
def test_alpha_generates_the_field_and_the_tables_multiply(m):
    field = gf(m)
    n = (1 << m) - 1
    assert sorted(field.exp[:n].tolist()) == list(range(1, n + 1))  # x is primitive: order 2^m - 1
    assert np.array_equal(field.exp[n:], field.exp[:n])
    values = np.random.default_rng(m).integers(0, 1 << m, size=(2, 200))
    expected = [naive_mul(int(a), int(b), m) for a, b in values.T]
    assert field.mul(values[0], values[1]).tolist() == expected
    for a in values[0][values[0] > 0][:20]:
        assert naive_mul(int(a), field.inverse(int(a)), m) == 1


def test_element_bits_are_highest_coefficient_first():
    field = gf(4)
    assert element_bits(field, [1, 2, 8, 9]).tolist() == [[0, 0, 0, 1], [0, 0, 1, 0], [1, 0, 0, 0], [1, 0, 0, 1]]
    assert element_bits(field, field.exp[4]).tolist() == [0, 0, 1, 1]  # alpha^4 = alpha + 1


# --- BCH ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, delta, poly", [
    (3, 3, [1, 0, 1, 1]),                              # (7,4) Hamming: x^3 + x + 1
    (4, 3, [1, 0, 0, 1, 1]),                           # (15,11) Hamming: x^4 + x + 1
    (4, 5, [1, 1, 1, 0, 1, 0, 0, 0, 1]),               # BCH(15,7): x^8 + x^7 + x^6 + x^4 + 1
    (4, 7, [1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1]),         # BCH(15,5): x^10 + x^8 + x^5 + x^4 + x^2 + x + 1
    (4, 15, [1] * 15),                                 # repetition code: (x^15 - 1) / (x - 1)
    (5, 5, [1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1]),         # BCH(31,21): (x^5 + x^2 + 1)(x^5 + x^4 + x^3 + x^2 + 1)
])
def test_textbook_bch_generator_polynomials(m, delta, poly):
    assert bch_generator_poly(m, delta).tolist() == poly


def test_hamming_7_4_systematic_generator():
    # row i: x^(6-i) + (x^(6-i) mod x^3 + x + 1), highest degree first
    assert bch_generator_matrix(3, 3).tolist() == [
        [1, 0, 0, 0, 1, 0, 1],
        [0, 1, 0, 0, 1, 1, 1],
        [0, 0, 1, 0, 1, 1, 0],
        [0, 0, 0, 1, 0, 1, 1],
    ]


@pytest.mark.parametrize("m", [3, 4, 5, 6])
def test_bch_rows_are_systematic_multiples_of_g(m):
    n = (1 << m) - 1
    for k, delta in _algebraic.bch_dimensions(m).items():
        poly, gen = bch_generator_poly(m, delta), bch_generator_matrix(m, delta)
        assert gen.shape == (k, n) and len(poly) == n - k + 1
        assert binary_remainder([1] + [0] * (n - 1) + [1], poly) == [0] * (n - k)  # g divides x^n - 1
        assert np.array_equal(gen[:, :k], np.eye(k))
        for i, row in enumerate(gen):
            unit = [0] * i + [1] + [0] * (n - 1 - i)
            assert row[k:].tolist() == binary_remainder(unit, poly)
            assert not any(binary_remainder(row, poly))


@pytest.mark.parametrize("m", [3, 4, 5])
def test_bch_min_distance_reaches_the_design_distance(m):
    checked = 0
    for k, delta in _algebraic.bch_dimensions(m).items():
        if k <= 16:
            assert min_weight(bch_generator_matrix(m, delta)) >= delta, (m, k, delta)
            checked += 1
    assert checked >= 3


def test_bch_dimensions_follow_the_coset_sizes():
    assert _algebraic.bch_dimensions(4) == {1: 15, 5: 7, 7: 5, 11: 3, 15: 1}
    assert list(_algebraic.bch_dimensions(5)) == [1, 6, 11, 16, 21, 26, 31]


# --- Reed-Solomon ------------------------------------------------------------------------------

def test_textbook_reed_solomon_7_3():
    # Sklar's RS(7,3) over GF(8), x^3 + x + 1: g(x) = x^4 + a^3 x^3 + x^2 + a x + a^3 (a = 2, a^3 = 3)
    assert reed_solomon_generator_poly(3, 3).tolist() == [1, 3, 1, 2, 3]


def evaluate(poly, point, m):
    value = 0
    for c in poly:
        value = naive_mul(value, point, m) ^ int(c)
    return value


@pytest.mark.parametrize("m, k", [(3, 3), (3, 5), (4, 11), (4, 3), (5, 20)])
def test_reed_solomon_rows_vanish_on_alpha_1_to_n_minus_k(m, k):
    field, n = gf(m), (1 << m) - 1
    gen = reed_solomon_generator_matrix(m, k)
    assert gen.shape == (k, n) and np.array_equal(gen[:, :k], np.eye(k))
    for i in range(1, n - k + 1):
        root = int(field.exp[i])
        assert evaluate(reed_solomon_generator_poly(m, k), root, m) == 0
        assert all(evaluate(row, root, m) == 0 for row in gen)


@pytest.mark.parametrize("m, symbols, k", [(3, 5, 2), (3, 7, 1), (4, 6, 2), (4, 10, 3), (2, 3, 1)])
def test_shortened_reed_solomon_binary_image_is_mds_and_closed(m, symbols, k):
    binary = _algebraic._rs_binary_generator(m, symbols, k)
    assert binary.shape == (k * m, symbols * m)
    images = codewords(binary)
    symbol_weights = images.reshape(len(images), symbols, m).any(axis=2).sum(axis=1)
    assert symbol_weights[1:].min() == symbols - k + 1  # MDS: n - k + 1, also when shortened
    # the image of every GF(2^m)-combination of the symbol rows, by naive arithmetic
    n = (1 << m) - 1
    rows = reed_solomon_generator_matrix(m, k + n - symbols)[n - symbols:, n - symbols:]
    expected = set()
    for message in itertools.product(range(1 << m), repeat=k):
        word = [0] * symbols
        for coefficient, row in zip(message, rows):
            word = [w ^ naive_mul(coefficient, int(r), m) for w, r in zip(word, row)]
        expected.add(tuple(int(b) for w in word for b in format(w, f"0{m}b")))
    assert {tuple(w) for w in images.tolist()} == expected


# --- bit-identity with galois ------------------------------------------------------------------

def reachable_rs_codes():
    """Every (m, symbols, k) that reed_solomon_centers can ask for: the field and dimensions
    change only where classes crosses a power of 2, and GF(256) holds at most 2040 bits."""
    codes = set()
    for bits in range(1, 8 * 255 + 1):
        for classes in sorted({c for j in range(1, 17) for c in (1 << j, (1 << j) + 1)}):
            m = _algebraic.reed_solomon_field(bits, classes)
            if m is not None:
                codes |= {(m, symbols, k) for symbols, k in _algebraic.rs_dimensions(bits, classes, m)}
    return sorted(codes)


@pytest.fixture(scope="module")
def galois():
    return pytest.importorskip("galois", reason="the comparison needs galois (pip install 'lbhash[test]')")


# galois builds each code in Python over JIT-compiled fields: m = 10 takes about 100 s on 2 cores
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("m", range(2, 11))  # bits <= 1024
def test_bch_matrices_equal_galois(m, galois):
    n = (1 << m) - 1
    for k, delta in _algebraic.bch_dimensions(m).items():
        expected = galois.BCH(n, d=delta).G.view(np.ndarray) if 1 < k < n else None
        ours = _algebraic._bch_generator(n, k, delta)
        if expected is None:  # the ends: galois has no BCH with k = n, and lbhash never asked it for k = 1
            expected = np.eye(n, dtype=np.uint8) if k == n else np.ones((1, n), dtype=np.uint8)
        assert ours.dtype == np.uint8 and np.array_equal(ours, expected), (n, k, delta)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reed_solomon_binary_images_equal_galois(galois):
    codes = reachable_rs_codes()
    assert {m for m, _, _ in codes} == set(range(2, 9)) and len(codes) > 700
    for m, symbols, k in codes:
        n = (1 << m) - 1
        s = n - symbols
        code = galois.ReedSolomon(n, k + s)  # what lbhash built before, verbatim
        short = code.G[s:, s:]
        alpha = code.field.primitive_element
        rows = [((alpha ** j) * short[i]).vector().reshape(-1) for i in range(k) for j in range(m)]
        expected = np.asarray(np.stack(rows).view(np.ndarray), dtype=np.uint8)
        assert np.array_equal(reed_solomon_generator_matrix(m, k + s), code.G.view(np.ndarray)), (m, symbols, k)
        assert np.array_equal(_algebraic._rs_binary_generator(m, symbols, k), expected), (m, symbols, k)


@pytest.mark.slow
@pytest.mark.parametrize("m", range(2, 17))
def test_fields_equal_galois_defaults(m, galois):
    field = galois.GF(2**m, irreducible_poly=galois.matlab_primitive_poly(2, m))
    assert int(field.irreducible_poly) == PRIMITIVE_POLYS[m] and int(field.primitive_element) == 2
