"""CodeIndex against a brute-force reference: exact kinds equal it (tie order included),
approximate kinds meet what their docs promise."""

import faiss
import numpy as np
import pytest

from index_reference import (allowed_rows, clustered_codes, hamming, in_range, near_queries,
                             random_codes, split_ranges, tie_aware_recall, top_k)
from lbhash.errors import InputError
from lbhash.index import PAD_DISTANCE, PAD_ID, CodeIndex, SparseLabels, _engines

BITS = [8, 16, 32, 64, 128]


@pytest.fixture(params=["numpy", "ranking"])
def flat_scan(request, monkeypatch):
    """A flat search scans with numpy (`small_scan`) or with lbhash.ranking's kernel, whatever
    its size (by default: numpy up to SMALL_SCAN codes x queries): both must be exact."""
    monkeypatch.setattr(_engines, "SMALL_SCAN", 1 << 62 if request.param == "numpy" else 0)
    monkeypatch.setattr(_engines.FlatEngine, "compiled_scan_loaded", False)
    return request.param


def make_data(rng, kind, n, bits):
    if kind == "random":
        return random_codes(rng, n, bits)
    return clustered_codes(rng, n, bits, centers=12, max_flips=max(1, bits // 16))[0]


def shuffled_ids(rng, n):
    """Sparse ids, added in three batches out of order: exercises the merge path."""
    return rng.choice(10 * n, size=n, replace=False).astype(np.int64)


def filled(index_kind, bits, codes, ids, labels=None, **params):
    index = CodeIndex(bits, index_kind, **params)
    for part in np.array_split(np.arange(len(ids)), 3):
        index.add(codes[part], ids=ids[part], labels=None if labels is None else labels[part])
    return index


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_flat_top_k_equals_brute_force_with_tie_order(rng, flat_scan, bits, data):
    codes = make_data(rng, data, 600, bits)
    ids = shuffled_ids(rng, 600)
    queries = np.concatenate([codes[:5], make_data(rng, data, 15, bits)])
    index = filled("flat", bits, codes, ids)
    for k in (1, 7, 100, 700):  # 700 > n: padding
        dist, got = index.search(queries, k)
        ref_d, ref_i = top_k(queries, codes, ids, k)
        assert dist.dtype == np.int32 and got.dtype == np.int64
        np.testing.assert_array_equal(got, ref_i)
        np.testing.assert_array_equal(dist, ref_d)


def test_more_ties_at_kth_distance_than_k_resolved_by_id(rng, flat_scan):
    # 8-bit codes over 2000 items: hundreds of items share each distance
    codes = random_codes(rng, 2000, 8)
    ids = shuffled_ids(rng, 2000)
    index = filled("flat", 8, codes, ids)
    queries = random_codes(rng, 10, 8)
    dist, got = index.search(queries, 50)
    ref_d, ref_i = top_k(queries, codes, ids, 50)
    tied = (hamming(queries, codes) == ref_d[:, -1:]).sum(axis=1)
    assert (tied > (ref_d == ref_d[:, -1:]).sum(axis=1)).all()  # ties are cut at the k-th distance
    np.testing.assert_array_equal(got, ref_i)
    np.testing.assert_array_equal(dist, ref_d)


def test_padding_value_and_empty_index(flat_scan):
    index = CodeIndex(16)
    dist, ids = index.search(np.zeros((2, 2), np.uint8), 3)
    assert (ids == PAD_ID).all() and (dist == PAD_DISTANCE).all() and PAD_DISTANCE == 2**31 - 1
    index.add(np.array([[1, 0]], np.uint8))
    dist, ids = index.search(np.zeros((1, 2), np.uint8), 3)
    assert ids.tolist() == [[0, -1, -1]] and dist.tolist() == [[1, PAD_DISTANCE, PAD_DISTANCE]]
    lims, d, i = CodeIndex(16).range_search(np.zeros((2, 2), np.uint8), 5)
    assert lims.tolist() == [0, 0, 0] and len(d) == len(i) == 0


@pytest.mark.parametrize("kind", ["flat", "multihash", "ivf"])
def test_range_boundary_is_inclusive(kind):
    # item r has its r lowest bits set: distance r from the all-zero query
    bits = 32
    codes = np.packbits(np.tri(bits + 1, bits, -1, dtype=np.uint8), axis=1, bitorder="little")
    params = {"nlist": 1, "nprobe": 1} if kind == "ivf" else {}
    index = CodeIndex(bits, kind, **params)
    index.add(codes)
    if kind == "ivf":
        index.train()
    query = np.zeros((1, bits // 8), np.uint8)
    for radius in (0, 1, 5, 9, 32, 40):
        lims, dist, ids = index.range_search(query, radius)
        assert ids.tolist() == list(range(min(radius, bits) + 1)), (kind, radius)
        assert dist.tolist() == ids.tolist()


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_flat_range_search_equals_brute_force(rng, bits, data):
    codes = make_data(rng, data, 400, bits)
    ids = shuffled_ids(rng, 400)
    queries = np.concatenate([codes[:4], make_data(rng, data, 8, bits)])
    index = filled("flat", bits, codes, ids)
    for radius in (0, 1, bits // 4, bits // 2):
        lims, dist, got = index.range_search(queries, radius)
        assert lims.dtype == np.int64 and len(lims) == len(queries) + 1
        assert split_ranges(lims, dist, got) == in_range(queries, codes, ids, radius)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_multihash_exact_where_guaranteed(rng, bits, data):
    codes = make_data(rng, data, 500, bits)
    ids = shuffled_ids(rng, 500)
    queries = np.concatenate([codes[:5], make_data(rng, data, 15, bits)])
    index = filled("multihash", bits, codes, ids)
    nhash, nflip = index.params["nhash"], index.params["nflip"]
    guaranteed = nhash * (nflip + 1) - 1
    for radius in (0, guaranteed, guaranteed + 3):  # past G the scan fallback keeps it exact
        lims, dist, got = index.range_search(queries, radius)
        assert split_ranges(lims, dist, got) == in_range(queries, codes, ids, radius)
    k = 10
    dist, got = index.search(queries, k)
    ref_d, ref_i = top_k(queries, codes, ids, k)
    exact_rows = ref_d[:, -1] <= guaranteed
    assert exact_rows.any() or data == "random"
    np.testing.assert_array_equal(got[exact_rows], ref_i[exact_rows])
    np.testing.assert_array_equal(dist[exact_rows], ref_d[exact_rows])
    # everywhere: true distances, rows sorted, never closer than the exact answer
    row_of = {int(i): r for r, i in enumerate(ids)}
    d_all = hamming(queries, codes)
    for q in range(len(queries)):
        row = [(int(d), int(i)) for d, i in zip(dist[q], got[q]) if i >= 0]
        assert row == sorted(row) and all(d == d_all[q, row_of[i]] for d, i in row)
    assert (dist >= ref_d).all()


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_ivf_full_probe_is_exact_and_partial_probe_meets_recall(rng, bits, data):
    if data == "random":
        codes = random_codes(rng, 2000, bits)
    else:
        codes, _ = clustered_codes(rng, 2000, bits, centers=40, max_flips=max(1, bits // 16))
    ids = shuffled_ids(rng, 2000)
    queries = near_queries(rng, codes, 40)
    queries[:20] = codes[:20]
    ref_d, _ = top_k(queries, codes, ids, 10)
    full = filled("ivf", bits, codes, ids, nlist=16, nprobe=16)
    full.train()
    dist, got = full.search(queries, 10)
    np.testing.assert_array_equal(dist, ref_d)  # every list scanned: exact distances
    partial = filled("ivf", bits, codes, ids, nlist=16, nprobe=4)
    partial.train()
    dist, got = partial.search(queries, 10)
    if data == "clustered":  # codes with clusters: a quarter of the lists holds the neighbours
        assert tie_aware_recall(dist, ref_d, 10) >= 0.9
    id_to_row = {int(i): r for r, i in enumerate(ids)}
    d_all = hamming(queries, codes)
    for q in range(len(queries)):  # every returned distance is the true one, rows sorted
        row = [(int(d), int(i)) for d, i in zip(dist[q], got[q]) if i >= 0]
        assert row == sorted(row)
        assert all(d == d_all[q, id_to_row[i]] for d, i in row)


def test_ivf_untrained_below_threshold_is_exact_then_trains_itself(rng):
    codes = random_codes(rng, 200, 16)
    index = CodeIndex(16, "ivf", nlist=4, nprobe=1)
    index.add(codes[:100])  # 39 * 4 = 156 codes needed
    assert not index.is_trained
    queries = random_codes(rng, 5, 16)
    np.testing.assert_array_equal(index.search(queries, 20)[1], top_k(queries, codes[:100], np.arange(100), 20)[1])
    index.add(codes[100:])
    assert index.is_trained and index.ntotal == 200
    with pytest.raises(InputError, match="needs at least 8 codes"):
        small = CodeIndex(16, "ivf", nlist=8, nprobe=1)
        small.add(codes[:5])
        small.train()


@pytest.mark.parametrize("kind", ["flat", "ivf", "multihash"])
@pytest.mark.parametrize("multilabel", [False, True])
def test_label_filter(rng, flat_scan, kind, multilabel):
    bits, n = 32, 1500
    codes, which = clustered_codes(rng, n, bits, centers=30, max_flips=2)
    ids = shuffled_ids(rng, n)
    if multilabel:
        labels = (rng.random((n, 6)) < 0.25).astype(np.uint8)
        qlabels = (rng.random((30, 6)) < 0.3).astype(np.uint8)
        qlabels[0] = 0  # a query without labels finds nothing
    else:
        labels, qlabels = rng.integers(0, 6, n), rng.integers(0, 6, 30)
    item_rows = labels if multilabel else np.eye(6, dtype=np.uint8)[labels]
    query_rows = qlabels if multilabel else np.eye(6, dtype=np.uint8)[qlabels]
    allowed = allowed_rows(query_rows, item_rows)
    params = {"nlist": 8, "nprobe": 1} if kind == "ivf" else {}
    index = filled(kind, bits, codes, ids, labels, **params)
    queries = near_queries(rng, codes, 30)
    k = 25
    dist, got = index.search(queries, k, labels=qlabels)
    ref_d, ref_i = top_k(queries, codes, ids, k, allowed)
    if kind == "flat":
        np.testing.assert_array_equal(got, ref_i)
        np.testing.assert_array_equal(dist, ref_d)
    row_of = {int(i): r for r, i in enumerate(ids)}
    for q in range(len(queries)):
        found = [i for i in got[q] if i >= 0]
        assert all(allowed[q, row_of[i]] for i in found)
        if kind == "ivf":  # widening nprobe finds k matches wherever k exist
            assert len(found) == min(k, allowed[q].sum())
    lims, d, i = index.range_search(queries, 4, labels=qlabels)
    if kind == "flat":
        assert split_ranges(lims, d, i) == in_range(queries, codes, ids, 4, allowed)
    else:
        assert all(allowed[q, row_of[int(x)]] for q in range(len(queries)) for x in i[lims[q]:lims[q + 1]])


@pytest.mark.parametrize("kind", ["flat", "ivf", "multihash"])
def test_label_filter_on_sparse_labels_with_large_ids_matches_brute_force(rng, flat_scan, kind):
    """Issue 27, item 2: labels are kept sparsely; the filter (an item passes when it holds any
    of the query's classes) stays exact, for class ids up to 65535, in every input form."""
    bits, n, nq = 32, 1200, 40
    codes, _ = clustered_codes(rng, n, bits, centers=20, max_flips=2)
    ids = shuffled_ids(rng, n)
    pool = rng.choice(65536, 12, replace=False)  # few classes, so that filters match something
    pool[:2] = [0, 65535]
    item_sets = [sorted(set(pool[rng.integers(0, 12, rng.integers(0, 4))].tolist())) for _ in range(n)]
    query_sets = [sorted(set(pool[rng.integers(0, 12, rng.integers(1, 3))].tolist())) for _ in range(nq)]
    query_sets[0], query_sets[1] = [], [12345]  # nothing passes: no class, a class nobody holds
    allowed = np.array([[bool(set(q) & set(i)) for i in item_sets] for q in query_sets])
    params = {"nlist": 8, "nprobe": 1} if kind == "ivf" else {}
    index = CodeIndex(bits, kind, **params)
    for part in np.array_split(np.arange(n), 3):  # out of id order: the merge path moves label rows
        index.add(codes[part], ids=ids[part], labels=SparseLabels.from_lists([item_sets[r] for r in part]))
    assert index.num_classes == 65536 and label_bytes(index) < 8 * (n + 1) + 4 * 4 * n
    order = np.argsort(ids)
    assert index.labels_of(ids[order]) == [item_sets[r] for r in order]
    queries = near_queries(rng, codes, nq)
    dense_queries = np.zeros((nq, 65536), bool)
    for q, row in enumerate(query_sets):
        dense_queries[q, row] = True
    k = 20
    ref_d, ref_i = top_k(queries, codes, ids, k, allowed)
    row_of = {int(i): r for r, i in enumerate(ids)}
    for filters in (SparseLabels.from_lists(query_sets), dense_queries):
        dist, got = index.search(queries, k, labels=filters)
        lims, d, i = index.range_search(queries, 6, labels=filters)
        if kind == "flat":
            np.testing.assert_array_equal(got, ref_i)
            np.testing.assert_array_equal(dist, ref_d)
            assert split_ranges(lims, d, i) == in_range(queries, codes, ids, 6, allowed)
        for q in range(nq):
            found = [int(x) for x in got[q] if x >= 0]
            assert all(allowed[q, row_of[x]] for x in found)
            assert all(allowed[q, row_of[int(x)]] for x in i[lims[q]:lims[q + 1]])
            if kind == "ivf":  # widening nprobe finds k matches wherever k exist
                assert len(found) == min(k, allowed[q].sum())
        assert (got[:2] == PAD_ID).all()
    # class ids (one per query) filter as their sets do
    single = np.array([row[0] if row else 7 for row in query_sets[2:]])
    np.testing.assert_array_equal(index.search(queries[2:], k, labels=single)[1],
                                  index.search(queries[2:], k, labels=SparseLabels.from_lists([[c] for c in single]))[1])


def label_bytes(index) -> int:
    """Memory the index's labels take, in both segments (lbhash.index._segments)."""
    return index._main.labels.nbytes + index._tail.labels.nbytes


def test_a_large_class_id_costs_its_own_label_not_a_matrix():
    """Issue 27, item 2: add(code, labels=[65535]) on a 10,000-item index grew the labels to a
    (10001, 65536) bool matrix (655 MB); sparse, they hold one int64 pointer per item and the ids."""
    rng = np.random.default_rng(0)
    index = CodeIndex(64)
    index.add(random_codes(rng, 10_000, 64), labels=rng.integers(0, 10, 10_000))
    index.add(random_codes(rng, 1, 64), labels=[65535])
    assert label_bytes(index) < 1 << 20, label_bytes(index)
    assert index.num_classes == 65536 and index.labels_of([10_000]) == [[65535]]
    codes, dense = index.get([10_000])  # get keeps its multi-hot answer (one row, num_classes wide)
    assert dense.shape == (1, 65536) and np.flatnonzero(dense[0]).tolist() == [65535]
    np.testing.assert_array_equal(index.get_codes([10_000]), codes)
    assert index.search(codes, 3, labels=[65535])[1][0].tolist() == [10_000, PAD_ID, PAD_ID]
    index.remove([10_000])
    assert index.num_classes == 65536 and label_bytes(index) < 1 << 20 and not index.contains([10_000])[0]


@pytest.mark.parametrize("count", [0, 1, 10, 64, 65, 300])
def test_sparse_labels_lists_at_reads_the_rows_asked_for(rng, count):
    lists = [sorted(set(rng.integers(0, 50, rng.integers(0, 4)).tolist())) for _ in range(500)]
    rows = SparseLabels.from_lists(lists)
    positions = rng.integers(0, 500, count)  # repeats too
    assert rows.lists_at(positions) == [lists[p] for p in positions.tolist()]


def test_sparse_labels_from_lists_sort_and_deduplicate():
    rows = SparseLabels.from_lists([[5, 1, 5], [], [65535, 0]])
    assert rows.to_lists() == [[1, 5], [], [0, 65535]] and rows.width == 65536
    assert rows.take([2, 0]).to_lists() == [[0, 65535], [1, 5]]
    assert rows.any_of([5]).tolist() == [True, False, False]
    with pytest.raises(InputError, match="non-negative"):
        SparseLabels.from_lists([[1, -1]])
    with pytest.raises(InputError, match="class id 70000; class ids must be at most 65535"):
        CodeIndex(16).add(np.zeros((1, 2), np.uint8), labels=SparseLabels.from_lists([[70000]]))


@pytest.mark.parametrize("kind", ["flat", "ivf", "multihash"])
def test_add_remove_upsert_then_search(rng, flat_scan, kind):
    bits = 16
    params = {"nlist": 4, "nprobe": 4} if kind == "ivf" else {}
    index = CodeIndex(bits, kind, **params)
    state = {}  # id -> (code, label)
    codes = random_codes(rng, 400, bits)
    first = index.add(codes[:300], labels=rng.integers(0, 3, 300))
    assert first.tolist() == list(range(300))
    state.update({i: codes[i] for i in range(300)})
    index.remove([5, 17, 299])
    for i in (5, 17, 299):
        del state[i]
    new_ids = index.add(codes[300:310])  # after the largest id ever added, removed ones too
    assert new_ids.tolist() == list(range(300, 310))
    state.update({int(i): codes[300 + r] for r, i in enumerate(new_ids)})
    index.add(codes[310:320], ids=np.arange(1000, 1010)[::-1])  # out of order
    state.update({int(1009 - r): codes[310 + r] for r in range(10)})
    index.add(codes[320:325], ids=[3, 4, 6, 1000, 5000], labels=[2, 2, 2, 1, 0], upsert=True)
    state.update({i: codes[320 + r] for r, i in enumerate([3, 4, 6, 1000, 5000])})
    got_codes, got_labels = index.get([3, 5000])
    np.testing.assert_array_equal(got_codes, codes[[320, 324]])
    assert got_labels.tolist() == [[False, False, True], [True, False, False]]
    ids = np.array(sorted(state))
    all_codes = np.stack([state[i] for i in ids])
    assert len(index) == index.ntotal == len(ids)
    np.testing.assert_array_equal(index.ids(), ids)
    queries = random_codes(rng, 10, bits)
    if kind == "flat":
        np.testing.assert_array_equal(index.search(queries, 15)[1], top_k(queries, all_codes, ids, 15)[1])
    lims, d, i = index.range_search(queries, 16)  # everything
    assert (np.diff(lims) == len(ids)).all() and set(i[:len(ids)].tolist()) == set(ids.tolist())


@pytest.mark.parametrize("kind, method", [("multihash", "search"), ("flat", "range_search")])
def test_faiss_runs_one_thread_for_a_single_query(rng, monkeypatch, kind, method):
    index = CodeIndex(16, kind=kind)
    index.add(random_codes(rng, 100, 16))
    faiss_index, seen = index._main.engine.index, []
    original = getattr(faiss_index, method)

    def spy(queries, *args, **kwargs):
        seen.append((len(queries), faiss.omp_get_max_threads()))
        return original(queries, *args, **kwargs)

    monkeypatch.setattr(faiss_index, method, spy)
    # restored as found: FAISS shares OpenMP with torch, whose later tests in this process ran with 2
    # threads when this test left 2 (on 2 busy cores, 2 to 8 times slower than with the suite's 1)
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(3)  # a batch's count that no machine's default makes look like one
    try:
        for nq in (1, 4):
            queries = random_codes(rng, nq, 16)
            index.search(queries, 3) if method == "search" else index.range_search(queries, 4)
        restored = faiss.omp_get_max_threads()
    finally:
        faiss.omp_set_num_threads(previous)
    assert {nq for nq, _ in seen} == {1, 4} and all(threads == (1 if nq == 1 else 3) for nq, threads in seen)
    assert restored == 3


def test_flat_scan_of_a_single_query_makes_no_openmp_call(rng, monkeypatch):
    """Each OpenMP call through FAISS lets go of the GIL, which a busy server pays for."""
    index = CodeIndex(16)
    index.add(random_codes(rng, 100, 16))
    calls = []
    for name in ("omp_get_max_threads", "omp_set_num_threads"):
        monkeypatch.setattr(faiss, name, lambda *args, name=name: calls.append(name) or 2)
    d, i = index.search(random_codes(rng, 1, 16), 3)
    assert calls == [] and (i >= 0).all()


BAD_CALLS = [
    (lambda ix: ix.add(np.ones((2, 16), np.int8)), "unpacked"),
    (lambda ix: ix.add(np.ones((2, 16), bool)), "unpacked"),
    (lambda ix: ix.add(np.zeros((2, 4), np.uint8)), "32 bits"),
    (lambda ix: ix.add(np.zeros(2, np.uint8)), "2-D"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), ids=[1.0, 2.0]), "ids must be integers"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), ids=[[1, 2]]), "1-D"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), ids=[4, 4]), "id 4 more than once"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), ids=[1]), "1 entries but there are 2"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), ids=[-1, 3]), "non-negative"),
    (lambda ix: ix.add(np.zeros((1, 2), np.uint8), ids=[0]), "id 0 is already"),
    (lambda ix: ix.add(np.zeros((2, 2), np.uint8), labels=[0]), "1 rows but there are 2"),
    (lambda ix: ix.add(np.zeros((1, 2), np.uint8), labels=[-2]), "non-negative"),
    (lambda ix: ix.search(np.zeros((1, 2), np.uint8), 0), "k must be a positive integer, got 0"),
    (lambda ix: ix.search(np.zeros((1, 2), np.uint8), 2.5), "got 2.5"),
    (lambda ix: ix.search(np.zeros((1, 3), np.uint8), 2), "24 bits"),
    (lambda ix: ix.search(np.zeros((1, 2), np.uint8), 2, labels=[0, 1]), "query labels has 2 rows"),
    (lambda ix: ix.range_search(np.zeros((1, 2), np.uint8), -1), "radius must be a non-negative integer, got -1"),
    (lambda ix: ix.get([7]), "id 7 is not in the index"),
    (lambda ix: ix.remove([0, 7]), "id 7 is not in the index"),
    (lambda ix: ix.remove([0, 0]), "id 0 more than once"),
]


