"""The ranking's float rows scored in compiled code (lbhash.index._blend_kernel, through
`FloatQueries.cosines`): every float16 value read exactly, the centred cosine against numpy in float64, a
pair's score whatever else is scored, and a flat index's positional road against the road by id."""

import subprocess
import sys

import numpy as np
import pytest
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.index import _lookup, code_index
from lbhash.index.backend import FloatQueries
from lbhash.index.blend import _float_queries, _similarities_by_id
from lbhash.index.rescore import unit_rows
from lbhash.instance import MARK_KEY


def test_every_finite_float16_value_is_read_exactly():
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    values = np.where(np.isfinite(values), values, np.float16(0)).reshape(-1, 16)  # 4,096 rows of 16
    one_hot = np.eye(16)  # query t reads column t of every row, no centre: the row's product with it
    where = np.tile(np.arange(len(values)), (16, 1))
    got = FloatQueries(one_hot, None).cosines(values, where)
    np.testing.assert_array_equal(got, values.T.astype(np.float64))


def test_the_centred_cosine_is_numpys_in_float64_and_a_pairs_own():
    rng = np.random.default_rng(0)
    rows = unit_rows(np.abs(rng.standard_normal((300, 40))) + rng.standard_normal((300, 40)) * 0.1)
    rows[7] = 0  # an all-zero row: its centred norm is the centre's
    units = unit_rows(np.abs(rng.standard_normal((4, 40))))
    center = np.abs(rng.standard_normal(40)) / 7
    floats = _float_queries(units, center)
    where = rng.integers(0, 300, (4, 25))
    where[1, -5:] = -1  # padding scores 0
    where[2, 0] = 7
    got = floats.cosines(rows, where)
    centred = rows.astype(np.float64)[np.maximum(where, 0)] - center
    query = units.astype(np.float64) - center
    want = np.einsum("qcd,qd->qc", centred, query) / np.linalg.norm(centred, axis=2) / \
        np.linalg.norm(query, axis=1)[:, None]
    np.testing.assert_allclose(np.where(where >= 0, got, np.nan), np.where(where >= 0, want, np.nan),
                               rtol=0, atol=1e-12)
    assert (got[1, -5:] == 0).all()
    alone = floats[2:3].cosines(rows, where[2:3, 4:5])  # the same pair alone: the same bits
    assert alone[0, 0] == got[2, 4]
    raw = FloatQueries(units.astype(np.float64), None).cosines(rows, where)  # no centre: the unit rows' product
    np.testing.assert_allclose(raw[0], rows[where[0]].astype(np.float64) @ units[0].astype(np.float64),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_a_tabled_flat_index_scores_its_rows_by_position_as_the_ranking_scores_them_by_id(monkeypatch, dtype):
    monkeypatch.setattr(_lookup, "LOOKUP_MIN", 64)
    compiled = []
    monkeypatch.setattr(code_index, "both_candidates", lambda *a: compiled.append(1) or _lookup.both_candidates(*a))
    rng = np.random.default_rng(1)
    n = 400
    emb = np.abs(rng.standard_normal((n, 24)))
    inst = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    index = CodeIndex(8, embedding_dim=24, instance_bits=128, embedding_dtype=dtype)
    index.add(rng.choice(np.array([0, 1, 3, 255], np.uint8), (n, 1)), ids=np.arange(n) * 2, embeddings=emb,
              instance=inst)
    q, qi, qe = index.get_codes([0, 20, 400]), inst[[0, 10, 200]], emb[[0, 10, 200]] + 0.01
    center = emb.mean(axis=0)
    floats = _float_queries(unit_rows(qe), center)
    found = index.both_candidates(q, qi, 30, None, floats)
    assert compiled == [1]
    ok = found.ids >= 0
    by_id = _similarities_by_id(index, floats, found.ids, ok)
    if dtype == "float16":  # read by position, scored as read by id: the same bits
        np.testing.assert_array_equal(np.where(ok, found.similarities, 0), np.where(ok, by_id, 0))
    else:  # int8 rows are scored as the unit float16 rows of their directions: by id
        assert found.similarities is None
    index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.7}  # a calibrated mark (lbhash.instance.mark_rule)
    got = blended_search(index, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=3)
    assert got.ids[:, 0].tolist() == [0, 20, 400] and got.same[:, 0].all()  # each finds itself, the same picture
    plain = code_index.CodeIndex.both_candidates  # the same ranking with every row read by id: the same bits
    monkeypatch.setattr(code_index.CodeIndex, "both_candidates",
                        lambda self, *a: plain(self, *a)._replace(similarities=None))
    by_ids = blended_search(index, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=3)
    np.testing.assert_array_equal(got.ids, by_ids.ids)
    np.testing.assert_array_equal(got.scores, by_ids.scores)
    assert len(compiled) == 3  # (the tables' candidates, approximate: test_instance_lookup.py checks them)


def test_an_empty_batch_ranks_to_nothing():
    rng = np.random.default_rng(2)
    index = CodeIndex(16, embedding_dim=8, instance_bits=16)
    index.add(rng.integers(0, 256, (50, 2), dtype=np.uint8), embeddings=rng.random((50, 8)),
              instance=rng.integers(0, 256, (50, 2), dtype=np.uint8))
    none = np.zeros((0, 2), np.uint8)
    for queries in (Queries(none, np.zeros((0, 8)), none), Queries(none, instance=none), Queries(none, np.zeros((0, 8)))):
        got = blended_search(index, queries, 5)
        assert got.ids.shape == got.scores.shape == (0, 5)


WARM_THEN_SEARCH = """
import numpy as np
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.index._blend_kernel import candidate_cosines, ranked_top
from lbhash.index.blend import warm_ranking

warm_ranking()
before = len(candidate_cosines.signatures), len(ranked_top.signatures)
rng = np.random.default_rng(3)
emb = rng.random((60, 8))
index = CodeIndex(16, embedding_dim=8, instance_bits=16)
index.add(rng.integers(0, 256, (60, 2), dtype=np.uint8), embeddings=emb,
          instance=rng.integers(0, 256, (60, 2), dtype=np.uint8))
q, qi = index.get_codes([0, 1]), index.get_instance_codes([0, 1])
for queries in (Queries(q, emb[:2], qi, np.full(8, 0.5)), Queries(q, instance=qi), Queries(q, emb[:2])):
    assert blended_search(index, queries, 5).ids[0, 0] == 0
print(before, (len(candidate_cosines.signatures), len(ranked_top.signatures)))
"""


def test_warming_loads_the_kernels_that_ranked_searches_call():
    """`warm_ranking` (a served index's start-up) loads every signature that a ranked search then calls, in a
    fresh process: no search compiles or loads a kernel again."""
    done = subprocess.run([sys.executable, "-c", WARM_THEN_SEARCH], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(1, 1) (1, 1)"
