"""The rules of a search request (lbhash.index.hits): the checks of `plan_search` and
`check_classes`, and `search_hits` on CodeIndex and on MilvusIndex (over a fake collection)
against the brute-force references of index_reference, tie order and labels included."""

import numpy as np
import pytest

from index_fakes import fake_milvus
from index_reference import clustered_codes, in_range, random_codes, rescored, ternary_embeddings, top_k
from lbhash.errors import InputError
from lbhash.index import (RESCORE_FACTOR, CodeIndex, Queries, SearchOptions, SearchPlan, Spelling, check_classes, hits,
                          plan_search, search_hits)

BITS, DIM = 16, 6
CLI = Spelling(k="-k", radius="--radius", factor="--rescore-factor", rescore="--rescore-factor",
               classes="--filter-labels")


# --- plan_search and check_classes ------------------------------------------------------------


def test_plan_defaults():
    assert plan_search() == SearchPlan(10, None, None)
    assert plan_search(SearchOptions(radius=3)) == SearchPlan(None, 3, None, max_hits=1000)
    assert plan_search(SearchOptions(5), rank=True) == SearchPlan(5, None, RESCORE_FACTOR)
    assert plan_search(SearchOptions(factor=2), rank=True) == SearchPlan(10, None, 2)
    assert plan_search(SearchOptions(5, factor=3)).factor is None  # a factor without re-scoring asks for nothing
    assert plan_search(SearchOptions(10), rank=True, max_candidates=100).factor == RESCORE_FACTOR  # the default, within the cap
    assert plan_search(SearchOptions(10), rank=True, max_candidates=20).factor == 2  # lowered to fit the cap


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 3, "radius": 2}, "give either k or radius, not both (got k 3 and radius 2)"),
    ({"k": 3, "radius": 2, "spelling": CLI}, "give either -k or --radius, not both (got -k 3 and --radius 2)"),
    ({"radius": 2, "rank": True}, "a ranked search orders a top k: give k, not radius, with rescore"),
    ({"radius": 2, "rank": True, "spelling": CLI},
     "a ranked search orders a top k: give -k, not --radius, with --rescore-factor"),
    ({"looks_like": 0.5}, "looks_like ranks by the instance codes and the embeddings: the index keeps neither, the "
                          "queries have none, or the search keeps the Hamming order (leave out looks_like, or build "
                          "the index with its instance codes)"),
    ({"looks_like": 1.5, "rank": True}, "looks_like must be a number from 0 (same class first) to 1 (looks like "
                                        "first), got 1.5"),
    ({"radius": -1}, "radius must be a non-negative integer, got -1"),
    ({"k": 0, "spelling": CLI}, "-k must be a positive integer, got 0"),
    ({"k": 51, "max_k": 50}, "k must be at most 50, got 51"),
    ({"k": 1001}, "k must be at most 1000, got 1001"),
    ({"rank": True, "factor": 0, "spelling": CLI}, "--rescore-factor must be a positive integer, got 0"),
    ({"k": 30, "rank": True, "factor": 4, "max_candidates": 100},
     "k * rescore_factor must be at most 100 (candidates ranked per query from each code), got 30 * 4 = 120"),
    ({"k": 101, "rank": True, "max_k": 200, "max_candidates": 100},
     "k * rescore_factor must be at most 100 (candidates ranked per query from each code), got 101 * 1 = 101"),
])
def test_plan_refusals_are_one_line_naming_the_option(kwargs, message):
    with pytest.raises(InputError) as err:
        options = {name: kwargs.pop(name) for name in ("k", "radius", "factor", "looks_like") if name in kwargs}
        plan_search(SearchOptions(**options), **kwargs)
    assert str(err.value) == message


def test_check_classes():
    assert check_classes([[0, 65535], []]) == [[0, 65535], []]
    with pytest.raises(InputError, match="^labels must be class ids between 0 and 65535, got -1$"):
        check_classes([[2], [-1]])
    with pytest.raises(InputError, match="^--filter-labels must be class ids between 0 and 9, got 12$"):
        check_classes([[3, 12, 10]], "--filter-labels", max_class_id=9)


# --- search_hits against brute force, on each backend ---------------------------------------------


