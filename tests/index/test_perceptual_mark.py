"""The same-picture mark's perceptual part (issue 86): where an index's instance code ends in perceptual
hashes, a hit whose hashes lie near the query's is marked too, at a distance calibrated on the index's own
photos (lbhash.instance.perceptual_distances, Mark.perceptual_threshold; lbhash.indexes.instance_learning.
calibrate_mark; lbhash duplicates)."""

import numpy as np
import pytest

from helpers import InMemoryPhotos, pixel_embed
from lbhash.codes import hamming_distance
from lbhash.data.edits import edited
from lbhash.data.perceptual import BITS, PERCEPTUAL_BITS, perceptual_codes
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.instance import HASH_BITS, MARK_KEY, InstanceTransform, Mark, mark_rule, perceptual_distances
from lbhash.indexes import instance_learning


def brute(a, b, hashes):
    """The least distance of any of the last `hashes` 64-bit hashes of a's rows to any of b's rows', bit by bit."""
    bits_a, bits_b = np.unpackbits(a, axis=1), np.unpackbits(b, axis=1)
    width = bits_a.shape[1]
    out = np.full((len(a), len(b)), 10 ** 6)
    for i in range(hashes):
        for j in range(hashes):
            cols_a = slice(width - (hashes - i) * 64, width - (hashes - i - 1) * 64)
            cols_b = slice(width - (hashes - j) * 64, width - (hashes - j - 1) * 64)
            d = (bits_a[:, None, cols_a] != bits_b[None, :, cols_b]).sum(axis=2)
            out = np.minimum(out, d)
    return out


def test_the_perceptual_distance_is_the_least_of_the_hashes_distances(rng):
    assert HASH_BITS == BITS and PERCEPTUAL_BITS % HASH_BITS == 0  # (the layout perceptual_codes writes)
    a = rng.integers(0, 256, (7, 24), dtype=np.uint8)  # 64 other bits, then two hashes
    b = rng.integers(0, 256, (5, 24), dtype=np.uint8)
    b[0, 8:16] = a[0, 8:16]  # item 0 shares query 0's first hash, item 1 its second, item 2 has it first
    b[1, 16:] = a[0, 16:]
    b[2, 8:16] = a[0, 16:]
    want = brute(a, b, 2)
    np.testing.assert_array_equal(perceptual_distances(a, b, 128), want)
    assert want[0, 0] == 0 and want[0, 1] == 0 and want[0, 2] == 0
    np.testing.assert_array_equal(perceptual_distances(b, a, 128), want.T)  # (symmetric)
    np.testing.assert_array_equal(perceptual_distances(a[:5], b, 128, paired=True), np.diag(want[:5]))
    np.testing.assert_array_equal(perceptual_distances(a, b, 64), brute(a, b, 1))  # the last hash alone


def test_the_mark_rule_reads_the_perceptual_part_and_refuses_a_broken_one():
    record = {"mark": "margin", "threshold": 0.2, "perceptual_threshold": 0.1, "perceptual_bits": 128,
              "instance": {"threshold": 0.05, "usable": True}}
    assert mark_rule({MARK_KEY: record}) == Mark(0.2, "margin", -1.0, 0.1, 128)
    # the perceptual part stays where the measure falls back (a search without float rows)
    assert mark_rule({MARK_KEY: record}, cosine=False) == Mark(0.05, "instance", -1.0, 0.1, 128)
    record["instance"]["usable"] = False
    assert mark_rule({MARK_KEY: record}, cosine=False) == Mark(-1.0, None, -1.0, 0.1, 128)
    for key, bad in (("perceptual_bits", 100), ("perceptual_bits", None), ("perceptual_threshold", 1.5),
                     ("perceptual_threshold", float("nan"))):
        with pytest.raises(InputError, match=key):
            mark_rule({MARK_KEY: {**record, key: bad}})


def test_a_search_marks_the_hits_whose_hashes_are_near(rng):
    """Instance codes of 64 bits and two hashes; queries are items with a few bits of one hash or the other
    flipped, or of both: marked exactly where the least distance of any hash to any is within the threshold
    (brute force)."""
    n, ibits = 200, 192
    codes = rng.integers(0, 256, (n, 2), dtype=np.uint8)
    inst = rng.integers(0, 256, (n, ibits // 8), dtype=np.uint8)
    index = CodeIndex(16, instance_bits=ibits)
    index.add(codes, instance=inst)
    qi = inst[:30].copy()
    for i in range(30):  # flip i % 12 bits of the first hash and 12 - i % 12 of the second
        bits = np.unpackbits(qi[i])
        flip = np.r_[rng.choice(np.arange(64, 128), i % 12, replace=False),
                     rng.choice(np.arange(128, 192), 12 - i % 12, replace=False)]
        bits[flip] ^= 1
        qi[i] = np.packbits(bits)
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 0.5 / ibits, "perceptual_threshold": 4.5 / 64,
                                "perceptual_bits": 128}
    got = blended_search(index, Queries(codes[:30], instance=qi), 5)
    near = np.take_along_axis(brute(qi, inst, 2), got.ids, 1) <= 4
    exact = np.take_along_axis(hamming_distance(qi, inst, ibits), got.ids, 1) == 0
    np.testing.assert_array_equal(got.same, near | exact)
    assert got.same[:, 0].sum() == sum(1 for i in range(30) if min(i % 12, 12 - i % 12) <= 4)
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 0.5 / ibits}  # without it: none of those
    assert not blended_search(index, Queries(codes[:30], instance=qi), 5).same.any()


