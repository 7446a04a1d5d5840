"""The learned instance code (lbhash.instance's "learned" transform, lbhash.train.instance_head) and the
calibrated same-picture mark (lbhash.instance.mark_rule, lbhash.runs.instance_learning.calibrate_mark),
against hand-computed and brute-force expectations."""

import numpy as np
import pytest

from lbhash.codes import hamming_distance, pack
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, blended_search
from lbhash.instance import MARK_KEY, InstanceTransform, mark_rule, mark_why
from lbhash.runs import instance_learning
from lbhash.train.instance_head import HeadOptions, fit_instance_head


def head_arrays(rng, d=12, h=7, bits=16):
    return {"mean": rng.standard_normal(d) * 0.1, "hidden": rng.standard_normal((d, h)),
            "hidden_bias": rng.standard_normal(h), "projection": rng.standard_normal((h, bits)),
            "bias": rng.standard_normal(bits), "skip": rng.standard_normal((d, bits))}


def test_a_learned_transform_is_its_network_signed_and_survives_its_file(rng):
    arrays = head_arrays(rng)
    t = InstanceTransform.from_head(arrays)
    x = rng.standard_normal((9, 12))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    x0 = unit - arrays["mean"]
    real = np.maximum(x0 @ arrays["hidden"] + arrays["hidden_bias"], 0) @ arrays["projection"] + x0 @ arrays["skip"] \
        + arrays["bias"]
    np.testing.assert_array_equal(t.apply(x), pack(np.where(real >= 0, 1, -1).astype(np.int8)))
    assert (t.dim, t.bits, t.method, t.learned) == (12, 16, "learned", True)
    again = InstanceTransform.from_bytes(t.to_bytes())
    np.testing.assert_array_equal(again.apply(x), t.apply(x))
    assert again.digest() == t.digest()
    other = InstanceTransform.from_head({**arrays, "bias": arrays["bias"] + 1})
    assert other.digest() != t.digest()
    itq = InstanceTransform.fit(rng.standard_normal((40, 12)), 8)
    assert not itq.learned and InstanceTransform.from_bytes(itq.to_bytes()).digest() == itq.digest()
    with pytest.raises(InputError, match="a learned head is trained by"):
        InstanceTransform.fit(rng.standard_normal((40, 12)), 8, "learned")


@pytest.mark.parametrize("broken", ["nan", "shape"])
def test_a_damaged_learned_transform_is_refused_in_one_line(rng, broken):
    arrays = head_arrays(rng)
    if broken == "nan":
        arrays["hidden"][2, 3] = np.nan
    else:
        arrays["hidden_bias"] = arrays["hidden_bias"][:-1]
    blob = InstanceTransform(arrays["mean"], arrays["projection"], "learned", arrays["hidden"], arrays["hidden_bias"],
                             arrays["bias"], arrays["skip"]).to_bytes()
    with pytest.raises(InputError, match="^x.npz: not an instance transform of this lbhash") as err:
        InstanceTransform.from_bytes(blob, "x.npz")
    assert "\n" not in str(err.value)


def test_the_mark_rule_reads_the_calibrated_record_and_refuses_a_broken_one():
    assert mark_rule(None) == (-1.0, False) and mark_rule({}) == (-1.0, False)
    assert mark_rule({MARK_KEY: {"mark": None, "why": "too few"}}) == (-1.0, False)
    assert mark_why({MARK_KEY: {"mark": None, "why": "too few"}}) == "too few"
    assert "rebuild" in mark_why({})
    assert mark_rule({MARK_KEY: {"mark": "instance", "threshold": 0.125}}) == (0.125, False)
    record = {"mark": "cosine", "threshold": 0.8, "instance": {"threshold": 0.1, "usable": True}}
    assert mark_rule({MARK_KEY: record}) == (0.8, True)
    assert mark_rule({MARK_KEY: record}, cosine=False) == (0.1, False)  # a search without float rows
    record["instance"]["usable"] = False
    assert mark_rule({MARK_KEY: record}, cosine=False) == (-1.0, False)
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


def test_the_head_learns_to_ignore_what_copies_undergo(rng):
    """Items are random vectors; a copy is its item moved far along four fixed directions (what an edit
    does to an embedding) plus a little noise: the ITQ code of a new copy mostly misses its item, the
    learned code, started from it, finds the item for nearly every copy."""
    n, d, bits = 120, 48, 32
    items = rng.standard_normal((n, d))
    edits = 3 * rng.standard_normal((4, d))
    copy = lambda: items + rng.standard_normal((n, 4)) @ edits + 0.3 * rng.standard_normal((n, d))  # noqa: E731
    views, owners = np.concatenate([copy() for _ in range(4)]), np.tile(np.arange(n), 4)
    itq = InstanceTransform.fit(items, bits)
    options = HeadOptions(hidden=64, steps=150, batch=64)
    t = InstanceTransform.from_head(fit_instance_head(items, views, owners, bits, options, start=itq.projection))
    fresh = copy()

    def recall(transform):
        return np.mean(hamming_distance(transform.apply(fresh), transform.apply(items), bits).argmin(axis=1) == np.arange(n))

    assert recall(itq) < 0.5 and recall(t) >= 0.9, (recall(itq), recall(t))
    again = fit_instance_head(items, views, owners, bits, options, start=itq.projection)
    assert InstanceTransform.from_head(again).digest() == t.digest()  # seeded: the same head
    with pytest.raises(InputError, match="two edited copies of every item"):
        fit_instance_head(items, views[:n], owners[:n], bits)


class PixelEncoder:
    """An encoder whose embedding of a photo is its pixels at 8x8 (a stand-in for a backbone)."""

    def outputs(self, images):
        emb = np.stack([np.asarray(img, np.float64)[::4, ::4].ravel() for img in images])
        return np.zeros((len(images), 8), np.float32), emb.astype(np.float32)


class Photos:
    def __init__(self, images):
        self.images = images

    def image(self, i):
        return self.images[i].copy()


def test_the_calibration_lets_no_other_photo_pass_and_says_why_where_it_cannot(rng, monkeypatch):
    photos = Photos([rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(60)])
    encoder = PixelEncoder()
    emb = encoder.outputs(photos.images)[1]
    transform = InstanceTransform.fit(emb, 64)
    instance = transform.apply(emb)
    held = np.arange(0, 60, 2)
    monkeypatch.setattr(instance_learning, "MIN_CALIBRATION", 10)
    record = instance_learning.calibrate_mark(encoder, photos, held, held, transform, instance, emb)
    assert record["photos"] == 30 and record["copies"] == 30 * len(record["edits"]) and record["held"] == held.tolist()
    # by hand: the instance threshold lies MARGIN_BITS + 1 below the nearest other item of every copy
    nearest = []
    for name in record["edits"]:
        q = transform.apply(instance_learning.copy_embeddings(encoder, photos, held, 1, 0, edit=name)[0])
        dist = hamming_distance(q, instance, 64).astype(np.int64)
        dist[np.arange(30), held] = 999
        nearest.append(dist.min(axis=1))
    cut = int(np.concatenate(nearest).min()) - 1 - instance_learning.MARGIN_BITS
    assert record["instance"]["threshold"] == pytest.approx((cut + 0.5) / 64)
    assert record["instance"]["false_marks"] == 0 and record["false_marks"] == 0
    assert record["mark"] in ("instance", "cosine", None)
    too_few = instance_learning.calibrate_mark(encoder, photos, held[:5], held[:5], transform, instance, emb)
    assert too_few["mark"] is None and "too few" in too_few["why"]
