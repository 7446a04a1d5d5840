"""The evaluation engine against brute-force references (tests/reference.py)."""

import numpy as np
import pytest

import reference as ref
from helpers import labels_for, tied_codes
from lbhash.codes import pack
from lbhash.evaluate import (
    average_precision,
    evaluate_codes,
    format_metrics,
    knn_accuracy,
    lower_bound,
    mean_average_precision,
    precision_at_k,
    precision_recall_curve,
    precision_within_radius,
)

N_DB = 150


def make_case(rng, bits, multilabel, n_query=25, n_db=N_DB, classes=5):
    codes, which = tied_codes(rng, n_query + n_db, bits)
    labels = labels_for(rng, which, classes, multilabel)
    q, d = codes[:n_query], codes[n_query:]
    ql, dl = labels[:n_query], labels[n_query:]
    width = classes
    return q, d, ql, dl, ref.multihot(ql, width), ref.multihot(dl, width)


CASES = [(bits, ml) for bits in (8, 16, 32, 64) for ml in (False, True)]


@pytest.mark.parametrize("bits, multilabel", CASES)
@pytest.mark.parametrize("topk", [None, 1, 10, N_DB, N_DB + 7])
def test_average_precision_matches_stable_sort_reference(rng, bits, multilabel, topk):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel)
    expected = ref.average_precision(q, d, qm, dm, topk)
    got = average_precision(q, d, ql, dl, topk=topk)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    assert mean_average_precision(q, d, ql, dl, topk=topk) == pytest.approx(expected.mean(), abs=1e-9)


@pytest.mark.parametrize("bits", [96, 128, 200])
def test_average_precision_multiword_codes(rng, bits):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel=False)
    for topk in (None, 17):
        np.testing.assert_allclose(average_precision(q, d, ql, dl, topk=topk),
                                   ref.average_precision(q, d, qm, dm, topk), atol=1e-9)


def test_packed_and_sign_codes_give_the_same_result(rng):
    q, d, ql, dl, _, _ = make_case(rng, 24, multilabel=True)
    a = average_precision(q, d, ql, dl, topk=30, tie_averaged=True)
    b = average_precision(pack(q), pack(d), ql, dl, topk=30, tie_averaged=True, bits=24)
    np.testing.assert_array_equal(a, b)


def test_large_database_head_of_ranking(rng):
    # enough items that the cutoff guess comes from a strided sample, with skewed distances
    q, d, ql, dl, qm, dm = make_case(rng, 16, multilabel=False, n_query=6, n_db=40000)
    for topk in (1, 500, 12345, None):
        np.testing.assert_allclose(average_precision(q, d, ql, dl, topk=topk),
                                   ref.average_precision(q, d, qm, dm, topk), atol=1e-9)


