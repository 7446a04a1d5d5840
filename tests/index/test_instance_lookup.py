"""The instance candidates of a large segment through chunk tables (lbhash.index._lookup): the top k of
the lookup's candidates by (distance, id), against the rule recomputed from its definition."""

import numpy as np
import pytest

from lbhash.index import CodeIndex, SparseLabels, _lookup, code_index, table_bytes_per_item
from lbhash.errors import InputError
from lbhash.index.backend import PAD_DISTANCE


def distances(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hamming distances (nq, n) of packed rows, by unpacking every bit."""
    return (np.unpackbits(q[:, None, :], axis=2) != np.unpackbits(rows[None, :, :], axis=2)).sum(axis=2)


def reference(index: CodeIndex, q: np.ndarray, k: int, tabled: np.ndarray, filters=None):
    """Per query: (ids, distances) of the top k by (distance, id) among the live items (of a class in the
    query's row of `filters`) that are either not in `tabled` (added since the tables were built) or share
    a 16-bit chunk, within one bit, with the query (bytes 2t and 2t + 1 read as a little-endian uint16)."""
    held = index.ids()
    rows = index.get_instance_codes(held)
    d = distances(q, rows)
    chunks, q_chunks = rows.view("<u2"), q.view("<u2")
    out = []
    for r in range(len(q)):
        near = (np.unpackbits((chunks ^ q_chunks[r]).view(np.uint8), axis=1).reshape(len(held), -1, 16).sum(2) <= 1)
        ok = near.any(1) | ~np.isin(held, tabled)
        if filters is not None:
            ok &= np.array([bool(set(lab) & set(filters[r])) for lab in index.labels_of(held)])
        order = np.lexsort((held[ok], d[r][ok]))[:k]
        out.append((held[ok][order], d[r][ok][order]))
    return out


def check(index, q, k, tabled, filters=None):
    got = index.instance_search(q, k, None if filters is None else SparseLabels.from_lists(filters))
    for r, (ids, dist) in enumerate(reference(index, q, k, tabled, filters)):
        assert got.ids[r][:len(ids)].tolist() == ids.tolist() and (got.ids[r][len(ids):] == -1).all()
        assert got.distances[r][:len(ids)].tolist() == dist.tolist()
    return got


def test_a_large_segment_ranks_its_chunk_tables_candidates_ties_changes_and_filters_included(monkeypatch, tmp_path):
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 64)
    rng = np.random.default_rng(3)
    n = 600
    inst = rng.integers(0, 256, (n, 8), dtype=np.uint8)
    inst[1::9] = inst[0]  # one code held by many items: ties broken by id
    inst[500:540] = inst[:40]
    for r in range(500, 540):  # near copies: 5 bits flipped, within the 2 x 4 - 1 = 7 bits the tables guarantee
        for b in rng.choice(64, 5, replace=False):
            inst[r, b // 8] ^= np.uint8(1 << (b % 8))
    for j, r in enumerate(range(540, 600)):  # one chunk one bit off row 17's (each table, each bit), the rest random
        t, b = j % 4, j % 16
        inst[r, 2 * t:2 * t + 2] = (inst[17, 2 * t:2 * t + 2].view("<u2") ^ np.uint16(1 << b)).view(np.uint8)
    labels = rng.integers(0, 3, n)
    index = CodeIndex(8, instance_bits=64)
    index.add(rng.integers(0, 256, (n, 1), dtype=np.uint8), ids=np.arange(n) * 2, labels=labels, instance=inst)
    q = inst[[0, 3, 17, 500]]
    tabled = index.ids()
    got = check(index, q, 30, tabled)
    assert index._main.lookup_tables is not None and index._main.lookup_tables.covered == n  # the lookup ran
    # the near copy of query 3 (row 503, 5 bits away) is found; row 0's first 30 are its ties by id
    ties = np.flatnonzero((inst == inst[0]).all(1)) * 2
    assert 1006 in got.ids[1].tolist() and got.ids[0].tolist() == ties[:30].tolist()
    # items appended above the largest id are scanned until the tables are rebuilt; removed ones are gone
    more = rng.integers(0, 256, (20, 8), dtype=np.uint8)
    more[0] = inst[17]
    index.add(rng.integers(0, 256, (20, 1), dtype=np.uint8), ids=np.arange(2000, 2020), labels=np.zeros(20, int),
              instance=more)
    index.remove(np.array([0, 34, 1006]))
    got = check(index, q, 30, tabled)
    assert index._main.lookup_tables.covered == n and got.ids[2][0] == 2000  # (row 17's code, id 34 removed)
    check(index, q, 30, tabled, [[1], [0, 2], [2], [0]])
    check(index, q, 5000, tabled)  # k past every candidate: padded
    index.save(tmp_path / "ix")  # a saved index folds: its tables, rebuilt on load, hold every item
    again = CodeIndex.load(tmp_path / "ix")
    check(again, q, 30, again.ids())


def test_a_small_index_scans_and_the_tables_cost_is_said():
    assert table_bytes_per_item(_lookup.LOOKUP_MIN - 1, 256) == 0 and table_bytes_per_item(10**6, None) == 0
    assert table_bytes_per_item(_lookup.LOOKUP_MIN, 256) == 64 and table_bytes_per_item(10**6, 48) == 0  # 3 chunks


@pytest.mark.parametrize("n", [10, 200])
def test_warm_builds_the_tables_of_a_large_segment_only(monkeypatch, n):
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 100)
    rng = np.random.default_rng(0)
    index = CodeIndex(8, instance_bits=64)
    index.add(rng.integers(0, 256, (n, 1), dtype=np.uint8), instance=rng.integers(0, 256, (n, 8), dtype=np.uint8))
    index.warm()
    assert (index._main.lookup_tables is not None) == (n >= 100)


@pytest.mark.parametrize("k", [1, 12, 30, 80])
def test_items_found_through_several_tables_count_once_in_the_top(monkeypatch, k):
    """Copies of the query match it in every table, so the candidates hold each copy four times: the
    lookup cuts its top by the distances' counts with those repeats, and must widen the cut until k
    distinct items are in it (10 copies, then 20 items 3 bits off, then random ones)."""
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 64)
    rng = np.random.default_rng(5)
    n = 300
    inst = rng.integers(0, 256, (n, 8), dtype=np.uint8)
    inst[10:20] = inst[0]
    for r in range(20, 40):
        inst[r] = inst[0]
        for b in rng.choice(64, 3, replace=False):
            inst[r, b // 8] ^= np.uint8(1 << (b % 8))
    index = CodeIndex(8, instance_bits=64)
    index.add(rng.integers(0, 256, (n, 1), dtype=np.uint8), ids=np.arange(n), instance=inst)
    got = check(index, inst[[0]], k, index.ids())
    found = got.ids[0][got.ids[0] >= 0]
    assert len(found) == len(set(found.tolist())) >= min(k, 31)  # the copies and the near ones, each once
    assert got.ids[0][:min(k, 11)].tolist() == [0, *range(10, 20)][:k]


@pytest.mark.parametrize("bits", [128, 256])
def test_wide_instance_codes_rank_their_candidates_as_the_rule(monkeypatch, bits):
    """Rows of several words (the lookup lists its candidates, then reads each row, asked for ahead by its
    element offset): the rule's top k, the near copies and a tail included."""
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 64)
    rng = np.random.default_rng(bits)
    n, width = 400, bits // 8
    inst = rng.integers(0, 256, (n, width), dtype=np.uint8)
    inst[300:340] = inst[:40]
    for r in range(300, 340):  # near copies, 9 bits flipped: a miss differs in 2 bits of every chunk (16 or 32)
        for b in rng.choice(bits, 9, replace=False):
            inst[r, b // 8] ^= np.uint8(1 << (b % 8))
    index = CodeIndex(8, instance_bits=bits)
    index.add(rng.integers(0, 256, (n, 1), dtype=np.uint8), labels=np.zeros(n, int), instance=inst)
    q = inst[[0, 5, 39, 200]]
    tabled = index.ids()
    got = check(index, q, 25, tabled)
    assert index._main.lookup_tables is not None and got.ids[0][:2].tolist() == [0, 300]
    index.add(rng.integers(0, 256, (10, 1), dtype=np.uint8), ids=np.arange(1000, 1010), labels=np.zeros(10, int),
              instance=rng.integers(0, 256, (10, width), dtype=np.uint8))
    check(index, q, 25, tabled)


@pytest.mark.parametrize("k", [1, 7, 40])
def test_both_codes_candidates_are_the_union_of_the_two_top_ks(monkeypatch, tmp_path, k):
    """`CodeIndex.both_candidates` (compiled for one tabled segment, else `Backend`'s): the class codes'
    top k by (distance, id) over the live items, united with the chunk tables' top k, each once by id,
    with both distances, against the rule; 8-bit class codes tie by the hundred (ties by id)."""
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 64)
    compiled = []
    monkeypatch.setattr(code_index, "both_candidates", lambda *a: compiled.append(1) or _lookup.both_candidates(*a))
    rng = np.random.default_rng(k)
    n = 500
    inst = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    inst[400:440] = inst[:40]
    inst[400:440, 3] ^= 0x11  # near copies, 2 bits off
    index = CodeIndex(8, instance_bits=128)
    index.add(rng.integers(0, 256, (n, 1), dtype=np.uint8), ids=np.arange(n) * 3, instance=inst)
    tabled = index.ids()
    q, qi = rng.integers(0, 256, (5, 1), dtype=np.uint8), inst[[0, 7, 39, 250, 499]]

    def expect():
        held = index.ids()
        d_class = distances(q, index.get_codes(held))
        d_inst = distances(qi, index.get_instance_codes(held))
        for r, (by_instance, _) in enumerate(reference(index, qi, k, tabled)):
            ids = np.union1d(held[np.lexsort((held, d_class[r]))[:k]], by_instance)
            at = np.searchsorted(held, ids)
            yield ids, d_class[r][at], d_inst[r][at]

    def same_as_rule():
        got = index.both_candidates(q, qi, k)
        for r, (ids, d, di) in enumerate(expect()):
            assert got.ids[r].tolist() == ids.tolist() + [-1] * (got.ids.shape[1] - len(ids))
            assert got.distances[r][:len(ids)].tolist() == d.tolist()
            assert got.instance_distances[r][:len(ids)].tolist() == di.tolist()
            assert (got.distances[r][len(ids):] == PAD_DISTANCE).all()

    same_as_rule()
    assert compiled == [1]
    index.remove(np.array([0, 3 * 400]))  # a tombstone: Backend's road, the same rule
    same_as_rule()
    assert compiled == [1]
    index.save(tmp_path / "ix")  # saved, the removed items are folded out: the compiled road again
    index = CodeIndex.load(tmp_path / "ix")
    tabled = index.ids()
    same_as_rule()
    assert compiled == [1, 1]
    more = rng.integers(0, 256, (12, 16), dtype=np.uint8)  # appended above the largest id: scanned, not tabled
    more[0] = qi[3]
    index.add(rng.integers(0, 256, (12, 1), dtype=np.uint8), ids=np.arange(5000, 5012), instance=more)
    same_as_rule()
    assert compiled == [1, 1, 1]
    assert (5000 in index.both_candidates(q, qi, k).ids[3]) == (k > 1)  # (at k 1 its tie, id 750, comes first)
    assert index.both_candidates(q[:0], qi[:0], k).ids.shape == (0, 2 * k)
    with pytest.raises(InputError, match="there are 5 queries but 4 instance queries"):
        index.both_candidates(q, qi[:4], k)
    with pytest.raises(InputError, match="instance queries has 8 bytes per code .64 bits., but the index holds 128-bit codes"):
        index.both_candidates(q, qi[:, :8], k)
