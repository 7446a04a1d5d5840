"""Changes cost what they change (lbhash.index._segments): removals leave tombstones, ids below
the largest go to a small exact tail, both fold back into the main segment past a limit. Every
search must still equal a brute-force reference over the live items, tie order included."""

import numpy as np
import pytest

from index_reference import allowed_rows, in_range, random_codes, split_ranges, top_k
from lbhash.errors import NotFound
from lbhash.index import CodeIndex, SparseLabels
from lbhash.index import _segments


class Reference:
    """id -> (code, class-id list): what the index should hold."""

    def __init__(self):
        self.items: dict[int, tuple[np.ndarray, list[int]]] = {}

    def arrays(self):
        ids = np.array(sorted(self.items), np.int64)
        codes = np.stack([self.items[i][0] for i in ids])
        labels = [self.items[i][1] for i in ids]
        return ids, codes, labels


def random_changes(rng, index, ref, bits, steps):
    """Appends, inserts below the largest id, upserts and removals, in random batches."""
    for _ in range(steps):
        op = rng.choice(["append", "below", "upsert", "remove"], p=[0.2, 0.3, 0.25, 0.25])
        n = int(rng.integers(1, 12))
        held = np.array(sorted(ref.items), np.int64)
        if op == "append":
            ids = np.arange(index.next_id, index.next_id + n) + rng.integers(0, 3)
        elif op == "below":
            free = np.setdiff1d(np.arange(index.next_id), held)
            if not len(free):
                continue
            ids = rng.choice(free, min(n, len(free)), replace=False)
        elif op == "upsert":
            ids = rng.choice(held, min(n, len(held)), replace=False)
        else:
            ids = rng.choice(held, min(n, len(held) - 1), replace=False)
            index.remove(ids)
            for i in ids.tolist():
                del ref.items[i]
            continue
        codes = random_codes(rng, len(ids), bits)
        labels = [sorted(set(rng.integers(0, 5, rng.integers(0, 3)).tolist())) for _ in ids]
        index.add(codes, ids=ids, labels=SparseLabels.from_lists(labels), upsert=op == "upsert")
        for i, c, lab in zip(ids.tolist(), codes, labels):
            ref.items[i] = (c, lab)