@pytest.fixture(params=["faiss", "milvus"])
def indexed(request, rng):
    """A backend holding clustered codes (many ties), ids out of order, 0 to 2 classes per item."""
    codes, _ = clustered_codes(rng, 150, BITS, centers=8, max_flips=2)
    ids = rng.permutation(5000)[:150].astype(np.int64)
    classes = [sorted(set(rng.integers(0, 4, rng.integers(0, 3)).tolist())) for _ in range(150)]
    index = CodeIndex(BITS) if request.param == "faiss" else fake_milvus(BITS, DIM)
    emb = ternary_embeddings(rng, 150, DIM)
    index.add(codes, ids=ids, labels=_sparse(classes), embeddings=emb)
    index.emb = emb  # (the test's own record)
    return index, codes, ids, classes


def _sparse(lists):
    from lbhash.index import SparseLabels

    return SparseLabels.from_lists(lists)


def _allowed(filters, classes):
    return None if filters is None else np.array([[bool(set(f) & set(c)) for c in classes] for f in filters])


@pytest.mark.parametrize("filters", [None, [[1], [0, 3], [], [2], [1, 2, 3]]])
def test_top_k_hits_are_the_brute_force_rows_without_padding(indexed, rng, filters):
    index, codes, ids, classes = indexed
    queries = random_codes(rng, 5, BITS)
    got = search_hits(index, Queries(queries), plan_search(SearchOptions(12)), classes=filters)
    ref_d, ref_i = top_k(queries, codes, ids, 12, _allowed(filters, classes))
    label_of = dict(zip(ids.tolist(), classes))
    for q, row in enumerate(got):
        keep = ref_i[q] >= 0
        assert row.ids == ref_i[q][keep].tolist() and row.distances == ref_d[q][keep].tolist()
        assert row.labels == [label_of[i] for i in row.ids] and row.scores is None
    if filters is not None:
        assert got[2].ids == []  # a query without classes finds nothing


def test_range_hits_are_the_brute_force_runs(indexed, rng):
    index, codes, ids, classes = indexed
    queries = codes[:4]
    filters = [[0], [1, 2], [3], [0, 1, 2, 3]]
    for lists in (None, filters):
        got = search_hits(index, Queries(queries), plan_search(SearchOptions(radius=3)), classes=lists)
        assert [list(zip(h.distances, h.ids)) for h in got] == in_range(queries, codes, ids, 3,
                                                                        _allowed(lists, classes))


def test_rescored_hits_are_the_brute_force_ranking(indexed, rng):
    index, codes, ids, classes = indexed
    queries = random_codes(rng, 6, BITS)
    q_emb = ternary_embeddings(rng, 6, DIM)
    filters = [[0], [1], [2, 3], [0, 1, 2, 3], [1], [3]]
    for lists in (None, filters):
        got = search_hits(index, Queries(queries, q_emb), plan_search(SearchOptions(5, factor=3), rank=True), classes=lists)
        expected = rescored(queries, q_emb, codes, ids, index.emb, 5, 3, _allowed(lists, classes))
        for row, want in zip(got, expected):
            assert row.ids == [i for _, _, i in want] and row.distances == [d for _, d, _ in want]
            assert row.scores == [s ** 3 for s, _, _ in want]  # bit for bit (looks_like 1: the cosine cubed)
            assert row.same == [False] * len(want) and row.instance_distances is None  # no instance codes
            assert list(row.rows()) == list(zip(row.ids, row.distances, row.labels, row.scores))


def test_batches_give_the_same_hits_and_labels_come_from_one_lookup(monkeypatch, rng):
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 60, BITS), labels=rng.integers(0, 3, 60), embeddings=rng.standard_normal((60, DIM)))
    queries = random_codes(rng, 10, BITS)
    real = rng.standard_normal((10, DIM))
    plans = [(plan_search(SearchOptions(4)), None), (plan_search(SearchOptions(radius=5)), None), (plan_search(SearchOptions(4), rank=True), real)]
    whole = [search_hits(index, Queries(queries, r), plan, classes=[[0, 1]] * 10) for plan, r in plans]
    lookups = []
    monkeypatch.setattr(hits, "MAX_BATCH", 3)
    monkeypatch.setattr(index, "labels_of", lambda found: lookups.append(found) or CodeIndex.labels_of(index, found))
    for (plan, r), want in zip(plans, whole):
        assert search_hits(index, Queries(queries, r), plan, classes=[[0, 1]] * 10) == want
    assert len(lookups) == len(plans)  # one per search, over 4 batches each


