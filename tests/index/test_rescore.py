"""The ranking by stored embeddings alone (blended_search without instance codes, looks_like 1: the
Hamming top k * factor and the boundary's ties re-scored by cosine) over every backend and through a
Searcher, against a brute-force reference (index_reference.rescored), tie order included; the
embeddings an index keeps through changes, saves and loads, and the one-line refusals."""

import json
from typing import NamedTuple

import numpy as np
import pytest

from index_fakes import FakeEncoder, fake_milvus
from index_reference import PAD_DISTANCE, clustered_codes, random_codes, rescored, ternary_embeddings
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.serving.searcher import Searcher
from lbhash.index.rescore import unit_rows
from lbhash.limits import MAX_RESCORE_CANDIDATES

BITS, DIM = 16, 6


class Ranked(NamedTuple):
    scores: np.ndarray
    distances: np.ndarray
    ids: np.ndarray


def by_cosine(index, queries, k, q_emb, labels=None, factor=4) -> Ranked:
    """The ranking with the queries' embeddings alone (no instance codes, the default looks_like 1)."""
    got = blended_search(index, Queries(queries, q_emb), k, labels=labels, factor=factor)
    assert not got.same.any() and (got.instance_distances == PAD_DISTANCE).all()  # nothing calibrated to mark
    return Ranked(got.scores, got.distances, got.ids)


def assert_matches(got, expected, k):
    scores, dist, ids = got
    for q, rows in enumerate(expected):
        n = len(rows)
        assert ids[q, :n].tolist() == [i for _, _, i in rows]
        # exact: the vectors' cosines are dyadic; the score is the cosine cubed at looks_like 1
        assert scores[q, :n].tolist() == [s ** 3 for s, _, _ in rows]
        assert dist[q, :n].tolist() == [d for _, d, _ in rows]
        assert (ids[q, n:] == -1).all() and np.isneginf(scores[q, n:]).all() and (dist[q, n:] == PAD_DISTANCE).all()