@pytest.mark.parametrize("bits, multilabel", [(64, False), (64, True), (16, True), (128, False)])
def test_whole_database_over_several_blocks(rng, bits, multilabel):
    # R = all walks the database in blocks: more items than two blocks, a count that neither
    # the block nor 8 divides, one-byte keys (up to 64 bits) and two-byte keys (128 bits)
    from lbhash.evaluate._ap_all import BLOCK

    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel, n_query=4, n_db=2 * BLOCK + 4003)
    got = average_precision(q, d, ql, dl)
    np.testing.assert_allclose(got, ref.average_precision(q, d, qm, dm, None), rtol=0, atol=1e-12)
    # bit for bit: the precisions at the relevant items, added in index order (the order the
    # kernel documents), whatever its blocks and counters
    dist, rel = ref.distances(q, d), ref.relevance(qm, dm)
    for i in range(len(q)):
        order = np.argsort(dist[i], kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(1, len(order) + 1)
        hits_at = np.cumsum(rel[i][order])[rank - 1]
        total = 0.0
        for j in np.flatnonzero(rel[i]):
            total += float(hits_at[j]) / float(rank[j])
        assert got[i] == (total / rel[i].sum() if rel[i].any() else 0.0)


def test_class_ids_and_label_words_give_identical_ap(rng):
    # single-label data compares class ids; the label-word path must give the very same bits
    import dataclasses

    from lbhash.evaluate._inputs import prepare
    from lbhash.evaluate.retrieval import average_precisions

    q, d, ql, dl, _, _ = make_case(rng, 32, multilabel=False, n_query=9, n_db=3001, classes=7)
    inp = prepare(q, d, ql, dl)
    assert inp.db_class.shape == (3001,) and inp.db_class.dtype == np.uint8
    words = dataclasses.replace(inp, q_class=inp.q_class[:0], db_class=inp.db_class[:0])
    by_class, by_words = average_precisions(inp, None, True), average_precisions(words, None, True)
    for a, b in zip(by_class, by_words):
        np.testing.assert_array_equal(a, b)


# --- tie-averaged AP -------------------------------------------------------------------------

HAND_CASES = [
    # (distances, relevance, topk, expected)
    ([0, 0], [1, 0], None, (1 + 1 / 2) / 2),
    ([0, 0], [1, 0], 1, (1 + 0) / 2),
    ([0, 0, 0], [1, 1, 0], None, (1 + 5 / 6 + 7 / 12) / 3),   # RRN, RNR, NRR
    ([0, 0, 0], [1, 1, 0], 2, (1 + 1 + 1 / 2) / 3),
    ([0, 1, 1], [1, 0, 1], None, (1 + 5 / 6) / 2),
    ([1, 1, 0], [0, 0, 0], None, 0.0),
]


@pytest.mark.parametrize("dist, rel, topk, expected", HAND_CASES)
def test_tie_averaged_ap_hand_computed(dist, rel, topk, expected):
    bits = 4
    # codes at the wanted distances from an all -1 query: flip the first d bits
    db = -np.ones((len(dist), bits), dtype=np.int8)
    for i, k in enumerate(dist):
        db[i, :k] = 1
    q = -np.ones((1, bits), dtype=np.int8)
    db_labels = np.array([[1, 0] if r else [0, 1] for r in rel])
    got = average_precision(q, db, np.array([[1, 0]]), db_labels, topk=topk, tie_averaged=True)
    assert got[0] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("topk", [None, 1, 2, 3, 4, 5, 6, 7])
def test_tie_averaged_ap_matches_exhaustive_tie_orders(rng, topk):
    for _ in range(3):
        q, d, ql, dl, qm, dm = make_case(rng, 4, multilabel=True, n_query=5, n_db=7, classes=3)
        dist, rel = ref.distances(q, d), ref.relevance(qm, dm)
        expected = [ref.tie_averaged_ap_exact(dist[i], rel[i], topk) for i in range(len(q))]
        got = average_precision(q, d, ql, dl, topk=topk, tie_averaged=True)
        np.testing.assert_allclose(got, expected, atol=1e-9)


def test_tie_averaged_ap_matches_monte_carlo(rng):
    q, d, ql, dl, qm, dm = make_case(rng, 8, multilabel=False, n_query=4, n_db=120)
    dist, rel = ref.distances(q, d), ref.relevance(qm, dm)
    for topk in (None, 30):
        got = average_precision(q, d, ql, dl, topk=topk, tie_averaged=True)
        mc = [ref.tie_averaged_ap_monte_carlo(dist[i], rel[i], topk, 3000, rng) for i in range(len(q))]
        np.testing.assert_allclose(got, mc, atol=0.01)
        # the stable order is one draw among the tie orders, so it differs from the average
        stable = average_precision(q, d, ql, dl, topk=topk)
        assert np.abs(stable - got).max() > 1e-4


# --- other metrics ---------------------------------------------------------------------------

@pytest.mark.parametrize("bits, multilabel", CASES)
def test_precision_recall_curve(rng, bits, multilabel):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel)
    curve = precision_recall_curve(q, d, ql, dl)
    p, r, f = ref.pr_curve(q, d, qm, dm, bits)
    np.testing.assert_array_equal(curve.radius, np.arange(bits + 1))
    np.testing.assert_allclose(curve.precision, p, atol=1e-9)
    np.testing.assert_allclose(curve.recall, r, atol=1e-9)
    np.testing.assert_allclose(curve.retrieved_fraction, f, atol=1e-12)


@pytest.mark.parametrize("bits, multilabel", CASES)
@pytest.mark.parametrize("radius", [0, 2, 5])
def test_precision_within_radius(rng, bits, multilabel, radius):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel)
    got = precision_within_radius(q, d, ql, dl, radius=radius)
    p, empty = ref.precision_within_radius(q, d, qm, dm, radius)
    assert got.precision == pytest.approx(p, abs=1e-9)
    assert got.empty_fraction == pytest.approx(empty, abs=1e-12)


@pytest.mark.parametrize("bits, multilabel", CASES)
def test_precision_at_k(rng, bits, multilabel):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel)
    ks = (1, 5, 10, 50, N_DB, N_DB + 50)
    got = precision_at_k(q, d, ql, dl, ks=ks)
    p, r = ref.precision_at_k(q, d, qm, dm, ks)
    np.testing.assert_allclose(got.precision, p, atol=1e-9)
    np.testing.assert_allclose(got.recall, r, atol=1e-9)


