"""The flat index's scan (lbhash.ranking.nearest_rows_chunk, through FlatEngine.knn) against
the brute-force reference, on the paths a plain search does not reach: codes of every word
type and of several words, more rows than the guess samples, a filter, and a guess that
falls short."""

import numpy as np
import pytest

from index_reference import clustered_codes, top_k
from lbhash.index._engines import FlatEngine, Rows

PAD = np.iinfo(np.int32).max


def knn(codes, queries, k, allowed=None, ids=None):
    ids = np.arange(len(codes), dtype=np.int64) if ids is None else ids
    return FlatEngine(codes.shape[1] * 8, {}).knn(Rows(ids, codes), queries, k, allowed)


@pytest.mark.parametrize("bits", [8, 16, 24, 32, 48, 64, 128, 200])  # uint8 to uint64 words, 1 to 3 words
@pytest.mark.parametrize("n", [63, 64, 1000, 20_001])  # 20,001: a strided sample, and a ragged last block
def test_scan_equals_brute_force_with_ties_by_position(rng, bits, n):
    codes, _ = clustered_codes(rng, n, bits, centers=5, max_flips=max(1, bits // 16))
    queries = np.concatenate([codes[:2], clustered_codes(rng, 3, bits, centers=5, max_flips=2)[0]])
    for k in (1, 10, n):
        dist, ids = knn(codes, queries, k)
        ref_d, ref_i = top_k(queries, codes, np.arange(n), k)
        np.testing.assert_array_equal(ids, ref_i)
        np.testing.assert_array_equal(dist, ref_d)


@pytest.mark.parametrize("bits", [16, 64, 128])
def test_a_filter_keeps_only_allowed_rows_and_pads_like_faiss(rng, bits):
    n = 5000
    codes, _ = clustered_codes(rng, n, bits, centers=4, max_flips=2)
    queries = codes[:4]
    for share in (0.5, 0.001, 0.0):
        allowed = rng.random(n) < share
        dist, ids = knn(codes, queries, 20, allowed)
        ref_d, ref_i = top_k(queries, codes, np.arange(n), 20, np.tile(allowed, (len(queries), 1)))
        np.testing.assert_array_equal(ids, ref_i)
        np.testing.assert_array_equal(dist, ref_d)
        assert (dist[ids < 0] == PAD).all() and (ids < 0).sum() == len(queries) * max(0, 20 - allowed.sum())


def test_a_guess_that_falls_short_is_redone_exactly(rng):
    # 40,000 rows are sampled every second row: 80 sampled rows equal to the query make the
    # guessed cutoff 0, but only those 80 rows lie within it, fewer than k = 100
    n, bits = 40_000, 64
    query = rng.integers(0, 256, (1, bits // 8), np.uint8)
    codes = np.repeat(query, n, axis=0)
    codes[:, 0] ^= np.uint8(0b11111)      # distance 5
    codes[1::2, 1] ^= np.uint8(0b111)     # odd rows: distance 8
    codes[0:160:2] = query                # 80 sampled rows at distance 0
    codes[1001] = query
    codes[1001, 0] ^= np.uint8(1)         # an unsampled row at distance 1
    dist, ids = knn(codes, query, 100)
    ref_d, ref_i = top_k(query, codes, np.arange(n), 100)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_array_equal(dist, ref_d)
    assert ids[0, 80] == 1001 and dist[0, 81] == 5


def test_positions_map_to_the_rows_ids(rng):
    codes, _ = clustered_codes(rng, 300, 32, centers=3, max_flips=2)
    ids = rng.choice(10**9, 300, replace=False).astype(np.int64)
    dist, got = knn(codes, codes[:3], 300, ids=ids)
    ref_d, ref_pos = top_k(codes[:3], codes, np.arange(300), 300)  # ties by position, not by id
    np.testing.assert_array_equal(dist, ref_d)
    np.testing.assert_array_equal(got, ids[ref_pos])


@pytest.mark.parametrize("bits", [16, 64, 128, 256, 320])  # vector rows of 1, 2 and 4 words; 5 words scalar
def test_a_batch_of_queries_sharing_a_pass_equals_each_query_alone_on_read_only_codes(rng, bits):
    # 40 queries: groups of 32 and 8 share the pass over the rows; between queries whose
    # sampled guess holds, one whose guess falls short (80 sampled rows equal to it, as above)
    n = 33_000
    codes, _ = clustered_codes(rng, n, bits, centers=6, max_flips=max(1, bits // 16))
    lonely = rng.integers(0, 256, bits // 8, np.uint8)
    codes[0:160:2] = lonely
    codes.setflags(write=False)  # a served index's codes are a read-only map
    queries = np.concatenate([codes[rng.integers(0, n, 20)], lonely[None], clustered_codes(rng, 19, bits, 6, 3)[0]])
    dist, ids = knn(codes, queries, 100)
    alone = [knn(codes, q[None], 100) for q in queries]
    np.testing.assert_array_equal(dist, np.concatenate([d for d, _ in alone]))
    np.testing.assert_array_equal(ids, np.concatenate([i for _, i in alone]))
    every = np.bitwise_count(queries[:, None, :] ^ codes[None]).sum(axis=2)  # numpy's brute force
    ref_i = np.argsort(every, axis=1, kind="stable")[:, :100]
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_array_equal(dist, np.take_along_axis(every, ref_i, axis=1))
    assert (dist[20] == 0).sum() == 80 and dist[20, 80] > 0  # the short guess was redone


@pytest.mark.parametrize("n, threads, shared, ranges", [
    (32, 2, 32, [(0, 16), (16, 32)]),            # each thread one range of 16: sharing beats balance
    (1000, 2, 32, [(a, min(1000, a + 125)) for a in range(0, 1000, 125)]),  # 8 ranges of 125
    (10, 2, 1, [(a, a + 2) for a in range(0, 10, 2)]),  # nothing shared: a few ranges per thread
    (5, 1, 32, [(0, 5)]),
])
def test_query_ranges_keep_queries_that_share_a_pass_together(n, threads, shared, ranges):
    from lbhash.ranking import for_query_ranges

    seen = []
    for_query_ranges(n, lambda a, b: seen.append((a, b)), threads, shared)
    assert sorted(seen) == ranges


def test_codes_at_an_unaligned_address_scan_as_aligned_ones(rng):
    # a mapped index.faiss's codes start wherever FAISS's header ends: a uint64 view of them may
    # be unaligned
    codes, _ = clustered_codes(rng, 5000, 64, centers=4, max_flips=3)
    buffer = np.empty(codes.size + 3, np.uint8)
    shifted = buffer[3:].reshape(codes.shape)
    shifted[:] = codes
    assert not shifted.view(np.uint64).flags.aligned
    queries = codes[rng.integers(0, 5000, 5)]
    for got, expected in zip(knn(shifted, queries, 20), knn(codes, queries, 20)):
        np.testing.assert_array_equal(got, expected)