@pytest.fixture
def tied(rng):
    """Repeated codes and embeddings (ties in score and in distance), ids out of order, a zero
    query embedding (every score 0: the Hamming order)."""
    base, _ = clustered_codes(rng, 30, BITS, centers=6, max_flips=2)
    pick = rng.integers(0, 30, 120)
    codes = base[pick]
    emb = ternary_embeddings(rng, 30, DIM)[pick % 11]
    ids = rng.permutation(1000)[:120].astype(np.int64) * 7
    labels = rng.integers(0, 3, 120)
    queries = codes[rng.integers(0, 120, 9)] ^ rng.integers(0, 2, (9, BITS // 8), dtype=np.uint8)
    q_emb = ternary_embeddings(rng, 9, DIM)
    q_emb[3] = 0
    return codes, ids, labels, emb, queries, q_emb


def built(codes, ids, labels, emb, kind="flat", **params):
    index = CodeIndex(BITS, kind, **params)
    index.add(codes, ids=ids, labels=labels, embeddings=emb)
    return index


@pytest.mark.parametrize("k, factor", [(5, 1), (5, 4), (10, 3), (200, 2)])
def test_flat_rescoring_matches_the_brute_force_reference_with_ties(tied, k, factor):
    codes, ids, labels, emb, queries, q_emb = tied
    got = by_cosine(built(codes, ids, labels, emb), queries, k, q_emb, factor=factor)
    assert got.scores.dtype == np.float64 and got.distances.dtype == np.int32 and got.ids.dtype == np.int64
    assert got.scores.shape == (9, k)
    expected = rescored(queries, q_emb, codes, ids, emb, k, factor)
    assert_matches(got, expected, k)
    # the case must hold ties that the distance, and ties that only the id, break
    pairs = [(r[t], r[t + 1]) for r in expected for t in range(len(r) - 1)]
    assert k * factor < 20 or any(a[0] == b[0] and a[1] < b[1] for a, b in pairs)
    assert k * factor < 20 or any(a[0] == b[0] and a[1] == b[1] for a, b in pairs)
    zero = by_cosine(built(codes, ids, labels, emb), queries[3:4], k, q_emb[3:4], factor=factor)
    hamming = built(codes, ids, labels, emb).search(queries[3:4], k)
    assert zero.ids.tolist() == hamming.ids.tolist() and (zero.scores[zero.ids >= 0] == 0).all()


def test_changed_index_rescores_as_its_contents(tied, rng):
    """Upserts (the tail), removals (tombstones) and a fold keep each code with its embedding."""
    codes, ids, labels, emb, queries, q_emb = tied
    index = built(codes, ids, labels, emb)
    codes, emb = codes.copy(), emb.copy()
    for step in range(3):
        pick = rng.choice(len(ids), 15, replace=False)
        codes[pick] = random_codes(rng, 15, BITS)
        emb[pick] = ternary_embeddings(rng, 15, DIM)
        index.add(codes[pick], ids=ids[pick], labels=labels[pick], upsert=True, embeddings=emb[pick])
    gone = rng.choice(len(ids), 10, replace=False)
    index.remove(ids[gone])
    keep = np.setdiff1d(np.arange(len(ids)), gone)
    np.testing.assert_array_equal(index.get_embeddings(ids[keep]), unit_rows(emb[keep]))
    expected = rescored(queries, q_emb, codes[keep], ids[keep], emb[keep], 6, 3)
    assert_matches(by_cosine(index, queries, 6, q_emb, factor=3), expected, 6)
    index.apply_fold(index.prepare_fold())
    assert_matches(by_cosine(index, queries, 6, q_emb, factor=3), expected, 6)


def test_label_filtered_rescoring(tied):
    codes, ids, labels, emb, queries, q_emb = tied
    filters = np.arange(9) % 3
    got = by_cosine(built(codes, ids, labels, emb), queries, 6, q_emb, filters, 3)
    assert_matches(got, rescored(queries, q_emb, codes, ids, emb, 6, 3, [labels == f for f in filters]), 6)


@pytest.mark.parametrize("kind, params", [("ivf", {"nlist": 4, "nprobe": 1}), ("multihash", {"nflip": 0})])
def test_every_kind_rescores_its_own_candidates(rng, kind, params):
    """Approximate kinds: the re-scoring of exactly the candidates that kind's search returns,
    widened to what its own range search finds within the last candidate's distance."""
    codes, _ = clustered_codes(rng, 400, BITS, centers=8, max_flips=3)
    emb, labels = ternary_embeddings(rng, 400, DIM), rng.integers(0, 2, 400)
    index = built(codes, np.arange(400), labels, emb, kind, **params)
    assert index.is_trained
    queries, q_emb = random_codes(rng, 6, BITS), ternary_embeddings(rng, 6, DIM)
    for filters in (None, np.array([0, 1, 1, 0, 1, 0])):
        dist, cand = index.search(queries, 12, labels=filters)
        got = by_cosine(index, queries, 4, q_emb, filters, 3)
        widened = 0
        for q in range(6):
            pool = cand[q][cand[q] >= 0]
            if cand[q, -1] >= 0:
                row = None if filters is None else filters[q:q + 1]
                near = index.range_search(queries[q:q + 1], int(dist[q, -1]), row).ids
                widened += len(near) > len(pool)
                pool = near if len(near) > len(pool) else pool
            ref = rescored(queries[q:q + 1], q_emb[q:q + 1], index.get_codes(pool), pool, emb[pool], 4, len(pool))
            assert_matches(tuple(a[q:q + 1] for a in got), ref, 4)
        # the ivf case holds ties at the boundary; multihash with nflip 0 finds only its query's
        # own code bucket within any radius, so its candidates have nothing to widen to
        assert widened or kind == "multihash"


def test_milvus_rescores_as_the_flat_index(tied):
    """A MilvusIndex over the fake collection (no server): its embeddings travel with its codes,
    and its re-scoring is the flat index's (tests/index/test_milvus.py repeats this on a server)."""
    codes, ids, labels, emb, queries, q_emb = tied
    milvus = fake_milvus(BITS, embedding_dim=DIM)
    milvus.add(codes, ids=ids, labels=labels, embeddings=emb)
    flat = built(codes, ids, labels, emb)
    np.testing.assert_array_equal(milvus.get_embeddings(ids[::-1]), flat.get_embeddings(ids[::-1]))
    for filters in (None, np.arange(9) % 3):
        for a, b in zip(by_cosine(milvus, queries, 7, q_emb, filters, 4),
                        by_cosine(flat, queries, 7, q_emb, filters, 4)):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(InputError, match="keeps a 6-dimensional embedding per item"):
        milvus.add(codes[:1], ids=[99999])
    with pytest.raises(InputError, match="the index keeps no embeddings"):
        fake_milvus(BITS).add(codes[:1], ids=[1], embeddings=emb[:1])


def test_padding_small_and_empty_indexes(rng):
    index = CodeIndex(BITS, embedding_dim=DIM)
    queries, q_emb = random_codes(rng, 2, BITS), rng.standard_normal((2, DIM))
    scores, dist, ids = by_cosine(index, queries, 3, q_emb)
    assert (ids == -1).all() and np.isneginf(scores).all() and (dist == PAD_DISTANCE).all()
    index.add(random_codes(rng, 2, BITS), ids=[5, 9], embeddings=rng.standard_normal((2, DIM)))
    scores, dist, ids = by_cosine(index, queries, 3, q_emb)
    assert sorted(ids[0, :2].tolist()) == [5, 9] and ids[0, 2] == -1 and np.isneginf(scores[:, 2]).all()
    assert (np.abs(scores[:, :2]) <= 1.001).all()
    assert by_cosine(index, queries[:0], 3, q_emb[:0]).ids.shape == (0, 3)


def test_float_embeddings_score_their_cosine(rng):
    """Gaussian embeddings: scores are the float cosine to float16's precision, in order."""
    codes, emb = random_codes(rng, 50, BITS), rng.standard_normal((50, 32)) * 1e3
    index = CodeIndex(BITS)
    index.add(codes, embeddings=emb)
    q = rng.standard_normal((3, 32))
    scores, _, ids = by_cosine(index, codes[:3], 50, q, factor=1)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (emb / np.linalg.norm(emb, axis=1, keepdims=True)).T
    np.testing.assert_allclose(np.cbrt(scores), np.take_along_axis(cos, ids, 1), atol=2e-3)
    assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("q_emb, factor, fragment", [
    (np.zeros((3, DIM)), 4, "query embeddings has 3 rows but there are 2 codes"),
    (np.zeros((2, 5)), 4, "query embeddings are 5-dimensional but the index keeps 6-dimensional embeddings"),
    (np.array([[np.nan] * DIM, [0.0] * DIM]), 4, "query embeddings holds nan at row 0, column 0"),
    (np.full((2, DIM), "a"), 4, "query embeddings must be a 2-D array of real numbers"),
    (np.zeros((2, DIM)), 0, "rescore_factor must be a positive integer"),
    (np.zeros((2, DIM)), True, "rescore_factor must be a positive integer"),
])
def test_bad_rescore_input_is_one_line(rng, q_emb, factor, fragment):
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 10, BITS), embeddings=rng.standard_normal((10, DIM)))
    with pytest.raises(InputError, match=fragment) as err:
        by_cosine(index, random_codes(rng, 2, BITS), 3, q_emb, factor=factor)
    assert "\n" not in str(err.value)


