"""The learned instance code (lbhash.instance.InstanceTransform.learn) and the
calibrated same-picture mark (lbhash.instance.mark_rule, lbhash.indexes.instance_learning.calibrate_mark),
against hand-computed and brute-force expectations."""

import numpy as np
import pytest

from helpers import InMemoryPhotos, pixel_embed
from lbhash.codes import hamming_distance, pack
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.instance import MARK_CANDIDATES, MARK_KEY, MARK_NEIGHBOUR, InstanceTransform, Mark, mark_rule, mark_why
from lbhash.indexes import instance_learning


def test_the_learned_transform_is_its_closed_form_and_survives_its_file(rng):
    """`InstanceTransform.learn`, against its definition computed here: whiten by the copies' difference
    covariance (shrunk), principal directions of the whitened photos, then a rotation (ITQ): the signs of
    x @ projection, with the projection's columns orthogonal in the whitened space."""
    n, d, bits = 80, 12, 8
    x, owners = rng.standard_normal((n, d)), np.tile(np.arange(n), 3)
    y = x[owners] + 0.3 * rng.standard_normal((3 * n, d))
    t = InstanceTransform.learn(x, y, owners, bits, seed=0)
    ux = x / np.linalg.norm(x, axis=1, keepdims=True)
    uy = y / np.linalg.norm(y, axis=1, keepdims=True)
    diff = uy - ux[owners]
    cov = diff.T @ diff / len(diff)
    values, vectors = np.linalg.eigh(cov)
    inv_sqrt = vectors @ np.diag(1 / np.sqrt(values + 0.01 * values[-1])) @ vectors.T
    np.testing.assert_allclose(t.mean, ux.mean(axis=0))
    # the projection is inv_sqrt @ (orthonormal columns): back in the whitened space they are orthonormal
    inner = np.linalg.solve(inv_sqrt, t.projection)
    np.testing.assert_allclose(inner.T @ inner, np.eye(bits), atol=1e-8)
    white = (ux - ux.mean(axis=0)) @ inv_sqrt
    top = np.linalg.svd(white - white.mean(axis=0), full_matrices=False)[2][:bits].T
    np.testing.assert_allclose(top @ (top.T @ inner), inner, atol=1e-8)  # the span of the top directions
    real = (ux - t.mean) @ t.projection
    np.testing.assert_array_equal(t.apply(x), pack(np.where(real >= 0, 1, -1).astype(np.int8)))
    assert (t.dim, t.bits, t.method) == (d, bits, "learned")
    again = InstanceTransform.from_bytes(t.to_bytes())
    assert again.method == "learned" and again.digest() == t.digest()
    np.testing.assert_array_equal(again.apply(y), t.apply(y))
    with pytest.raises(InputError, match="InstanceTransform.learn makes the learned one"):
        InstanceTransform.fit(x, 8, "learned")
    with pytest.raises(InputError, match="copies each naming its embedding's row"):
        InstanceTransform.learn(x, y, owners + n, bits)


