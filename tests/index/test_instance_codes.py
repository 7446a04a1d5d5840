"""Instance codes (lbhash.instance) kept beside the class codes, and the ranking by both
(lbhash.index.blend), against brute-force references computed here with plain numpy."""

import json

import numpy as np
import pytest

from helpers import flip_last_byte
from index_fakes import fake_milvus
from index_reference import brute_agreeing, brute_blend, tied_items
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, SparseLabels, blended_search
from lbhash.index.blend import SIMILARITY_POWER
from lbhash.instance import (LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES, LOOKS_LIKE_CODES_LEARNED, MARK_KEY, RECORD_KEY,
                             InstanceTransform, check_instance_bits)

KINDS = [("flat", {}), ("ivf", {"nlist": 4, "nprobe": 2}), ("multihash", {"nhash": 1})]


def popcount_distances(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hamming distances (nq, n) of packed rows, by unpacking every bit."""
    return (np.unpackbits(q[:, None, :], axis=2) != np.unpackbits(rows[None, :, :], axis=2)).sum(axis=2)


def test_the_transform_gives_balanced_codes_that_keep_neighbours_and_round_trips():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 64))
    t = InstanceTransform.fit(base, 32, seed=0)
    codes = t.apply(base)
    assert codes.shape == (300, 4) and codes.dtype == np.uint8
    assert abs(np.unpackbits(codes).mean() - 0.5) < 0.05  # ITQ balances the bits
    near = t.apply(base + 0.05 * rng.standard_normal(base.shape))  # a slightly moved copy of each row
    d = popcount_distances(near, codes)
    assert (d.argmin(axis=1) == np.arange(300)).mean() > 0.95  # its own row is the nearest
    again = InstanceTransform.from_bytes(t.to_bytes())
    assert again.digest() == t.digest() and np.array_equal(again.apply(base), codes)
    assert np.array_equal(InstanceTransform.fit(base, 32, seed=0).apply(base), codes)  # seeded: the same


def test_the_transform_refuses_bad_lengths_and_files():
    with pytest.raises(InputError, match="multiple of 8"):
        check_instance_bits(12)
    with pytest.raises(InputError, match="more than the embeddings' width 16"):
        InstanceTransform.fit(np.random.default_rng(0).standard_normal((50, 16)), 32)
    with pytest.raises(InputError, match="not an instance transform"):
        InstanceTransform.from_bytes(b"not a zip", "x.npz")
    t = InstanceTransform.fit(np.random.default_rng(0).standard_normal((50, 16)), 8)
    with pytest.raises(InputError, match=r"must be a 2-D array of real numbers \(n, 16\)"):
        t.apply(np.zeros((2, 15)))
    with pytest.raises(InputError, match="holds nan"):
        t.apply(np.full((1, 16), np.nan))


@pytest.mark.parametrize("kind,params", KINDS)
def test_instance_search_is_the_brute_force_order_with_changes_filters_and_a_reload(kind, params, tmp_path):
    codes, inst, labels = tied_items()
    index = CodeIndex(8, kind, **params)
    index.add(codes, labels=labels, instance=inst)
    index.remove(np.arange(0, 400, 5))
    index.add(codes[:30], ids=np.arange(0, 150, 5), labels=labels[:30], instance=inst[:30], upsert=True)
    q = inst[[0, 3, 9]]
    for filters in (None, [[1], [0, 2], [2]]):
        dist, ids = index.instance_search(q, 25, None if filters is None else SparseLabels.from_lists(filters))
        held = index.ids()
        d = popcount_distances(q, index.get_instance_codes(held))
        for r in range(3):
            ok = np.ones(len(held), bool) if filters is None else \
                np.array([bool(set(lab) & set(filters[r])) for lab in index.labels_of(held)])
            order = np.lexsort((held[ok], d[r][ok]))[:25]
            assert ids[r].tolist() == held[ok][order].tolist() and dist[r].tolist() == d[r][ok][order].tolist()
    index.save(tmp_path / "ix")
    again = CodeIndex.load(tmp_path / "ix")
    assert again.instance_bits == 16 and again.stats()["instance_bits"] == 16
    np.testing.assert_array_equal(again.instance_search(q, 25).ids, index.instance_search(q, 25).ids)


def test_instance_codes_come_with_every_add_or_none():
    codes, inst, _ = tied_items(20)
    index = CodeIndex(8)
    index.add(codes[:10], instance=inst[:10])
    with pytest.raises(InputError, match="keeps a 16-bit instance code per item"):
        index.add(codes[10:])
    with pytest.raises(InputError, match=r"instance codes has 3 bytes per code \(24 bits\), but the index holds 16-bit"):
        index.add(codes[10:], instance=np.zeros((10, 3), np.uint8))
    with pytest.raises(InputError, match="instance codes has 9 rows but there are 10 codes"):
        index.add(codes[10:], instance=inst[10:19])
    plain = CodeIndex(8)
    plain.add(codes[:10])
    with pytest.raises(InputError, match="keeps no instance codes"):
        plain.add(codes[10:], instance=inst[10:])
    assert index.ntotal == 10 and plain.ntotal == 10  # nothing added by a refused add


def test_a_tampered_or_mismatched_instance_file_is_refused_in_one_line(tmp_path):
    codes, inst, _ = tied_items(20)
    index = CodeIndex(8)
    index.add(codes, instance=inst)
    index.save(tmp_path / "ix")
    file = tmp_path / "ix" / "instance_codes.npy"
    flip_last_byte(file)
    with pytest.raises(InputError, match="instance_codes.npy: checksum mismatch"):
        CodeIndex.load(tmp_path / "ix")
    index.save(tmp_path / "iy")
    manifest = json.loads((tmp_path / "iy" / "manifest.json").read_text())
    manifest.pop("instance_bits")
    (tmp_path / "iy" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="instance_bits None and the instance_codes.npy entry must come together"):
        CodeIndex.load(tmp_path / "iy")


@pytest.mark.parametrize("kind,params", KINDS)
@pytest.mark.parametrize("looks_like", [0.0, 0.5, 1.0])
def test_the_blend_is_its_definition_on_every_kind_ties_included(kind, params, looks_like):
    codes, inst, labels = tied_items()
    index = CodeIndex(8, kind, **params)
    index.add(codes, labels=labels, instance=inst)
    q, qi = codes[[0, 1, 2, 3]], inst[[0, 5, 7, 11]]
    got = blended_search(index, Queries(q, instance=qi), 10, looks_like=looks_like, factor=3)
    for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, looks_like, 3, SIMILARITY_POWER)):
        assert got.ids[r].tolist() == ids.tolist()
        np.testing.assert_allclose(got.scores[r], scores, rtol=0, atol=1e-12)
    if looks_like == 0.0:  # same class first: the class distances never decrease down a row
        assert (np.diff(got.distances, axis=1) >= 0).all()


def test_the_blend_scores_by_centred_cosine_where_the_index_keeps_floats():
    codes, inst, _ = tied_items(200)
    emb = np.abs(np.random.default_rng(3).standard_normal((200, 12)))  # all positive, as pooled features are
    index = CodeIndex(8)
    index.add(codes, embeddings=emb, instance=inst)
    index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.7}  # a calibrated mark (lbhash.instance.mark_rule)
    center = emb.mean(axis=0) / np.linalg.norm(emb.mean(axis=0))
    q, qi, qe = codes[:3], inst[:3], emb[:3] * 2.0  # (scale does not matter: unit rows)
    got = blended_search(index, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=4)
    for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, 0.7, 4, SIMILARITY_POWER, qe, center)):
        assert got.ids[r].tolist() == ids.tolist()
        np.testing.assert_allclose(got.scores[r], scores, atol=1e-9)
    assert got.ids[:, 0].tolist() == [0, 1, 2] and got.same[:, 0].all()  # each finds itself, marked the same picture
    # left out, looks_like is LOOKS_LIKE where the cosine scores
    plain = blended_search(index, Queries(q, qe, qi, center), 10, factor=4)
    chosen = blended_search(index, Queries(q, qe, qi, center), 10, factor=4, looks_like=LOOKS_LIKE)
    np.testing.assert_array_equal(plain.scores, chosen.scores)
    for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, LOOKS_LIKE, 4, SIMILARITY_POWER, qe, center)):
        np.testing.assert_allclose(plain.scores[r], scores, atol=1e-9)


def test_with_the_codes_alone_each_query_weighs_its_look_by_how_its_look_alikes_share_its_class_code():
    codes, inst, _ = tied_items(300, seed=4)
    index = CodeIndex(8, instance_bits=16)
    index.add(codes, instance=inst)
    q, qi = codes[:40], inst[::7][:40]  # instance ties (tied_items) and class codes far from their look-alikes
    weights = brute_agreeing(index, q, qi)
    assert weights.min() >= LOOKS_LIKE_CODES and weights.max() <= LOOKS_LIKE_APART and len(np.unique(weights)) > 3
    for factor in (4, 1):  # 10 x 1 candidates: still the 20 nearest by instance code read
        plain = blended_search(index, Queries(q, instance=qi), 10, factor=factor)
        for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, weights, max(factor, 2), SIMILARITY_POWER)):
            assert plain.ids[r].tolist() == ids.tolist()
            np.testing.assert_allclose(plain.scores[r], scores, atol=1e-12)
    # given, it is the same for every query
    fixed = blended_search(index, Queries(q, instance=qi), 10, looks_like=LOOKS_LIKE_CODES)
    for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, LOOKS_LIKE_CODES, 4, SIMILARITY_POWER)):
        assert fixed.ids[r].tolist() == ids.tolist()
    # a learned instance code alone: LOOKS_LIKE_CODES_LEARNED for every query, not raised query by query
    index.metadata[RECORD_KEY] = {"method": "learned"}
    learned = blended_search(index, Queries(q, instance=qi), 10)
    assert (weights != LOOKS_LIKE_CODES_LEARNED).any()  # (so that the two defaults rank differently)
    for r, (ids, scores) in enumerate(brute_blend(index, q, qi, 10, LOOKS_LIKE_CODES_LEARNED, 4, SIMILARITY_POWER)):
        assert learned.ids[r].tolist() == ids.tolist()
        np.testing.assert_allclose(learned.scores[r], scores, atol=1e-12)
    assert not np.array_equal(learned.scores, plain.scores)


def test_the_blend_refuses_bad_parameters_in_one_line():
    codes, inst, _ = tied_items(20)
    index = CodeIndex(8)
    index.add(codes, instance=inst)
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(InputError, match="looks_like must be a number from 0"):
            blended_search(index, Queries(codes[:1], instance=inst[:1]), 5, looks_like=bad)
    with pytest.raises(InputError, match="there are 1 queries but 2 instance queries"):
        blended_search(index, Queries(codes[:1], instance=inst[:2]), 5)
    with pytest.raises(InputError, match="keeps no embeddings, so it cannot score by cosine"):
        blended_search(index, Queries(codes[:1], np.ones((1, 4)), inst[:1]), 5)
    plain = CodeIndex(8)
    plain.add(codes)
    with pytest.raises(InputError, match="keeps no instance codes"):
        blended_search(plain, Queries(codes[:1], instance=inst[:1]), 5)
    with pytest.raises(InputError, match="a centre goes with the query embeddings"):
        blended_search(index, Queries(codes[:1], instance=inst[:1], center=np.zeros(4)), 5)
    with pytest.raises(TypeError, match="takes its queries as lbhash.index.Queries, got ndarray"):
        blended_search(index, codes[:1], 5)  # a plain array of codes is a caller's mistake, not converted


def test_milvus_instance_codes_over_a_stand_in_client_search_and_blend_as_the_definition():
    """MilvusIndex's own code (its k + 1 fetch and tie collection by range search) over `fake_milvus`,
    which answers ties in reverse id order; tests/index/test_milvus.py repeats this on a real store."""
    codes, inst, labels = tied_items()
    ids = np.arange(400) * 3 + 7
    milvus, flat = fake_milvus(8, instance_bits=16), CodeIndex(8)
    for index in (milvus, flat):
        index.add(codes, ids=ids, labels=labels, instance=inst)
    q, qi = codes[[0, 1, 2, 3]], inst[[0, 5, 7, 11]]
    for a, b in zip(milvus.instance_search(qi, 25, labels=[0, 1, 2, 0]), flat.instance_search(qi, 25, labels=[0, 1, 2, 0])):
        np.testing.assert_array_equal(a, b)
    got = blended_search(milvus, Queries(q, instance=qi), 10, looks_like=0.5, factor=3)
    for r, (want, scores) in enumerate(brute_blend(flat, q, qi, 10, 0.5, 3, SIMILARITY_POWER)):
        assert got.ids[r].tolist() == want.tolist()
        np.testing.assert_allclose(got.scores[r], scores, rtol=0, atol=1e-12)


def test_many_rows_take_the_principal_directions_from_their_scatter_matrix(rng):
    """Issue 88, item 4: rows beyond twice the width take their directions from the d x d scatter matrix's
    eigenvectors; the same directions as the SVD of the rows (up to sign, where eigenvalues are distinct),
    each with its largest component positive."""
    from lbhash.instance import _principal

    scales = np.linspace(3.0, 0.5, 12)
    x = rng.standard_normal((400, 12)) * scales  # distinct variances: the directions are unique up to sign
    x -= x.mean(axis=0)
    got = _principal(x, 8, np.random.default_rng(0))
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    assert np.allclose(np.abs(np.sum(got * vt[:8].T, axis=0)), 1.0, atol=1e-8)
    assert np.allclose(got.T @ got, np.eye(8), atol=1e-10)
    assert (got[np.abs(got).argmax(axis=0), np.arange(8)] > 0).all()
    few = _principal(x[:20], 8, np.random.default_rng(0))  # (20 rows: the SVD, the same convention)
    assert (few[np.abs(few).argmax(axis=0), np.arange(8)] > 0).all()


def test_itq_in_float32_quantises_as_the_float64_loop_does(rng):
    """ITQ's products in float32 against the same loop in float64 (written out here): the same rotation to
    rounding, from the same start."""
    from lbhash import instance

    x = rng.standard_normal((3000, 32)) @ rng.standard_normal((32, 32))
    x -= x.mean(axis=0)
    directions = instance._principal(x, 16, np.random.default_rng(0))
    got = instance._itq(x, directions, np.random.default_rng(1))
    v = x @ directions
    rotation, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((16, 16)))
    for _ in range(instance.ITQ_ITERATIONS):
        u, _, wt = np.linalg.svd(v.T @ np.where(v @ rotation >= 0, 1.0, -1.0))
        rotation = u @ wt
    assert np.allclose(got, rotation, atol=1e-4)