def test_codes_and_embeddings_go_together_or_are_refused(rng):
    codes = random_codes(rng, 4, BITS)
    plain = CodeIndex(BITS)
    plain.add(codes)
    kept = CodeIndex(BITS)
    kept.add(codes, embeddings=np.ones((4, DIM)))
    cases = [(lambda: plain.add(codes, embeddings=np.ones((4, DIM))), "the index keeps no embeddings"),
             (lambda: kept.add(codes, ids=[7, 8, 9, 10]), "the index keeps a 6-dimensional embedding per item"),
             (lambda: kept.add(codes, ids=[7, 8, 9, 10], embeddings=np.ones((3, DIM))), "embeddings has 3 rows"),
             (lambda: kept.add(codes, ids=[7, 8, 9, 10], embeddings=np.ones((4, 5))), "are 5-dimensional"),
             (lambda: by_cosine(plain, codes, 2, np.ones((4, DIM))), "the index keeps no embeddings, so it "
                                                                     "cannot score by cosine"),
             (lambda: plain.get_embeddings([0]), "the index keeps no embeddings")]
    for call, fragment in cases:
        with pytest.raises(InputError, match=fragment) as err:
            call()
        assert "\n" not in str(err.value)
    assert kept.ntotal == 4 and plain.ntotal == 4  # nothing half-added


