"""Re-ranked search (rerank_search over an index, Searcher.rerank_search, the service, the real
outputs of the encoder) against brute-force references (index_reference.reranked), tie order
included."""

import numpy as np
import pytest

from index_reference import PAD_DISTANCE, clustered_codes, random_codes, reranked, signs_of
from lbhash.errors import InputError
from lbhash.evaluate import rank_asymmetric
from lbhash.index import CodeIndex, rerank_search
from serve_helpers import LOCAL

BITS = 16
LEVELS = [-1.0, -0.5, 0.25, 0.5, 1.0]  # dyadic: every sum is exact, so equal scores are ties


def assert_matches(got_scores, got_ids, expected, k):
    for q, rows in enumerate(expected):
        n = len(rows)
        assert got_ids[q, :n].tolist() == [i for _, _, i in rows]
        assert got_scores[q, :n].tolist() == [s for s, _, _ in rows]  # bit for bit
        assert (got_ids[q, n:] == -1).all() and np.isinf(got_scores[q, n:]).all()


@pytest.fixture
def tied(rng):
    """Repeated codes (exact score ties between different ids) and ids out of insertion order."""
    base, _ = clustered_codes(rng, 30, BITS, centers=6, max_flips=2)
    codes = base[rng.integers(0, 30, 120)]
    ids = rng.permutation(1000)[:120].astype(np.int64) * 7
    labels = rng.integers(0, 3, 120)
    queries = codes[rng.integers(0, 120, 9)] ^ rng.integers(0, 2, (9, BITS // 8), dtype=np.uint8)
    real = rng.choice(LEVELS, size=(9, BITS))
    return codes, ids, labels, queries, real


@pytest.mark.parametrize("k, factor", [(5, 1), (5, 4), (10, 3), (200, 2)])
def test_flat_rerank_matches_the_brute_force_reference_with_ties(tied, k, factor):
    codes, ids, labels, queries, real = tied
    index = CodeIndex(BITS)
    index.add(codes, ids=ids, labels=labels)
    scores, hamming_d, got = rerank_search(index, queries, k, real, factor=factor)
    expected = reranked(queries, real, codes, ids, k, factor)
    assert scores.dtype == np.float64 and hamming_d.dtype == np.int32 and got.dtype == np.int64
    assert scores.shape == hamming_d.shape == got.shape == (9, k)
    assert_matches(scores, got, expected, k)
    # the case must hold ties that only the id breaks, or the tie rule is untested
    assert any(r[t][0] == r[t + 1][0] for r in expected for t in range(len(r) - 1))
    for q, rows in enumerate(expected):
        assert hamming_d[q, :len(rows)].tolist() == [d for _, d, _ in rows]
        assert (hamming_d[q, len(rows):] == PAD_DISTANCE).all()


def test_label_filtered_rerank(tied):
    codes, ids, labels, queries, real = tied
    index = CodeIndex(BITS)
    index.add(codes, ids=ids, labels=labels)
    filters = np.arange(9) % 3
    filters[4] = 1
    scores, _, got = rerank_search(index, queries, 6, real, filters, 3)
    allowed = [labels == f for f in filters]
    expected = reranked(queries, real, codes, ids, 6, 3, allowed)
    assert_matches(scores, got, expected, 6)
    unfiltered = rerank_search(index, queries, 6, real, factor=3)[2]
    assert (unfiltered != got).any()  # the filter changed something


def test_enough_candidates_give_the_full_asymmetric_ranking(rng):
    """ids = database positions and k * factor >= n: the ranking of lbhash.evaluate, and a
    numpy one computed here (dyadic values: the matrix product is exact)."""
    codes = random_codes(rng, 70, BITS)[rng.integers(0, 70, 90)]
    real = rng.choice(LEVELS, size=(12, BITS))
    index = CodeIndex(BITS)
    index.add(codes)
    queries = np.packbits(real >= 0, axis=1, bitorder="little")
    found, _, got = rerank_search(index, queries, 90, real, factor=1)
    scores = real @ signs_of(codes).T
    numpy_order = np.lexsort((np.broadcast_to(np.arange(90), scores.shape), -scores), axis=1)
    np.testing.assert_array_equal(got, numpy_order)
    np.testing.assert_array_equal(found, np.take_along_axis(scores, numpy_order, 1))
    np.testing.assert_array_equal(got, rank_asymmetric(real, signs_of(codes)))
    top5 = rerank_search(index, queries, 5, real, factor=90)[2]
    np.testing.assert_array_equal(top5, numpy_order[:, :5])
    # Gaussian outputs (no ties): the evaluation's ranking, scores equal to numpy's to rounding
    real = rng.standard_normal((12, BITS)).astype(np.float32)
    found, _, got = rerank_search(index, queries, 90, real, factor=2)
    np.testing.assert_array_equal(got, rank_asymmetric(real, signs_of(codes)))
    np.testing.assert_allclose(found, np.sort(real.astype(np.float64) @ signs_of(codes).T, 1)[:, ::-1], atol=1e-9)


@pytest.mark.parametrize("kind, params", [("ivf", {"nlist": 4, "nprobe": 1}), ("multihash", {"nflip": 0})])
def test_every_kind_reranks_its_own_candidates(rng, kind, params):
    """Approximate kinds: the re-ranking of exactly the candidates that kind's search returns."""
    codes, _ = clustered_codes(rng, 400, BITS, centers=8, max_flips=3)
    labels = rng.integers(0, 2, 400)
    index = CodeIndex(BITS, kind, **params)
    index.add(codes, labels=labels)
    assert index.is_trained
    queries = random_codes(rng, 6, BITS)
    real = rng.choice(LEVELS, size=(6, BITS))
    for filters in (None, np.array([0, 1, 1, 0, 1, 0])):
        _, cand = index.search(queries, 12, labels=filters)
        scores, _, got = rerank_search(index, queries, 4, real, filters, 3)
        b = signs_of(codes)
        for q in range(6):
            pool = [int(i) for i in cand[q] if i >= 0]
            best = sorted(((float(real[q] @ b[i]), i) for i in pool), key=lambda t: (-t[0], t[1]))[:4]
            assert got[q, :len(best)].tolist() == [i for _, i in best]
            assert scores[q, :len(best)].tolist() == [s for s, _ in best]


def test_padding_small_and_empty_indexes(rng):
    index = CodeIndex(BITS)
    real = rng.standard_normal((2, BITS))
    queries = random_codes(rng, 2, BITS)
    scores, dist, ids = rerank_search(index, queries, 3, real)
    assert (ids == -1).all() and np.isneginf(scores).all() and (dist == PAD_DISTANCE).all()
    index.add(random_codes(rng, 2, BITS), ids=[5, 9])
    scores, dist, ids = rerank_search(index, queries, 3, real)
    assert sorted(ids[0, :2].tolist()) == [5, 9] and ids[0, 2] == -1 and np.isneginf(scores[:, 2]).all()
    assert np.isfinite(scores[:, :2]).all() and (dist[:, 2] == PAD_DISTANCE).all()
    s0, d0, i0 = rerank_search(index, queries[:0], 3, real[:0])
    assert s0.shape == d0.shape == i0.shape == (0, 3)


@pytest.mark.parametrize("real, factor, fragment", [
    (np.zeros((3, BITS)), 4, r"rerank must have shape \(2, 16\)"),
    (np.zeros((2, 8)), 4, r"rerank must have shape \(2, 16\)"),
    (np.array([[np.nan] * BITS, [0.0] * BITS]), 4, "rerank holds NaN or inf in row 0"),
    (np.array([[0.0] * BITS, [np.inf] * BITS]), 4, "rerank holds NaN or inf in row 1"),
    (np.full((2, BITS), 1e307 * 2), 4, "so that every score stays finite"),
    (np.full((2, BITS), "a"), 4, "rerank must hold real numbers"),
    (np.zeros((2, BITS)), 0, "rerank_factor must be a positive integer"),
    (np.zeros((2, BITS)), 2.0, "rerank_factor must be a positive integer"),
    (np.zeros((2, BITS)), True, "rerank_factor must be a positive integer"),
])
def test_bad_rerank_input_is_one_line(rng, real, factor, fragment):
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 10, BITS))
    with pytest.raises(InputError, match=fragment) as err:
        rerank_search(index, random_codes(rng, 2, BITS), 3, real, factor=factor)
    assert "\n" not in str(err.value)