@pytest.mark.parametrize("call, fragment", BAD_CALLS)
def test_bad_input_is_one_line_input_error(call, fragment):
    index = CodeIndex(16)
    index.add(np.zeros((3, 2), np.uint8))
    with pytest.raises(InputError) as err:
        call(index)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert index.ntotal == 3  # nothing changed


@pytest.mark.parametrize("args, fragment", [
    ((12,), "multiple of 8"), ((0,), "multiple of 8"), ((16, "hnsw"), "unknown index kind"),
    ((16, "flat"), None), ((16, "ivf", 4, 8), "nprobe=8 is larger than nlist=4"),
])
def test_constructor_checks(args, fragment):
    bits, *rest = args
    kind = rest[0] if rest else "flat"
    params = {"nlist": rest[1], "nprobe": rest[2]} if len(rest) == 3 else {}
    if fragment is None:
        assert CodeIndex(bits, kind).kind == kind
        with pytest.raises(InputError, match="unknown parameter 'nlist' for a flat index"):
            CodeIndex(bits, kind, nlist=3)
        return
    with pytest.raises(InputError, match=fragment):
        CodeIndex(bits, kind, **params)


def test_search_params_change_without_rebuild(rng):
    codes = clustered_codes(rng, 3000, 32, centers=30, max_flips=2)[0]
    queries = near_queries(rng, codes, 20)
    ref_d, _ = top_k(queries, codes, np.arange(3000), 10)
    ivf = CodeIndex(32, "ivf", nlist=16, nprobe=1)
    ivf.add(codes)
    ivf.set_search_params(nprobe=16)
    assert ivf.params["nprobe"] == 16
    np.testing.assert_array_equal(ivf.search(queries, 10)[0], ref_d)
    mh = CodeIndex(32, "multihash", nhash=2, nflip=0)
    mh.add(codes)
    mh.set_search_params(nflip=16)  # G = 2 * 17 - 1 >= 32: every query exact
    np.testing.assert_array_equal(mh.search(queries, 10)[0], ref_d)
    with pytest.raises(InputError, match="'nflip' is not a search parameter of a ivf index"):
        ivf.set_search_params(nflip=1)
    with pytest.raises(InputError, match="nprobe=17 is larger than nlist=16"):
        ivf.set_search_params(nprobe=17)