def test_embeddings_are_saved_mapped_and_verified(tmp_path, rng):
    codes, emb = random_codes(rng, 40, BITS), rng.standard_normal((40, DIM))
    index = CodeIndex(BITS)
    index.add(codes, embeddings=emb)
    index.remove([3])
    index.save(tmp_path / "ix")
    loaded = CodeIndex.load(tmp_path / "ix")
    from test_index_storage import maps_a_file
    assert loaded.embedding_dim == DIM and maps_a_file(loaded._main.embeddings)
    assert not loaded._main.embeddings.flags.writeable
    ids = loaded.ids()
    np.testing.assert_array_equal(loaded.get_embeddings(ids), unit_rows(emb[ids]))
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["embedding_dim"] == DIM and "embeddings.npy" in manifest["files"]
    loaded.add(codes[:1], ids=[100], embeddings=emb[:1])  # a mapped start grows into memory
    np.testing.assert_array_equal(loaded.get_embeddings([100, 0]), unit_rows(emb[[0, 0]]))
    # one embedding too few, with a checksum that matches: the count is refused in one line
    np.save(tmp_path / "ix" / "embeddings.npy", unit_rows(emb[ids[:-1]]))
    from lbhash.index.storage import _file_digests
    manifest["files"]["embeddings.npy"]["sha256"] = _file_digests(tmp_path / "ix", ["embeddings.npy"])["embeddings.npy"]
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="holds 38 embeddings but ids.npy has 39 codes; the embeddings and codes "
                                         "disagree") as err:
        CodeIndex.load(tmp_path / "ix")
    assert "\n" not in str(err.value)
    manifest.pop("embedding_dim")
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="embedding_dim None and the embeddings.npy entry must come together"):
        CodeIndex.load(tmp_path / "ix")
    index.save(tmp_path / "iy")
    (tmp_path / "iy" / "embeddings.npy").write_bytes((tmp_path / "iy" / "embeddings.npy").read_bytes()[:-2] + b"xx")
    with pytest.raises(InputError, match="embeddings.npy: checksum mismatch"):
        CodeIndex.load(tmp_path / "iy")


def test_searcher_rescores_by_the_encoders_embeddings(rng):
    encoder = FakeEncoder(dim=12, bits=BITS)
    x_db = rng.standard_normal((80, 12))
    index = CodeIndex(BITS)
    index.add(encoder.encode(x_db), embeddings=x_db)
    x = rng.standard_normal((4, 12)).astype(np.float32)
    searcher = Searcher(index, encoder)
    codes, q_emb = searcher.embeddings(x)
    np.testing.assert_array_equal(codes, encoder.encode(x))
    np.testing.assert_array_equal(q_emb, x)
    got = searcher.blended_search(x, 5, factor=3)
    for a, b in zip((got.scores, got.distances, got.ids), by_cosine(index, encoder.encode(x), 5, x, factor=3)):
        np.testing.assert_array_equal(a, b)