def test_the_calibration_sets_the_perceptual_threshold_below_every_other_photo(rng, monkeypatch):
    """Photos of smooth colour fields, a pixel embedding and a code of 64 learned bits and the two hashes:
    the perceptual threshold lies MARGIN_HASH_BITS + 1 below the least perceptual distance of any copy to
    another photo (computed here from the copies' own hashes), and every measure passes what it passes."""
    from PIL import Image

    photos = InMemoryPhotos([np.asarray(Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).resize(
        (32, 32), Image.Resampling.BICUBIC)) for _ in range(60)])
    embed = pixel_embed
    emb = embed(photos.images)
    transform = InstanceTransform.fit(emb, 192).with_perceptual(PERCEPTUAL_BITS)
    instance = transform.apply(emb, perceptual=perceptual_codes(photos.images))
    held = np.arange(0, 60, 2)
    monkeypatch.setattr(instance_learning, "MIN_CALIBRATION", 10)
    record = instance_learning.calibrate_mark(embed, photos, held, held, transform, instance, emb)
    own, nearest = [], []
    for name in record["edits"]:
        hashes = perceptual_codes([edited(photos.image(i), name) for i in held])
        d = brute(np.hstack([np.zeros((30, 8), np.uint8), hashes]), instance, 2)
        own.append(d[np.arange(30), held])
        d[np.arange(30), held] = 999
        nearest.append(d.min(axis=1))
    own, nearest = np.concatenate(own), np.concatenate(nearest)
    cut = int(nearest.min()) - 1 - instance_learning.MARGIN_HASH_BITS
    assert cut >= 0  # (the fields are far apart: the hashes tell them apart)
    assert record["perceptual"]["threshold"] == pytest.approx((cut + 0.5) / 64)
    assert record["perceptual"]["recall"] == pytest.approx(np.mean(own <= cut))
    assert record["perceptual_threshold"] == record["perceptual"]["threshold"] and record["perceptual_bits"] == 128
    assert record["mark"] is not None and record["false_marks"] == 0
    for by in ("instance", "cosine", "margin"):  # each passes at least what the hashes pass
        assert record[by]["recall"] >= record["perceptual"]["recall"] - 1e-12
    assert mark_rule({MARK_KEY: record}).perceptual_threshold == record["perceptual_threshold"]


def test_an_index_whose_mark_reads_other_perceptual_bits_than_its_code_keeps_is_refused(rng):
    from lbhash.indexes.instance_codes import attach, index_transform

    emb = rng.normal(size=(50, 200))
    transform = InstanceTransform.fit(emb, 192).with_perceptual(128)
    index = CodeIndex(16, instance_bits=192)
    attach(index, transform, "the test's items")
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 0.1, "perceptual_threshold": 0.1,
                                "perceptual_bits": 128}
    assert index_transform(index, "ix").perceptual_bits == 128
    index.metadata[MARK_KEY]["perceptual_bits"] = 64
    with pytest.raises(InputError, match="ix: its same-picture mark reads 64 perceptual bits but its instance "
                                         "codes end in 128"):
        index_transform(index, "ix")


def test_a_hit_whose_hashes_pass_ranks_first_whatever_its_score(rng):
    """Item 0 is the query's picture by its hashes (2 bits off) but its 64 learned bits all differ (66 bits
    in all); item 1 shares the query's learned bits, its hashes 20 bits off each (40 in all), so by instance
    distance it ranks first. With the mark's perceptual part item 0 comes first, marked, with its own score;
    the others follow in their order."""
    n, ibits = 50, 192
    inst = rng.integers(0, 256, (n, ibits // 8), dtype=np.uint8)
    query = inst[0].copy()
    query[:8] = ~inst[0, :8]
    query[8] ^= 0b11
    inst[1] = query
    for start in (64, 128):  # 20 bits of each of item 1's hashes flipped
        bits = np.unpackbits(inst[1])
        bits[start:start + 20] ^= 1
        inst[1] = np.packbits(bits)
    index = CodeIndex(16, instance_bits=ibits)
    index.add(np.zeros((n, 2), np.uint8), instance=inst)
    queries = Queries(np.zeros((1, 2), np.uint8), instance=query[None])
    d = hamming_distance(query[None], inst, ibits)[0]
    assert d[0] == 66 and d[1] == 40 and np.sort(d)[2] > 66
    plain = blended_search(index, queries, 3, looks_like=1.0)
    assert list(plain.ids[0, :2]) == [1, 0]
    index.metadata[MARK_KEY] = {"mark": "instance", "threshold": 0.5 / ibits, "perceptual_threshold": 4.5 / 64,
                                "perceptual_bits": 128}
    got = blended_search(index, queries, 3, looks_like=1.0)
    assert list(got.ids[0]) == [0, 1, plain.ids[0, 2]] and list(got.same[0]) == [True, False, False]
    np.testing.assert_allclose(got.scores[0, :2], plain.scores[0, [1, 0]])