@pytest.mark.parametrize("bits, multilabel", CASES)
@pytest.mark.parametrize("k", [1, 4, 25, N_DB + 1])
def test_knn_accuracy(rng, bits, multilabel, k):
    q, d, ql, dl, qm, dm = make_case(rng, bits, multilabel)
    assert knn_accuracy(q, d, ql, dl, k=k) == pytest.approx(ref.knn_accuracy(q, d, qm, dm, k), abs=1e-12)


def test_knn_vote_ties_go_to_nearer_class_then_smaller_id():
    q = -np.ones((2, 4), dtype=np.int8)
    db = -np.ones((4, 4), dtype=np.int8)
    db[1, :1] = 1  # class 1 item at distance 1
    db[3, :1] = 1  # class 0 item at distance 1
    # k = 2 neighbours: items 0 (class 2, d 0) and 2 (class 1, d 0): 1 vote each, equal
    # summed distance -> smallest class id (1) wins
    labels = np.array([2, 1, 1, 0])
    assert knn_accuracy(q, db, np.array([1, 2]), labels, k=2) == 0.5
    # k = 3 adds item 1 (class 1, d 1): class 1 has 2 votes and wins
    assert knn_accuracy(q, db, np.array([1, 2]), labels, k=3) == 0.5
    # equal votes but different summed distance: class 2 at d 0 beats class 0 at d 1
    labels = np.array([2, 1, 3, 0])
    db2 = db.copy()
    db2[1, :2] = 1  # class 1 now at d 2
    assert knn_accuracy(q[:1], db2, np.array([2]), labels, k=2) == 1.0


@pytest.mark.parametrize("bits, multilabel", CASES)
@pytest.mark.parametrize("percentile", [100, 99.9, 90])
def test_lower_bound(rng, bits, multilabel, percentile):
    _, d, _, dl, _, dm = make_case(rng, bits, multilabel)
    got = lower_bound(d, dl, percentile=percentile)
    lo, hi = ref.lower_bound(d, dm, percentile)
    assert got.min_inter == pytest.approx(lo, abs=1e-9)
    assert got.max_intra == pytest.approx(hi, abs=1e-9)
    assert got.ratio == pytest.approx(lo / hi, abs=1e-9)


def test_lower_bound_exact_case_and_infinite_ratio():
    codes = np.array([[1, 1, 1, 1], [1, 1, 1, -1], [-1, -1, -1, -1], [-1, -1, -1, -1]])
    got = lower_bound(codes, [0, 0, 1, 1], percentile=100)
    # centers: (1,1,1,1) (tie on the last bit -> +1) and (-1,-1,-1,-1): 4 apart; max intra 1
    assert got == (4.0, 1.0, 4.0)
    same = lower_bound(codes[[0, 0, 2, 2]], [0, 0, 1, 1], percentile=100)
    assert same.max_intra == 0 and same.ratio == float("inf")


def clustered_codes(rng, flips, n=120, classes=5, bits=64):
    """Codes around random class centers, each bit flipped with probability flips / bits."""
    centers = rng.choice([-1, 1], size=(classes, bits))
    which = rng.integers(0, classes, n)
    return centers[which] * np.where(rng.random((n, bits)) < flips / bits, -1, 1), which


def test_a_ratio_above_4_ranks_every_class_first(rng):
    """docs/evaluation.md: with the exact min and max, a ratio above 4 means every database code,
    as a query, ranks all items of its class before every other item (AP 1, any tie order)."""
    above = 0
    for flips in (1, 2, 3, 5, 8) * 4:
        codes, labels = clustered_codes(rng, flips)
        if lower_bound(codes, labels, percentile=100).ratio > 4:
            above += 1
            assert average_precision(codes, codes, labels, labels).min() == 1.0
    assert above >= 5  # the draws do reach above 4


def test_a_multi_label_ratio_is_at_most_2(rng):
    """An item of classes a and b lies within max D_intra of both centers, so min D_inter <=
    2 max D_intra: on multi-label data the exact ratio never exceeds 2, however tight the codes."""
    for flips in (0, 1, 3):
        codes, which = clustered_codes(rng, flips)
        labels = np.eye(5, dtype=bool)[which]
        labels[:3, (which[:3] + 1) % 5] = True  # three items with a second label
        assert lower_bound(codes, labels, percentile=100).ratio <= 2