def test_searcher_reranks_by_the_encoders_real_outputs(rng):
    from index_fakes import FakeEncoder
    from lbhash.index import Searcher
    from lbhash.index.searcher import codes_of

    encoder = FakeEncoder(dim=12, bits=BITS)
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 80, BITS))
    x = rng.standard_normal((4, 12)).astype(np.float32)  # what the Searcher feeds the encoder
    searcher = Searcher(index, encoder)
    real = encoder.embed(x)
    np.testing.assert_array_equal(codes_of(real), encoder.encode(x))
    scores, dist, ids = searcher.rerank_search(x, 5, factor=3)
    for got, want in zip((scores, dist, ids), rerank_search(index, encoder.encode(x), 5, real, factor=3)):
        np.testing.assert_array_equal(got, want)
    expected = reranked(encoder.encode(x), real, index.get(index.ids())[0], index.ids(), 5, 3)
    assert_matches(scores, ids, expected, 5)


# --- the encoder's real outputs --------------------------------------------------------------


@pytest.fixture
def itq_run(runs):
    return runs.path("itq")  # only read


def test_encode_real_gives_the_outputs_whose_signs_are_the_codes(itq_run, tmp_path):
    import torch
    from click.testing import CliRunner

    from lbhash.cli import main
    from lbhash.codes import pack, to_signs
    from lbhash.codes_file import load_codes_file
    from lbhash.data import load_data, load_split
    from lbhash.runs import HashEncoder
    from lbhash.runs.codes import embed_run, encode_run

    enc = HashEncoder.load(itq_run)
    x = load_data("digits").x[load_split(itq_run / "split.npz").query]
    u = enc.embed(x)
    assert u.dtype == np.float32 and u.shape == (len(x), 16)
    np.testing.assert_array_equal(pack(to_signs(u)), enc.encode(x))
    # the same outputs as the run saved for asymmetric evaluation (other batches: rounding only)
    np.testing.assert_allclose(u, load_codes_file(itq_run / "codes.npz")["query_real"], rtol=1e-6, atol=1e-6)
    out = tmp_path / "enc.npz"
    result = CliRunner().invoke(main, ["encode", str(itq_run), "--part", "query", "--real", "--no-progress",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as data:
        assert data["real"].dtype == np.float32
        np.testing.assert_array_equal(data["codes"], pack(to_signs(data["real"])))
        np.testing.assert_allclose(data["real"], u, rtol=1e-6, atol=1e-6)
        # the library: encode_run's part has no `real`; embed_run's adds it to the same codes
        plain, with_real = (run(itq_run, part="query", progress=False) for run in (encode_run, embed_run))
        assert "real" not in plain and with_real.keys() == plain.keys() | {"real"}
        np.testing.assert_array_equal(plain["codes"], data["codes"])
        np.testing.assert_array_equal(with_real["codes"], data["codes"])
        np.testing.assert_array_equal(with_real["real"], data["real"])
    # ties at 0: outputs of exactly +0.0 and -0.0 are bit +1, as bin(0) = +1 everywhere
    last = [m for m in enc.model_.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, -0.0, -1.0, 2.0] * 4))
    u = enc.embed(x[:3])
    assert (u[:, [0, 1]] == 0).all() and (u[:, 2] == -1).all()
    np.testing.assert_array_equal(np.unpackbits(enc.encode(x[:3]), axis=1, bitorder="little")[:, :4],
                                  np.tile([1, 1, 0, 1], (3, 1)))
    np.testing.assert_array_equal(pack(to_signs(u)), enc.encode(x[:3]))