def test_search_hits_refusals(rng):
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 5, BITS))
    queries = random_codes(rng, 3, BITS)
    with pytest.raises(InputError, match="^labels has 2 entries but there are 3 queries$"):
        search_hits(index, Queries(queries), plan_search(SearchOptions(2)), classes=[[0], [1]])
    with pytest.raises(InputError, match="^--filter-labels has 1 entries but there are 3 queries$"):
        search_hits(index, Queries(queries), plan_search(SearchOptions(2), spelling=CLI), classes=[[0]])
    with pytest.raises(TypeError, match="query embeddings and instance codes go with a ranked plan"):
        search_hits(index, Queries(queries, np.zeros((3, BITS))), plan_search(SearchOptions(2)))
    with pytest.raises(InputError, match="^a ranked search needs the queries' embeddings or instance codes"):
        search_hits(index, Queries(queries), plan_search(SearchOptions(2), rank=True))
    assert search_hits(index, Queries(queries[:0]), plan_search(SearchOptions(2))) == []


# --- a radius search's hits are capped as k is (issue 60, item 9) -------------------------------


def _crowded(rng):
    """300 random codes and 60 copies of one more (ids 300-359), and queries of which the fourth
    is that code: within radius 2 it finds at least 60 items, the others a few."""
    codes = random_codes(rng, 301, BITS)
    crowd = np.repeat(codes[300:], 60, axis=0)
    index = CodeIndex(BITS)
    index.add(np.concatenate([codes[:300], crowd]))
    queries = np.concatenate([codes[:3], codes[300:], codes[3:5]])
    return index, queries


def test_a_radius_search_over_the_cap_is_refused_in_one_line(rng, monkeypatch):
    """64 codes at radius 32 on 200,000 codes answered 517 MB: a radius search returns at most
    the caller's cap on k per query (`plan_search`'s max_k), else one line naming the query."""
    index, queries = _crowded(rng)
    for spelling, names in ((CLI, ("--radius 2", "-k")), (Spelling(), ("radius 2", "k"))):
        with pytest.raises(InputError) as err:
            search_hits(index, Queries(queries), plan_search(SearchOptions(radius=2), max_k=50, spelling=spelling))
        found = len(in_range(queries[3:4], index.get_codes(np.arange(360)), np.arange(360), 2)[0])
        assert str(err.value) == (f"{names[0]} finds {found} items for query 3, more than the 50 a search returns "
                                  f"per query (as {names[1]}): give a smaller {names[0].split()[0]}, or {names[1]} "
                                  "for the nearest")
    within = search_hits(index, Queries(queries), plan_search(SearchOptions(radius=2), max_k=100))
    codes = index.get_codes(np.arange(360))
    assert [list(zip(h.distances, h.ids)) for h in within] == in_range(queries, codes, np.arange(360), 2)
    assert plan_search(SearchOptions(radius=2)).max_hits == 1000  # the command line's cap: MAX_K


def test_a_capped_radius_search_holds_a_bounded_number_of_pairs(rng, monkeypatch):
    """The queries go to the index in groups that can find at most RANGE_PAIRS (query, item)
    pairs (one query at least), and the first query over the cap ends the search."""
    index, queries = _crowded(rng)
    calls = []
    monkeypatch.setattr(hits, "RANGE_PAIRS", 2 * 360)
    monkeypatch.setattr(index, "range_search", lambda q, r, labels=None: calls.append(len(q)) or
                        CodeIndex.range_search(index, q, r, labels))
    with pytest.raises(InputError, match="for query 3"):
        search_hits(index, Queries(queries), plan_search(SearchOptions(radius=2), max_k=50))
    assert calls == [2, 2]  # queries 0-1, 2-3; never 4-5
    calls.clear()
    assert len(search_hits(index, Queries(queries), plan_search(SearchOptions(radius=2), max_k=100))) == 6
    assert calls == [2, 2, 2]