def test_a_ratio_of_exactly_4_does_not_separate():
    """The 4 is tight: at exactly 4 a wrong-class item can tie with a right-class one."""
    bits = np.array([[int(b) for b in word] for word in ("00000000", "11000000", "00110000",
                                                          "11111111", "11111100", "00111111")])
    codes, labels = 2 * bits - 1, np.array([0, 0, 0, 1, 1, 1])
    assert lower_bound(codes, labels, percentile=100) == (8.0, 2.0, 4.0)
    # query 11000000: itself at 0, 00000000 at 2, then 00110000 (its class) tied at 4 with
    # 11111100: its third hit is 3rd or 4th, AP = (1 + 1 + (3/3 + 3/4) / 2) / 3
    ap = average_precision(codes[1:2], codes, labels[1:2], labels, tie_averaged=True)
    assert ap[0] == pytest.approx((2 + 0.875) / 3, abs=1e-12)


def test_the_printed_lower_bound_comes_with_its_scale(rng):
    """The bound is over the database codes and the mAP over the queries (issue 60, item 5): the
    table says so beside the ratio, so that "above 4" next to a modest mAP reads as no contradiction."""
    q, d, ql, dl, _, _ = make_case(rng, 16, multilabel=False)
    table = format_metrics(evaluate_codes(q, d, ql, dl)).splitlines()
    row = next(i for i, line in enumerate(table) if line.startswith("lower bound (p99.9)"))
    assert table[row + 1].strip() == ("(over the database items, not the queries; 0: two class centers coincide, "
                                      "above 4: the database's classes fully apart)")


def test_rank_cutoffs_at_or_above_the_database_size_are_not_printed_as_rankings(rng):
    """P@K with K >= the database size is the share of relevant items whatever the ranking, and a
    kNN vote of k >= the database size lets every item vote (issue 60, item 5): the table leaves
    those P@K out and says why in one line, and names the kNN vote for what it is; metrics.json
    keeps every value (docs/evaluation.md, "Printed tables")."""
    q, d, ql, dl, _, _ = make_case(rng, 16, multilabel=False, n_db=50)
    metrics = evaluate_codes(q, d, ql, dl, ks=(10, 49, 50, 100, 1000), knn=100)
    table = format_metrics(metrics)
    rows = dict(line.split(None, 1) for line in table.splitlines() if line.startswith("P@") and "P@H" not in line)
    assert set(rows) == {"P@10", "P@49", "P@50..1000"}, table
    assert rows["P@50..1000"].strip() == ("not shown: K >= the 50 database items (the share of relevant items, "
                                          "whatever the ranking)")
    knn = next(line for line in table.splitlines() if line.startswith("kNN"))
    assert knn.endswith(f"{metrics['knn_accuracy']['accuracy']:.4f}  (k >= the 50 database items: every item votes)")
    assert metrics["precision_at_k"]["k"] == [10, 49, 50, 100, 1000]  # the JSON keeps them all
    small = format_metrics(evaluate_codes(q, d, ql, dl, ks=(10, 20), knn=10)).splitlines()
    assert [r.split()[0] for r in small if r.startswith("P@") and "P@H" not in r] == ["P@10", "P@20"]
    assert any(r.startswith("kNN accuracy (k=10)  ") and "votes" not in r for r in small)


def test_evaluate_codes_agrees_with_single_metrics(rng):
    q, d, ql, dl, qm, dm = make_case(rng, 16, multilabel=True)
    m = evaluate_codes(q, d, ql, dl, topk=40, ks=(10, 20), radius=1, knn=7, tie_averaged=True)
    assert "map_tie_averaged" not in evaluate_codes(q, d, ql, dl, topk=40)  # only when asked
    assert m["map"] == pytest.approx(mean_average_precision(q, d, ql, dl, topk=40), abs=1e-12)
    assert m["map_tie_averaged"] == pytest.approx(
        mean_average_precision(q, d, ql, dl, topk=40, tie_averaged=True), abs=1e-12)
    p, _ = ref.precision_within_radius(q, d, qm, dm, 1)
    assert m["precision_within_radius"]["precision"] == pytest.approx(p, abs=1e-9)
    assert m["knn_accuracy"]["accuracy"] == pytest.approx(ref.knn_accuracy(q, d, qm, dm, 7))
    assert m["precision_at_k"]["k"] == [10, 20]


def test_threads_do_not_change_results(rng, monkeypatch):
    q, d, ql, dl, _, _ = make_case(rng, 32, multilabel=False, n_query=40)
    monkeypatch.setenv("LBHASH_NUM_THREADS", "1")
    one = average_precision(q, d, ql, dl, topk=20, tie_averaged=True)
    monkeypatch.setenv("LBHASH_NUM_THREADS", "3")
    np.testing.assert_array_equal(average_precision(q, d, ql, dl, topk=20, tie_averaged=True), one)


# --- bad input -------------------------------------------------------------------------------