# --- the HTTP service ---------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path, rng):
    from fastapi.testclient import TestClient

    from index_fakes import FakeEncoder
    from lbhash.service import Limits, create_app

    codes, _ = clustered_codes(rng, 150, BITS, centers=10, max_flips=2)
    labels = rng.integers(0, 3, 150)
    index = CodeIndex(BITS)
    index.add(codes, labels=labels)
    index.save(tmp_path / "ix")
    encoder = FakeEncoder(dim=12, bits=BITS)
    limits = Limits(max_batch=20, max_k=50, max_rerank_candidates=100)
    with TestClient(create_app(tmp_path / "ix", encoder, limits=limits), base_url=LOCAL) as client:
        yield client, index, labels, encoder


def hits(reply):
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


def test_service_reranks_codes_with_real_and_features(served, rng):
    client, index, labels, encoder = served
    queries = random_codes(rng, 3, BITS)
    real = rng.choice(LEVELS, size=(3, BITS))
    body = {"codes": [q.tobytes().hex() for q in queries], "real": real.tolist(), "k": 5, "rerank_factor": 3,
            "labels": [[0], [1, 2], [0, 1, 2]]}
    results = hits(client.post("/search", json=body))
    scores, dist, ids = rerank_search(index, queries, 5, real, [[1, 0, 0], [0, 1, 1], [1, 1, 1]], 3)
    expected = reranked(queries, real, index.get(index.ids())[0], index.ids(), 5, 3,
                         [labels == 0, labels > 0, labels >= 0])
    for q, result in enumerate(results):
        assert [h["id"] for h in result["hits"]] == ids[q].tolist() == [i for _, _, i in expected[q]]
        assert [h["score"] for h in result["hits"]] == scores[q].tolist()
        assert [h["distance"] for h in result["hits"]] == [d for _, d, _ in expected[q]]  # Hamming
        assert [h["labels"] for h in result["hits"]] == [[int(labels[i])] for i in ids[q]]
    default = hits(client.post("/search", json={"codes": body["codes"], "real": body["real"]}))
    assert [[h["id"] for h in r["hits"]] for r in default] == rerank_search(index, queries, 10, real)[2].tolist()
    x = rng.standard_normal((2, 12)).astype(np.float32)
    results = hits(client.post("/search", json={"features": x.tolist(), "k": 4, "rerank_factor": 2}))
    want = rerank_search(index, encoder.encode(x), 4, encoder.embed(x), factor=2)[2]
    assert [[h["id"] for h in r["hits"]] for r in results] == want.tolist()
    plain = hits(client.post("/search", json={"codes": body["codes"], "k": 2}))
    assert all("score" not in h for r in plain for h in r["hits"])