def test_the_mark_rule_reads_the_calibrated_record_and_refuses_a_broken_one():
    assert mark_rule(None)[:2] == (-1.0, None) and mark_rule({})[:2] == (-1.0, None)
    assert mark_rule({MARK_KEY: {"mark": None, "why": "too few"}})[:2] == (-1.0, None)
    assert mark_why({MARK_KEY: {"mark": None, "why": "too few"}}) == "too few"
    assert "rebuild" in mark_why({})
    assert mark_rule({MARK_KEY: {"mark": "instance", "threshold": 0.125}})[:2] == (0.125, "instance")
    record = {"mark": "cosine", "threshold": 0.8, "instance": {"threshold": 0.1, "usable": True}}
    assert mark_rule({MARK_KEY: record})[:2] == (0.8, "cosine")
    assert mark_rule({MARK_KEY: record}, cosine=False)[:2] == (0.1, "instance")  # a search without float rows
    record["instance"]["usable"] = False
    assert mark_rule({MARK_KEY: record}, cosine=False)[:2] == (-1.0, None)
    # a margin mark: where the search reads only some items (query labels) the cosine's, then the instance's
    record = {"mark": "margin", "threshold": 0.2, "cosine": {"threshold": 0.7, "usable": True},
              "instance": {"threshold": 0.1, "usable": True}}
    assert mark_rule({MARK_KEY: record})[:2] == (0.2, "margin")
    assert mark_rule({MARK_KEY: record}, filtered=True)[:2] == (0.7, "cosine")
    assert mark_rule({MARK_KEY: record}, cosine=False)[:2] == (0.1, "instance")
    record["cosine"]["usable"] = False
    assert mark_rule({MARK_KEY: record}, filtered=True)[:2] == (0.1, "instance")
    # the margin or the instance distance, each at its own threshold; where the margin cannot apply, as a margin
    record = {"mark": "margin_or_instance", "threshold": 0.2, "instance_threshold": 0.1,
              "margin": {"threshold": 0.3, "usable": True}, "instance": {"threshold": 0.1, "usable": True}}
    assert mark_rule({MARK_KEY: record}) == Mark(0.2, "margin_or_instance", 0.1)
    assert mark_rule({MARK_KEY: record}, filtered=True) == Mark(0.1, "instance")
    assert mark_rule({MARK_KEY: record}, cosine=False) == Mark(0.1, "instance")
    for bad in (None, 0, 2.0):
        with pytest.raises(InputError, match="mark 'margin_or_instance', instance_threshold"):
            mark_rule({MARK_KEY: {**record, "instance_threshold": bad}})
    for bad in (1.5, 0, float("nan"), "0.5", True):
        with pytest.raises(InputError, match="same-picture mark .* is not one this lbhash reads"):
            mark_rule({MARK_KEY: {"mark": "instance", "threshold": bad}})
    with pytest.raises(InputError, match="mark 'hash'"):
        mark_rule({MARK_KEY: {"mark": "hash", "threshold": 0.5}})


