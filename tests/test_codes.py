import numpy as np
import pytest

from lbhash import codes as C
from lbhash.errors import InputError


def test_to_signs_maps_zero_to_plus_one():
    np.testing.assert_array_equal(C.to_signs([[-0.5, 0.0, 2.0, -0.0]]), [[-1, 1, 1, 1]])


# hand-computed: bin(x) = +1 for x >= 0, so 0 and -0.0 give +1
REALS = [[-0.5, 0.0, 2.0, -0.0], [1e-30, -1e-30, -3.0, 0.25]]
SIGNS = [[-1, 1, 1, 1], [1, -1, -1, 1]]


def test_to_signs_gives_one_rule_for_arrays_and_tensors():
    import torch

    arr = C.to_signs(np.array(REALS, dtype=np.float32))
    assert isinstance(arr, np.ndarray) and arr.dtype == np.int8
    np.testing.assert_array_equal(arr, SIGNS)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        signs = C.to_signs(torch.tensor(REALS, dtype=dtype))
        assert isinstance(signs, torch.Tensor) and signs.dtype == torch.int8
        np.testing.assert_array_equal(signs.numpy(), SIGNS)


def test_to_signs_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        C.to_signs([[0.1, np.nan]])


def test_pack_uses_faiss_bit_layout():
    # bit j of a code is bit (j % 8) of byte j // 8, least significant first
    code = -np.ones((3, 16), dtype=np.int8)
    code[0, 0] = 1
    code[1, 9] = 1
    code[2, 7] = code[2, 15] = 1
    np.testing.assert_array_equal(C.pack(code), [[1, 0], [0, 2], [128, 128]])


@pytest.mark.parametrize("bits", [1, 7, 8, 12, 64, 100])
def test_pack_unpack_round_trip(rng, bits):
    codes = rng.choice(np.array([-1, 1], dtype=np.int8), size=(9, bits))
    packed = C.pack(codes)
    assert packed.shape == (9, (bits + 7) // 8) and packed.dtype == np.uint8
    np.testing.assert_array_equal(C.unpack(packed, bits), codes)


def test_as_packed_refuses_set_padding_bits():
    # padding bits never count in a distance: codes with them set were packed for another length
    out, bits = C.as_packed(np.array([[0xFF, 0x0F]], dtype=np.uint8), bits=12)
    assert bits == 12
    np.testing.assert_array_equal(out, [[0xFF, 0x0F]])
    with pytest.raises(InputError, match=r"row 1 has bits set beyond bits=12"):
        C.as_packed(np.array([[0xFF, 0x0F], [0xFF, 0x1F]], dtype=np.uint8), bits=12)


@pytest.mark.parametrize("bits", [8, 24, 64, 72, 130])
def test_hamming_distance_matches_inner_product(rng, bits):
    a = rng.choice([-1, 1], size=(13, bits))
    b = rng.choice([-1, 1], size=(17, bits))
    expected = (bits - a @ b.T) // 2
    np.testing.assert_array_equal(C.hamming_distance(a, b), expected)
    np.testing.assert_array_equal(C.hamming_distance(C.pack(a), C.pack(b), bits=bits), expected)


def test_hamming_distance_chunks_do_not_change_the_result(rng, monkeypatch):
    a = rng.choice([-1, 1], size=(50, 64))
    b = rng.choice([-1, 1], size=(40, 64))
    full = C.hamming_distance(a, b)
    monkeypatch.setattr(C, "_CHUNK_BYTES", 8)  # one row of a per chunk
    np.testing.assert_array_equal(C.hamming_distance(a, b), full)


def test_popcount(rng):
    codes = rng.choice([-1, 1], size=(6, 40))
    np.testing.assert_array_equal(C.popcount(codes), (codes > 0).sum(axis=1))


def test_class_centers_single_label_majority_ties_to_plus_one():
    codes = np.array([[1, 1, -1, -1],
                      [1, -1, -1, 1],
                      [-1, -1, 1, 1],
                      [-1, -1, -1, 1]])
    labels = np.array([0, 0, 1, 1])
    centers, counts = C.class_centers(codes, labels)
    # class 0: bits 2 and 4 tie (1 vs 1) -> +1; class 1: bit 3 ties -> +1
    np.testing.assert_array_equal(centers, [[1, 1, -1, 1], [-1, -1, 1, 1]])
    np.testing.assert_array_equal(counts, [2, 2])


def test_class_centers_multilabel_counts_item_in_each_class():
    codes = np.array([[1, 1], [-1, 1], [-1, -1]])
    labels = np.array([[1, 1], [1, 0], [0, 1]])
    centers, counts = C.class_centers(codes, labels)
    # class 0 = items 0, 1 -> bit 0 ties -> +1, bit 1 +1; class 1 = items 0, 2 -> ties -> +1, +1
    np.testing.assert_array_equal(centers, [[1, 1], [1, 1]])
    np.testing.assert_array_equal(counts, [2, 2])


@pytest.mark.parametrize("bad, message", [
    (np.array([[1, 0, -1]]), r"found 0 at row 0, column 1"),
    (np.array([[1.0, np.nan]]), r"found nan at row 0, column 1"),
    (np.array([[1, 2]]), r"found 2"),
])
def test_sign_codes_validation_names_value(bad, message):
    with pytest.raises(ValueError, match=message):
        C.as_packed(bad, name="query_codes")


def test_packed_codes_take_bits_from_their_width():
    packed = np.array([[0b101, 0xFF]], dtype=np.uint8)
    out, bits = C.as_packed(packed, name="query_codes")
    assert bits == 16 and out.tolist() == packed.tolist()
    with pytest.raises(ValueError, match="bits set beyond bits=12"):  # other lengths are told
        C.as_packed(packed, bits=12, name="query_codes")


def test_packed_width_must_match_bits():
    with pytest.raises(ValueError, match="8 bytes per code, but bits=16 needs 2"):
        C.as_packed(np.zeros((2, 8), dtype=np.uint8), bits=16, name="db_codes")