def check_against_reference(rng, index, ref, bits, kind):
    ids, codes, labels = ref.arrays()
    assert index.ntotal == len(ids)
    np.testing.assert_array_equal(index.ids(), ids)
    pick = rng.choice(ids, min(20, len(ids)), replace=False)
    got_codes = index.get_codes(pick)
    np.testing.assert_array_equal(got_codes, np.stack([ref.items[i][0] for i in pick.tolist()]))
    assert index.labels_of(pick) == [ref.items[i][1] for i in pick.tolist()]
    queries = np.concatenate([random_codes(rng, 6, bits), codes[:2]])
    lims, d, i = index.range_search(queries, bits // 4)
    assert split_ranges(lims, d, i) == in_range(queries, codes, ids, bits // 4)
    if kind != "flat":
        return
    for k in (1, 7, 40):
        got = index.search(queries, k)
        want = top_k(queries, codes, ids, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
    filters = SparseLabels.from_lists([[int(c)] for c in rng.integers(0, 5, len(queries))])
    item_labels = SparseLabels.from_lists(labels)
    allowed = allowed_rows(filters.to_dense(5), item_labels.to_dense(5))
    np.testing.assert_array_equal(index.search(queries, 9, labels=filters)[1],
                                  top_k(queries, codes, ids, 9, allowed)[1])


@pytest.mark.parametrize("kind", ["flat", "multihash", "ivf"])
@pytest.mark.parametrize("fold_at", [8, 10**9])  # fold often / never
def test_random_changes_search_like_brute_force(rng, monkeypatch, kind, fold_at):
    monkeypatch.setattr(_segments, "FRAGMENT_MIN", fold_at)
    monkeypatch.setattr(_segments, "FRAGMENT_MAX", max(fold_at, _segments.FRAGMENT_MAX))
    bits = 8  # 9 distances only: hundreds of items tie at each, so the tie order is tested
    params = {"nlist": 2, "nprobe": 2} if kind == "ivf" else {}
    index, ref = CodeIndex(bits, kind, **params), Reference()
    start = random_codes(rng, 300, bits)
    index.add(start, labels=SparseLabels.from_lists([[i % 5] for i in range(300)]))
    ref.items.update({i: (start[i], [i % 5]) for i in range(300)})
    for _ in range(6):
        random_changes(rng, index, ref, bits, steps=15)
        check_against_reference(rng, index, ref, bits, kind)
    if fold_at > 10**6:
        assert index._main.ndead and len(index._tail)  # the changes really stayed unfolded


def test_a_removal_and_an_insert_below_the_largest_leave_the_faiss_structure_alone(rng):
    index = CodeIndex(32)
    index.add(random_codes(rng, 5000, 32))
    faiss_index = index._main.engine.faiss_index()
    index.remove([10, 20, 30])
    index.add(random_codes(rng, 2, 32), ids=[20, 4000], upsert=True)  # a re-added id, an upsert
    assert index._main.engine.faiss_index() is faiss_index and faiss_index.ntotal == 5000
    assert index.ntotal == 4998 and index._main.ndead == 4 and len(index._tail) == 2  # 4000: its old copy died
    with pytest.raises(NotFound, match="id 10 is not"):
        index.get_codes([10])


def test_an_append_copies_only_what_it_adds(rng):
    index = CodeIndex(64)
    index.add(random_codes(rng, 1000, 64))
    index.add(random_codes(rng, 1, 64))  # grows the buffers (capacity doubles)
    before = index._main.rows.codes
    for _ in range(50):
        index.add(random_codes(rng, 1, 64))
    assert np.shares_memory(before, index._main.rows.codes)  # written in place, not re-allocated


def test_the_index_folds_past_the_fragment_limit(rng):
    index = CodeIndex(16)
    index.add(random_codes(rng, 20_000, 16))
    assert _segments.fragment_limit(20_000) == 20_000 // 16 and _segments.fragment_limit(10) == 1024
    dead, folds = 0, 0
    for start in range(0, 3000, 50):
        index.remove(np.arange(start, start + 50))
        dead += 50
        if dead > _segments.fragment_limit(index.ntotal):  # past n / 16 of the live items: folded
            assert index._main.ndead == 0 and len(index._main) == index.ntotal
            dead, folds = 0, folds + 1
        else:
            assert index._main.ndead == dead and len(index._main) == index.ntotal + dead
    assert folds == 2


def test_dead_items_crowding_a_query_still_give_k_live_results(rng):
    """More dead items among a query's nearest than the over-fetch covers: the row is searched
    again with the live items as a filter."""
    bits = 64
    codes = random_codes(rng, 3000, bits)
    codes[:200] = codes[0]  # 200 copies of one code ...
    index = CodeIndex(bits)
    index.add(codes)
    index.remove(np.arange(1, 200))  # ... all dead but the first
    live = np.setdiff1d(np.arange(3000), np.arange(1, 200))
    got = index.search(codes[:1], 10)
    want = top_k(codes[:1], codes[live], live, 10)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_save_folds_and_the_loaded_index_searches_the_same(rng, tmp_path):
    index = CodeIndex(16, "ivf", nlist=4, nprobe=1)
    index.add(random_codes(rng, 400, 16))
    index.remove(np.arange(0, 400, 3))
    index.add(random_codes(rng, 5, 16), ids=[0, 3, 6, 9, 12])
    index.save(tmp_path / "ix")
    assert not index._main.ndead and not len(index._tail)
    loaded = CodeIndex.load(tmp_path / "ix")
    queries = random_codes(rng, 20, 16)
    for got, want in zip(loaded.search(queries, 12), index.search(queries, 12)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("first", [0, 7, 1_000_003])
def test_codes_by_id_where_ids_are_consecutive_or_not(rng, first):
    """An ordered segment of consecutive ids finds a position by offset, one with a gap by binary search:
    both give each id's own code, and an id outside the run, below it, past it or in a gap, is not found."""
    codes = random_codes(rng, 300, 64)
    for ids in (np.arange(first, first + 300), np.r_[np.arange(first, first + 150), np.arange(first + 160, first + 310)]):
        index = CodeIndex(64)
        index.add(codes, ids=ids)
        assert index._main.ordered and len(index._tail) == 0
        picked = rng.permutation(len(ids))[:40]
        np.testing.assert_array_equal(index.get_codes(ids[picked]), codes[picked])
        index.remove(ids[picked[:5]])  # a removed id is not found, by offset or by search
        gap = [first + 155] if ids[-1] != first + 299 else []
        for missing in [first - 1, ids[-1] + 1, ids[-1] + 10**9, ids[picked[0]]] + gap:
            if missing < 0:  # (a negative id is refused as bad input before any look-up)
                continue
            with pytest.raises(NotFound):
                index.get_codes([missing])