def test_a_search_marks_exactly_the_hits_within_the_calibrated_distance(rng):
    n, bits, ibits = 300, 16, 32
    codes = rng.integers(0, 256, (n, bits // 8), dtype=np.uint8)
    inst = rng.integers(0, 256, (n, ibits // 8), dtype=np.uint8)
    index = CodeIndex(bits)
    index.add(codes, instance=inst)
    q, qi = codes[:20].copy(), inst[:20].copy()
    qi[:, 0] ^= rng.integers(0, 256, 20, dtype=np.uint8)  # up to 8 bits off their item's
    unmarked = blended_search(index, Queries(q, instance=qi), 10)
    assert not unmarked.same.any()  # no calibrated record: nothing marked
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 4.5 / ibits}
    got = blended_search(index, Queries(q, instance=qi), 10)
    np.testing.assert_array_equal(got.ids, unmarked.ids)
    brute = hamming_distance(qi, inst, ibits)
    want = np.take_along_axis(brute, np.maximum(got.ids, 0), axis=1) <= 4
    np.testing.assert_array_equal(got.same, want & (got.ids >= 0))
    assert got.same.any() and not got.same.all()


def test_a_margin_mark_is_the_cosine_less_the_querys_second_best_other_candidate(rng):
    """Every item is a candidate (35 items, fewer than the MARK_CANDIDATES a margin mark reads), so each
    hit's margin is its similarity less the second best of all the others', read off the full ranking."""
    n, d, ibits = 35, 16, 16
    emb = rng.standard_normal((n, d))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    project = rng.standard_normal((d, ibits))
    inst = pack(np.where(emb @ project >= 0, 1, -1))
    codes = rng.integers(0, 256, (n, 1), dtype=np.uint8)
    index = CodeIndex(8, embedding_dim=d, instance_bits=ibits)
    index.add(codes, embeddings=emb.astype(np.float32), instance=inst)
    near = emb[:12] + 0.15 * rng.standard_normal((12, d))  # copies of items 0-11, and 8 photos of none
    queries = np.vstack([near, rng.standard_normal((8, d))])
    qi = pack(np.where(queries @ project >= 0, 1, -1))
    query = Queries(codes[rng.integers(0, n, 20)], queries.astype(np.float32), qi)
    index.metadata[MARK_KEY] = {"mark": "margin", "threshold": 0.15}
    got = blended_search(index, query, n, looks_like=1.0)
    s = np.cbrt(got.scores)  # (looks_like 1: the score is the similarity cubed)
    second_other = np.where(s >= s[:, 1:2], s[:, 2:3], s[:, 1:2])  # each hit's 2nd best other (ranked: s descending)
    margin = s - second_other
    clear = np.abs(margin - 0.15) > 1e-9
    np.testing.assert_array_equal(got.same[clear], (margin >= 0.15)[clear])
    assert got.same[:12, 0].sum() >= 6 and not got.same.all()  # (the copies' originals stand out)
    cos = queries / np.linalg.norm(queries, axis=1, keepdims=True) @ emb.T  # (the similarity is the cosine)
    np.testing.assert_allclose(s, np.take_along_axis(cos, got.ids, 1), atol=2e-3)
    # the margin or the instance distance: the same hits, marked where either passes
    index.metadata[MARK_KEY] = {"mark": "margin_or_instance", "threshold": 0.15, "instance_threshold": 3.5 / ibits}
    either = blended_search(index, query, n, looks_like=1.0)
    np.testing.assert_array_equal(either.ids, got.ids)
    near = np.take_along_axis(hamming_distance(qi, inst, ibits), got.ids, 1) <= 3
    np.testing.assert_array_equal(either.same[clear], (margin >= 0.15)[clear] | near[clear])
    assert (either.same & ~got.same).any()  # (the instance distance marks hits the margin does not)


def test_the_learned_code_ignores_what_copies_undergo(rng):
    """Items are random vectors; a copy is its item moved far along four fixed directions (what an edit
    does to an embedding) plus a little noise: the ITQ code of a new copy mostly misses its item, the
    learned code finds the item for nearly every copy."""
    n, d, bits = 150, 48, 32
    items = rng.standard_normal((n, d))
    edits = 3 * rng.standard_normal((4, d))
    copy = lambda: items + rng.standard_normal((n, 4)) @ edits + 0.3 * rng.standard_normal((n, d))  # noqa: E731
    views, owners = np.concatenate([copy() for _ in range(4)]), np.tile(np.arange(n), 4)
    itq, learned = InstanceTransform.fit(items, bits), InstanceTransform.learn(items, views, owners, bits)
    fresh = copy()

    def recall(transform):
        return np.mean(hamming_distance(transform.apply(fresh), transform.apply(items), bits).argmin(axis=1) == np.arange(n))

    assert recall(itq) < 0.5 and recall(learned) >= 0.9, (recall(itq), recall(learned))


def test_the_calibration_lets_no_other_photo_pass_and_says_why_where_it_cannot(rng, monkeypatch):
    photos = InMemoryPhotos([rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(60)])
    encoder = pixel_embed
    emb = encoder(photos.images)
    transform = InstanceTransform.fit(emb, 64)
    instance = transform.apply(emb)
    held = np.arange(0, 60, 2)
    monkeypatch.setattr(instance_learning, "MIN_CALIBRATION", 10)
    record = instance_learning.calibrate_mark(encoder, photos, held, held, transform, instance, emb)
    assert record["photos"] == 30 and record["copies"] == 30 * len(record["edits"]) and record["held"] == held.tolist()
    # by hand: the instance threshold lies MARGIN_BITS + 1 below the nearest other item of every copy
    # and the margin's MARGIN_COSINE above the largest margin of a copy over another item: with its original
    # out, its MARK_CANDIDATES nearest by instance code (ties: the first items), best cosine less the 3rd best
    nearest, margins = [], []
    items = instance_learning.cosine_rows(transform, emb, kept=False)
    for name in record["edits"]:
        copies = instance_learning.copy_embeddings(encoder, photos, held, 1, 0, edit=name)[0]
        dist = hamming_distance(transform.apply(copies), instance, 64).astype(np.int64)
        dist[np.arange(30), held] = 999
        nearest.append(dist.min(axis=1))
        cos = instance_learning.cosine_rows(transform, copies) @ items.T
        for row in range(30):
            pool = np.lexsort((np.arange(60), dist[row]))[:MARK_CANDIDATES]
            best = np.sort(cos[row, pool[pool != held[row]]])[::-1]
            margins.append(best[0] - best[MARK_NEIGHBOUR])
    cut = int(np.concatenate(nearest).min()) - 1 - instance_learning.MARGIN_BITS
    assert record["instance"]["threshold"] == pytest.approx((cut + 0.5) / 64)
    assert record["margin"]["threshold"] == pytest.approx(min(1.0, max(margins) + instance_learning.MARGIN_COSINE))
    assert record["instance"]["false_marks"] == 0 and record["false_marks"] == 0
    # the margin or the instance distance: each at its own threshold, passing what either passes
    union = record.get("margin_or_instance")
    assert (union is not None) == (cut >= 0)
    if union is not None:
        assert union["threshold"] == record["margin"]["threshold"] and union["false_marks"] == 0
        assert union["instance_threshold"] == record["instance"]["threshold"]
        parts = (record["margin"]["recall"], record["instance"]["recall"])
        assert max(parts) <= union["recall"] <= sum(parts) + 1e-12
    assert record["mark"] in ("instance", "margin", "margin_or_instance", None)  # (the cosine: a fallback alone)
    monkeypatch.setattr(instance_learning, "ITEM_CHUNK", 7)  # the items compared a few at a time: the same record
    assert instance_learning.calibrate_mark(encoder, photos, held, held, transform, instance, emb) == record
    too_few = instance_learning.calibrate_mark(encoder, photos, held[:5], held[:5], transform, instance, emb)
    assert too_few["mark"] is None and "too few" in too_few["why"]


def test_a_learned_transform_keeps_its_float_rows_in_its_space_and_queries_meet_them_there(rng, monkeypatch):
    """The float rows of a learned transform are (unit(x) - mean) @ float_map, unit length, at FLOAT_DIMS
    wide; the index keeps them, a ranked search's queries come as the same rows (no centre), and the
    cosine mark is read by such a search."""
    import lbhash.instance as instance
    from lbhash.indexes.instance_codes import payload_of
    from lbhash.serving.searcher import ranked_queries

    monkeypatch.setattr(instance, "FLOAT_DIMS", 16)
    n, d = 90, 40
    x, owners = rng.standard_normal((n, d)), np.tile(np.arange(n), 2)
    y = x[owners] + 0.2 * rng.standard_normal((2 * n, d))
    t = InstanceTransform.learn(x, y, owners, 16)
    assert t.maps_floats and t.float_map.shape == (d, 16)
    rows = t.rows(x)
    ux = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = (ux - t.mean) @ t.float_map
    np.testing.assert_allclose(rows, want / np.linalg.norm(want, axis=1, keepdims=True), rtol=1e-5)
    again = InstanceTransform.from_bytes(t.to_bytes())
    np.testing.assert_array_equal(again.float_map, t.float_map)
    assert again.digest() == t.digest()
    assert InstanceTransform(t.mean, t.projection, "learned").digest() != t.digest()
    index = CodeIndex(8, embedding_dim=16, instance_bits=16)
    kept, inst = payload_of(t, index, x, n, "the items")
    np.testing.assert_array_equal(kept, rows)
    np.testing.assert_array_equal(inst, t.apply(x))
    codes = rng.integers(0, 256, (n, 1), dtype=np.uint8)
    index.add(codes, embeddings=kept, instance=inst)
    index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.9}
    queries = ranked_queries(codes[:5], y[:5], True, t)
    assert queries.center is None and queries.embeddings.shape == (5, 16)
    got = blended_search(index, queries, 3, looks_like=1.0)
    cos = (t.rows(y[:5]) @ rows.T)
    assert got.ids[:, 0].tolist() == cos.argmax(axis=1).tolist()
    np.testing.assert_array_equal(got.same[:, 0], np.take_along_axis(cos, got.ids[:, :1], axis=1)[:, 0] >= 0.9)
    bad = InstanceTransform(t.mean, t.projection, "learned", t.float_map[:5]).to_bytes()
    with pytest.raises(InputError, match="float map float64 \\(5, 16\\)"):
        InstanceTransform.from_bytes(bad)


def test_the_evaluation_counts_the_marks_with_the_originals_and_without_them(rng, tmp_path):
    """lbhash.serving.copies_evaluation.measure's mark figures against brute force: copies are their items' instance
    codes with a few bits flipped; the mark passes distances up to 6 of 64 bits; with the originals taken out
    of the index, a first hit is marked exactly when another item lies within 6 bits."""
    from lbhash.serving.copies_evaluation import Copies, measure, without_originals

    n, ibits = 400, 64
    inst = rng.integers(0, 256, (n, ibits // 8), dtype=np.uint8)
    inst[1] = inst[0] ^ np.array([1, 0, 0, 0, 0, 0, 0, 0], np.uint8)  # item 1: a duplicate of item 0
    codes = rng.integers(0, 256, (n, 1), dtype=np.uint8)
    index = CodeIndex(8)
    index.add(codes, labels=rng.integers(0, 3, n), instance=inst)
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 6.5 / ibits}
    index.save(tmp_path / "ix")
    picked = np.arange(0, 80, 2)  # item 0 among them, its duplicate (item 1) not
    flips = np.zeros((40, ibits // 8), np.uint8)
    flips[:, 0] = rng.integers(0, 256, 40, dtype=np.uint8) & 0x0F  # up to 4 bits off their item's
    flips[30:, 1] = 0xFF  # 8 more: too far to be marked
    queries = Queries(codes[picked], instance=inst[picked] ^ flips)
    copies = Copies(picked, index.labels_of(picked), {"x": queries}, 0.0)
    absent = without_originals(tmp_path / "ix", picked)
    got = measure(index, copies, "codes", 1.0, 4, absent)["x"]
    brute = hamming_distance(queries.instance, inst, ibits).astype(int)
    first = brute.argmin(axis=1)  # looks_like 1: the instance distance decides (ties by id)
    marked = brute[np.arange(40), first] <= 6
    assert got["mark_recall"] == pytest.approx(np.mean((first == picked) & marked))
    assert got["mark_precision"] == pytest.approx(np.mean(first[marked] == picked[marked]))
    others = brute.copy()
    others[:, picked] = 999  # the originals (all 40 picked items) are out
    assert got["false_marks_absent"] == pytest.approx(np.mean(others.min(axis=1) <= 6))
    assert 0 < got["mark_recall"] < 1 and got["false_marks_absent"] == 1 / 40  # item 0's copy finds item 1, marked


def test_an_index_whose_mark_is_broken_is_refused_on_opening(rng, tmp_path):
    from helpers import cli
    from lbhash.indexes.instance_codes import attach, index_transform

    emb = rng.standard_normal((40, 16))
    transform = InstanceTransform.fit(emb, 8)
    index = CodeIndex(8)
    attach(index, transform, "test")
    index.add(rng.integers(0, 256, (40, 1), dtype=np.uint8), instance=transform.apply(emb))
    for bad in (float("nan"), 1.5, -0.1):
        index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": bad}
        index.save(tmp_path / "ix")
        with pytest.raises(InputError, match="same-picture mark"):
            index_transform(CodeIndex.load(tmp_path / "ix"), "ix")
        result = cli("index", "info", tmp_path / "ix")
        assert result.exit_code == 2 and "same-picture mark" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_an_index_whose_item_view_this_version_does_not_make_is_refused_when_served(rng, tmp_path):
    """Photos added to it could not be embedded as its own were: the store refuses it when it opens, in one
    line; one built before the grayscale view opens and names that view (its adds are embedded so)."""
    from lbhash.data.views import BLUR_VIEW
    from lbhash.serving.index_store import IndexStore
    from lbhash.indexes.instance_codes import ITEM_VIEW_KEY

    index = CodeIndex(8)
    index.add(rng.integers(0, 256, (10, 1), dtype=np.uint8))
    index.metadata[ITEM_VIEW_KEY] = "sharpen-2"
    index.save(tmp_path / "ix")
    with pytest.raises(InputError, match="item view 'sharpen-2'") as e:
        IndexStore(tmp_path / "ix")
    assert "\n" not in str(e.value)
    index.metadata[ITEM_VIEW_KEY] = BLUR_VIEW
    index.save(tmp_path / "old")
    store = IndexStore(tmp_path / "old")
    try:
        assert store.item_view == BLUR_VIEW
    finally:
        store.close()