BAD = [
    ({"codes": ["0000"], "real": [[0.5] * 15]}, 400, "real must have shape (1, 16)"),
    ({"codes": ["0000"], "real": [[0.5] * 16, [0.5] * 16]}, 400, "real has 2 rows but there are 1 queries"),
    ({"codes": ["0000"], "real": [[0.5] * 16, [0.5]]}, 400, "real has 2 rows"),
    ({"codes": ["0000", "0000"], "real": [[0.5] * 16, [0.5]]}, 400, "real must be lists of numbers of one length"),
    ({"codes": ["0000"], "real": [[float("nan")] + [0.0] * 15]}, 400, "real holds NaN or inf in row 0"),
    ({"codes": ["0000"], "real": [[float("inf")] * 16]}, 400, "real holds NaN or inf in row 0"),
    ({"codes": ["0000"], "real": [[1e308] * 16]}, 400, "every score stays finite"),
    ({"codes": ["0000"], "real": [[0.5] * 16], "radius": 2}, 400, "give k, not radius"),
    ({"codes": ["0000"], "real": [[0.5] * 16], "k": 30, "rerank_factor": 4}, 400, "at most 100"),
    ({"codes": ["0000"], "real": [[0.5] * 16], "k": 51}, 400, "k must be at most 50"),
    ({"codes": ["0000"], "rerank_factor": 2}, 400, "rerank_factor needs the queries' real outputs"),
    ({"features": [[0.0] * 12], "real": [[0.5] * 16]}, 400, "'real' goes with 'codes'"),
    ({"codes": ["0000"], "real": [[0.5] * 16], "rerank_factor": 0}, 422, "rerank_factor"),
    ({"features": [[0.0] * 12] * 21, "rerank_factor": 2}, 400, "at most 20 queries"),
]


@pytest.mark.parametrize("body, status, fragment", BAD)
def test_service_refuses_bad_rerank_requests_in_one_line(served, body, status, fragment):
    import json

    client, *_ = served
    # json.dumps writes NaN and Infinity, which the service's JSON parser reads
    reply = client.post("/search", content=json.dumps(body), headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert fragment in detail and "\n" not in detail


def test_service_reranks_uploaded_images(tmp_path, rng):
    import io

    from fastapi.testclient import TestClient
    from PIL import Image

    from index_fakes import FakeEncoder
    from lbhash.service import create_app

    encoder = FakeEncoder(bits=BITS, input_kind="images")
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 60, BITS))
    index.save(tmp_path / "ix")
    images = [rng.integers(0, 256, (8 + i, 8, 3), dtype=np.uint8) for i in range(2)]
    files = []
    for n, img in enumerate(images):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        files.append(("files", (f"q{n}.png", buf.getvalue(), "image/png")))
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        results = hits(client.post("/search/image", files=files, data={"k": "3", "rerank_factor": "5"}))
    real = np.concatenate([encoder.embed(img[None]) for img in images])
    scores, _, ids = rerank_search(index, np.concatenate([encoder.encode(img[None]) for img in images]), 3, real,
                                   factor=5)
    assert [[h["id"] for h in r["hits"]] for r in results] == ids.tolist()
    assert [[h["score"] for h in r["hits"]] for r in results] == scores.tolist()


def test_milvus_holds_the_candidates_to_its_result_cap(rng):
    """Without a server: the refusal comes before any call to Milvus (tests/index/test_milvus.py
    compares re-ranked Milvus searches with CodeIndex's on a real server)."""
    from lbhash.index.milvus import MilvusIndex

    class Unconnected(MilvusIndex):
        def __init__(self):
            self._bits = BITS

        ntotal = 50_000

    with pytest.raises(InputError, match=r"k \* rerank_factor \(20000 candidates\) must be at most 16383"):
        rerank_search(Unconnected(), random_codes(rng, 2, BITS), 100, np.zeros((2, BITS)), factor=200)
    with pytest.raises(InputError, match="rerank_factor must be a positive integer"):
        rerank_search(Unconnected(), random_codes(rng, 2, BITS), 10, np.zeros((2, BITS)), factor=0)
    with pytest.raises(InputError, match="k must be at most 16383 with the milvus backend"):
        Unconnected().search(random_codes(rng, 2, BITS), 20000)