def test_a_tied_class_rescored_holds_a_bounded_number_of_pairs(rng, monkeypatch):
    """Issue 69, item 1: 20,000 items sharing one code (more ties than MAX_RESCORE_CANDIDATES), 256
    queries at distance 1, k 1, factor 1. Every search and range search of the request finds at most
    `PAIRS` (query, item) pairs, and numpy's peak stays within the budget's bytes, however many queries
    come; the answers are those of each query alone. Before, the boundary's ties were range-searched
    for all 256 queries at once (2,572,800 pairs), then dropped for passing the cap."""
    import tracemalloc

    from lbhash.index import blend, rescore

    n, nq, dim, budget = 20_000, 256, 4, 40_000
    index = CodeIndex(64)
    index.add(np.zeros((n, 8), np.uint8), embeddings=rng.standard_normal((n, dim)))
    near = np.zeros((50, 8), np.uint8)
    near[:, 0] = 3
    index.add(near, ids=np.arange(n, n + 50), embeddings=rng.standard_normal((50, dim)))
    queries = np.zeros((nq, 8), np.uint8)
    queries[:, 0] = 1  # distance 1 from the class, 1 from the 50 (a tie of 50 + 20,000 at 1)
    queries[nq // 2:, 0] = 7  # distance 1 from the 50 alone (the class at 3): widened to those 50
    q_emb = rng.standard_normal((nq, dim))
    alone = [by_cosine(index, queries[q:q + 1], 1, q_emb[q:q + 1], factor=1) for q in (0, nq - 1)]
    for module in (rescore, blend):
        monkeypatch.setattr(module, "PAIRS", budget, raising=False)  # (raising: the test runs on the code before)
    found, called = [], []
    for name in ("search", "range_search"):
        def counted(*args, _call=getattr(index, name), _name=name, **kwargs):
            result = _call(*args, **kwargs)
            found.append(result.ids.size)
            called.append(_name)
            return result
        monkeypatch.setattr(index, name, counted)
    tracemalloc.start()
    try:
        got = by_cosine(index, queries, 1, q_emb, factor=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # every query was still looked at: its nearest MAX_RESCORE_CANDIDATES + 1 say whether its ties pass the cap
    assert max(found) <= budget and sum(found) >= nq * (MAX_RESCORE_CANDIDATES + 1)
    # the work is a search's whatever the ties (issue 87): no range search of every tied item on an exact index
    assert "range_search" not in called and index.exact
    assert peak < 100 * budget  # bytes (1.4 MB); the 2,572,800 pairs at once took 175 MB
    for q, one in zip((0, nq - 1), alone):
        for a, b in zip(got, one):
            np.testing.assert_array_equal(a[q:q + 1], b)
    assert got.ids[0, 0] == 0 and got.ids[-1, 0] >= n  # ties over the cap: the first by id; 50: widened


def test_an_item_found_by_its_own_embedding_scores_at_most_one(rng):
    """Issue 69, item 10: float16 unit rows can have a cosine with themselves past 1 (a photo's match
    with itself printed `similarity 1.0001`); the ranking clips the similarity to [-1, 1]."""
    emb = rng.standard_normal((300, 64))
    units = unit_rows(emb).astype(np.float64)
    over = np.flatnonzero((units * units).sum(axis=1) > 1)  # self-cosines that round past 1
    assert len(over)  # the case exists in these rows
    index = CodeIndex(BITS)
    codes = random_codes(rng, 300, BITS)
    index.add(codes, embeddings=emb)
    got = by_cosine(index, codes[over], 1, emb[over], factor=300)
    assert got.ids[:, 0].tolist() == over.tolist() and (got.scores[:, 0] == 1.0).all()