GOOD = dict(query_codes=np.ones((2, 8), np.int8), db_codes=-np.ones((3, 8), np.int8),
            query_labels=np.array([0, 1]), db_labels=np.array([1, 0, 1]))


@pytest.mark.parametrize("change, message", [
    (dict(db_codes=np.ones((3, 16), np.int8)), "query_codes has 8 bits but db_codes has 16"),
    (dict(query_codes=np.ones((2, 2), np.uint8)), "query_codes has 16 bits but db_codes has 8"),
    (dict(query_labels=np.ones((2, 3)), db_labels=np.ones((3, 2))), "query_labels has 3 label columns but db_labels has 2"),
    (dict(query_codes=np.array([[1.0] * 7 + [np.nan]] * 2)), r"query_codes must hold only \+1/-1, found nan at row 0, column 7"),
    (dict(db_codes=np.array([[1, 0.5] * 4] * 3)), r"db_codes must hold only \+1/-1, found 0.5 at row 0, column 1"),
    (dict(query_codes=np.ones((0, 8), np.int8), query_labels=np.array([], dtype=int)), "query_codes is empty"),
    (dict(db_codes=np.ones((0, 8), np.int8), db_labels=np.array([], dtype=int)), "db_codes is empty"),
    (dict(db_labels=np.array([1, 0])), "db_labels has 2 rows but db_codes has 3"),
    (dict(query_labels=np.array([0, -1])), "query_labels must hold non-negative class ids, found -1"),
])
def test_bad_input_raises_value_error_naming_it(change, message):
    args = {**GOOD, **change}
    with pytest.raises(ValueError, match=message):
        mean_average_precision(**args)


@pytest.mark.parametrize("topk", [0, -3, 2.5, "10"])
def test_bad_topk(topk):
    with pytest.raises(ValueError, match=f"topk must be a positive integer or None .*got {topk!r}"):
        mean_average_precision(**GOOD, topk=topk)


def test_bad_tie_averaged_radius_ks_k_percentile():
    with pytest.raises(ValueError, match="tie_averaged must be True or False, got 'average'"):
        mean_average_precision(**GOOD, tie_averaged="average")
    with pytest.raises(ValueError, match="radius must be a non-negative integer, got -1"):
        precision_within_radius(**GOOD, radius=-1)
    with pytest.raises(ValueError, match="ks must be a non-empty list of positive integers"):
        precision_at_k(**GOOD, ks=(10, 0))
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        knn_accuracy(**GOOD, k=0)
    with pytest.raises(ValueError, match="percentile must be a number in"):
        lower_bound(GOOD["db_codes"], GOOD["db_labels"], percentile=120)
    with pytest.raises(ValueError, match="at least 2 classes"):
        lower_bound(GOOD["db_codes"], [0, 0, 0])


def test_misleading_sample_falls_back_to_exact_cutoff(rng):
    # The cutoff guess comes from every 2nd item here (40,000 items); the sampled ones are all
    # near the query, the others far, so the guess is too small for a long top list.
    n, bits = 40000, 16
    q = -np.ones((1, bits), dtype=np.int8)
    db = -np.ones((n, bits), dtype=np.int8)
    db[0::2, :1] = 1       # distance 1
    db[1::2, :10] = 1      # distance 10
    db[1::2, 10] = rng.choice([-1, 1], size=n // 2)  # some at 11: three tie groups
    dl = rng.integers(0, 2, n)
    qm, dm = ref.multihot(np.array([1]), 2), ref.multihot(dl, 2)
    for topk in (20001, 30000, None):
        for tie_averaged in (False, True):
            got = average_precision(q, db, np.array([1]), dl, topk=topk, tie_averaged=tie_averaged)
            if not tie_averaged:
                np.testing.assert_allclose(got, ref.average_precision(q, db, qm, dm, topk), atol=1e-9)
            else:
                mc = ref.tie_averaged_ap_monte_carlo(ref.distances(q, db)[0], ref.relevance(qm, dm)[0],
                                                     topk, 200, rng)
                assert got[0] == pytest.approx(mc, abs=0.005)


def test_classifier_accuracy():
    from lbhash.evaluate import classifier_accuracy

    scores = np.array([[0.1, 0.9, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.3, 0.2, 0.1]])
    assert classifier_accuracy(scores, [1, 0, 1, 2]) == 0.5
    multi = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]])
    assert classifier_accuracy(scores, multi) == 0.5  # rows 0 and 2 predict a label they have
    with pytest.raises(ValueError, match="scores must have shape"):
        classifier_accuracy(scores[:3], [1, 0, 1, 2])
