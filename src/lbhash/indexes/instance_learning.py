"""The learned instance code and the calibrated same-picture mark of an index of photos, as `lbhash index
build` makes them from its run (docs/instance-codes.md, "The learned instance code", "The same picture").

- `learn_transform`: edited copies of the run's training photos (lbhash.data.edits.random_edit, COPIES
  each), embedded by the run's model as queries are, and the learned transform of them and the photos'
  item embeddings (lbhash.instance.InstanceTransform.learn), CALIBRATION photos held out of it.
- `calibrate_mark`: copies of those held-out photos under every named edit (lbhash.data.edits.EDITS),
  each searched against every item of the index: how near it comes to its original (a copy that should
  be marked) and to the nearest other item (a mark there would be false: the photo, for that search,
  is not in the index), by three measures: the instance distance, the centred cosine and the cosine's
  margin over the copy's other neighbours (lbhash.instance.MARK_NEIGHBOUR). Each threshold is the strictest
  that keeps all but FALSE_MARK_RATE of the second kind unmarked, a margin beyond; a fourth measure passes
  what the margin or the instance distance passes, each at its own threshold. Where the instance code ends
  in perceptual hashes, their least distance (lbhash.instance.perceptual_distances) is calibrated as the
  instance distance is, and every measure passes what it passes too (its figures say so). The measure that
  marks the most originals (the first of equals; the cosine only where a search cannot apply the margin) is
  the mark, kept with the others in the index's metadata (`same_picture`), read by the ranking
  (lbhash.instance.mark_rule). Where none can be calibrated, the record says why and no hit is marked.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from lbhash.codes import hamming_distance
from lbhash.data.edits import EDITS, edited, random_edit
from lbhash.data.perceptual import perceptual_codes
from lbhash.instance import (HASH_BITS, MARK_CANDIDATES, MARK_NEIGHBOUR, InstanceTransform, perceptual_distances,
                             unit_vectors)

logger = logging.getLogger("lbhash")

COPIES = 4               # random copies of each training photo the code learns from
MIN_LEARN_PHOTOS = 200   # fewer training photos: the ITQ code, and a line saying why
MAX_LEARN_PHOTOS = 5_000  # more: a seeded sample of them (the covariance of 20,000 copies is well estimated)
CALIBRATION = 200        # photos held out of the learning to calibrate the mark on (at most a fifth)
MIN_CALIBRATION = 50     # fewer: no mark
# the share of other photos' nearest items the calibration lets pass, and a margin beyond them: chosen on
# validation photos in no index (docs/results/copies.md, "The mark by margin"): at 0.1% and 0.02 of cosine
# the margin and the cosine each marked 7 first hits of 2,400 (look-alikes); at 0 and 0.05 the margin none
FALSE_MARK_RATE = 0.0
MARGIN_BITS = 2          # instance bits of margin (a cosine or a cosine's margin: MARGIN_COSINE)
# and of a perceptual hash's 64: at 2, 600 validation photos in no index came within 6 bits of another photo
# (a horse), the calibration's nearest at 10 (docs/results/copies.md, "The mark by the perceptual hashes too")
MARGIN_HASH_BITS = 4
MARGIN_COSINE = 0.05
MIN_MARK_RECALL = 0.5    # a mark that passes fewer of the copies' originals than this is not given
CALIBRATION_STREAM = 86  # the calibration sample's own random stream
CHUNK = 256              # photos edited and embedded at a time
ITEM_CHUNK = 65_536      # the index's items a calibration compares the copies with at a time


def copy_embeddings(embed, photos, ids: np.ndarray, copies: int, seed: int, edit=None,
                    hashes: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings float32 (len(ids) * copies, d), owners: the row of `ids` each is a copy of) of edited
    copies of the photos `ids` of image data set `photos`, embedded by `embed` (a list of photos to their
    embeddings, as queries are: lbhash.runs.codes.photo_embedder). `edit` None: `copies` random chains per photo, seeded by (seed, id); else the named
    edit (copies 1). `hashes`: a list that takes the copies' perceptual codes, chunk by chunk
    (lbhash.data.perceptual.perceptual_codes)."""
    embs, owners, started, last = [], [], time.perf_counter(), time.perf_counter()
    for start in range(0, len(ids), CHUNK):
        part = ids[start:start + CHUNK]
        images = []
        for i in part.tolist():
            img = photos.image(i)
            if edit is None:
                rng = np.random.default_rng((seed, i))
                images.extend(random_edit(img, rng) for _ in range(copies))
            else:
                images.append(edited(img, edit))
        embs.append(embed(images))
        if hashes is not None:
            hashes.append(perceptual_codes(images))
        owners.append(np.repeat(np.arange(start, start + len(part)), copies if edit is None else 1))
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            logger.info("instance code: %d of %d photos' copies embedded (%.0f s)", start + len(part), len(ids),
                        last - started)
    d = embs[0].shape[1] if embs else 0
    return (np.concatenate(embs) if embs else np.empty((0, d), np.float32)), \
        (np.concatenate(owners) if owners else np.empty(0, np.int64))


def learn_transform(embed, photos, train: np.ndarray, train_emb: np.ndarray, bits: int, seed: int = 0,
                    copies: int = COPIES):
    """(the learned transform, None) from the training photos `train` (positions in `photos`) and their
    item embeddings `train_emb` (`copies` edited copies of each), or (None, why) where there are fewer than
    MIN_LEARN_PHOTOS of them."""
    if len(train) < MIN_LEARN_PHOTOS:
        return None, (f"{len(train)} training photos are too few to learn an instance code on (at least "
                      f"{MIN_LEARN_PHOTOS}): the index keeps the ITQ code of their embeddings")
    if len(train) > MAX_LEARN_PHOTOS:
        keep = np.sort(np.random.default_rng(seed).choice(len(train), MAX_LEARN_PHOTOS, replace=False))
        train, train_emb = train[keep], train_emb[keep]
    started = time.perf_counter()
    views, owners = copy_embeddings(embed, photos, train, copies, seed)
    transform = InstanceTransform.learn(train_emb, views, owners, bits, seed)
    logger.info("instance code: learned from %d edited copies of %d photos in %.0f s", len(views), len(train),
                time.perf_counter() - started)
    return transform, None


def calibrate_mark(embed, photos, held: np.ndarray, held_rows: np.ndarray, transform: InstanceTransform,
                   instance: np.ndarray, floats: np.ndarray | None) -> dict:
    """The index's same-picture record: copies of the photos `held` (positions in `photos`; rows
    `held_rows` of the index's items) under every named edit, against the index's `instance` codes
    (packed, every item) and, where it keeps them, its `floats` (item embeddings; the centred cosine)."""
    if len(held) < MIN_CALIBRATION:
        return {"mark": None, "why": f"{len(held)} photos to calibrate the same-picture mark on are too few "
                                     f"(at least {MIN_CALIBRATION})"}
    found, hashed = [], []  # per edit: (instance own, nearest; cosine own, nearest; margin own, nearest)
    for name in EDITS:
        hashes = [] if transform.perceptual_bits else None
        emb, _ = copy_embeddings(embed, photos, held, 1, 0, edit=name, hashes=hashes)
        codes = transform.apply(emb, perceptual=np.concatenate(hashes) if hashes else None)
        rows = None if floats is None else cosine_rows(transform, emb)
        found.append(_own_and_nearest(codes, rows, held_rows, transform, instance, floats))
        if transform.perceptual_bits:
            hashed.append(_perceptual_own_and_nearest(codes, held_rows, transform.perceptual_bits, instance))
    own, nearest = (np.concatenate([f[i] for f in found]) for i in (0, 1))
    allowed = int(np.floor(FALSE_MARK_RATE * len(nearest)))
    cut_bits = strictest_cut(nearest, allowed, MARGIN_BITS)  # marks d <= cut_bits
    # each measure: (threshold, the originals it passes, the other items it passes), and further keys
    tests = {"instance": ((cut_bits + 0.5) / transform.bits, own <= cut_bits, nearest <= cut_bits, {})}
    if floats is not None:
        for by, at in (("cosine", 2), ("margin", 4)):
            to_own, to_nearest = (np.concatenate([f[i] for f in found]) for i in (at, at + 1))
            cut = min(1.0, float(np.sort(to_nearest)[::-1][allowed]) + MARGIN_COSINE)
            tests[by] = (cut, to_own >= cut, to_nearest >= cut, {})
        if 0 < tests["instance"][0] <= 1:  # each part at its own threshold
            (cut, passed, false, _), (share, *_) = tests["margin"], tests["instance"]
            tests["margin_or_instance"] = (cut, passed | (own <= cut_bits), false | (nearest <= cut_bits),
                                           {"instance_threshold": share})
    perceptual = _perceptual_test(hashed, allowed) if hashed else None
    measures = {}
    for by, (cut, passed, false, more) in tests.items():
        if perceptual is not None:  # (a hit is marked where its perceptual hashes pass, whatever the measure)
            passed, false = passed | perceptual[1], false | perceptual[2]
        measures[by] = {**_candidate(cut, passed, false), **more}
        measures[by]["usable"] = measures[by]["usable"] and measures[by]["false_marks"] <= allowed
    if perceptual is not None:
        measures["perceptual"] = {**_candidate(*perceptual), "perceptual_bits": transform.perceptual_bits}
    # (the cosine marks only where the margin cannot be applied, a search restricted by query labels: on validation
    # photos in no index it marked look-alikes at every threshold where the margin marked none, docs/results/
    # copies.md, "The mark by margin", "The mark by the perceptual hashes too")
    by = max((b for b in tests if b != "cosine"), key=lambda b: (measures[b]["usable"], measures[b]["recall"]))
    if perceptual is not None:
        measures[by] = {**measures[by], "perceptual_threshold": perceptual[0],
                        "perceptual_bits": transform.perceptual_bits}
    record = {"mark": by if measures[by]["usable"] else None, **measures[by], **measures, "copies": len(own),
              "photos": len(held), "edits": list(EDITS), "false_mark_rate": FALSE_MARK_RATE,
              "held": [int(i) for i in held]}
    if record["mark"] is None:
        record["why"] = (f"the codes do not tell copies from other photos: at a false-mark rate of {FALSE_MARK_RATE} "
                         f"the mark would pass {measures[by]['recall']:.0%} of the copies' originals (less than "
                         f"{MIN_MARK_RECALL:.0%})")
    return record


def _own_and_nearest(codes, rows, held_rows, transform: InstanceTransform, instance, floats):
    """Each copy's instance distance to its original and to the nearest other item, and where `rows` (the
    copies' cosine rows) the same as cosines and as margins (`_margins`), over the index's items ITEM_CHUNK
    at a time (bounded memory at any size)."""
    n, q = len(instance), np.arange(len(codes))
    own, nearest = np.zeros(len(codes), np.int64), np.full(len(codes), transform.bits + 1, np.int64)
    cos_own, cos_nearest = np.zeros(len(codes)), np.full(len(codes), -2.0)
    pools = [(np.empty((len(codes), 0), np.int64), np.empty((len(codes), 0))) for _ in range(2)]
    for start in range(0, n, ITEM_CHUNK):
        stop = min(n, start + ITEM_CHUNK)
        inside = (held_rows >= start) & (held_rows < stop)
        dist = hamming_distance(codes, instance[start:stop], transform.bits).astype(np.int64)
        own[inside] = dist[q[inside], held_rows[inside] - start]
        if rows is not None:  # (the search's order by instance code, the original in it: distance, then item)
            key = dist * (n + 1) + np.arange(start, stop)
        dist[q[inside], held_rows[inside] - start] = transform.bits + 1
        nearest = np.minimum(nearest, dist.min(axis=1))
        if rows is not None:
            cos = rows @ cosine_rows(transform, floats[start:stop], kept=True).T
            cos_own[inside] = cos[q[inside], held_rows[inside] - start]
            pools[0] = _nearest_by_code(pools[0], key, cos)  # (with the original)
            key[q[inside], held_rows[inside] - start] = np.iinfo(np.int64).max  # (the photo not in the index)
            pools[1] = _nearest_by_code(pools[1], key, cos)
            cos[q[inside], held_rows[inside] - start] = -2.0
            cos_nearest = np.maximum(cos_nearest, cos.max(axis=1))
    if rows is None:
        return own, nearest, None, None, None, None
    return (own, nearest, cos_own, cos_nearest, *_margins(pools, n, held_rows, cos_own))


def _perceptual_own_and_nearest(codes, held_rows, perceptual_bits: int, instance) -> tuple[np.ndarray, np.ndarray]:
    """Each copy's perceptual distance (lbhash.instance.perceptual_distances) to its original and to the
    nearest other item, ITEM_CHUNK items at a time."""
    q = np.arange(len(codes))
    own, nearest = np.zeros(len(codes), np.int64), np.full(len(codes), HASH_BITS + 1, np.int64)
    for start in range(0, len(instance), ITEM_CHUNK):
        stop = min(len(instance), start + ITEM_CHUNK)
        inside = (held_rows >= start) & (held_rows < stop)
        dist = perceptual_distances(codes, instance[start:stop], perceptual_bits).astype(np.int64)
        own[inside] = dist[q[inside], held_rows[inside] - start]
        dist[q[inside], held_rows[inside] - start] = HASH_BITS + 1
        nearest = np.minimum(nearest, dist.min(axis=1))
    return own, nearest


def _perceptual_test(hashed: list, allowed: int) -> tuple | None:
    """(threshold, the originals it passes, the other items it passes) of the perceptual distance, calibrated
    as the instance distance is (MARGIN_HASH_BITS below the strictest that lets `allowed` other items pass);
    None where no distance passes none of them."""
    own, nearest = (np.concatenate([h[i] for h in hashed]) for i in (0, 1))
    cut = strictest_cut(nearest, allowed, MARGIN_HASH_BITS)
    return None if cut < 0 else ((cut + 0.5) / HASH_BITS, own <= cut, nearest <= cut)


def strictest_cut(nearest: np.ndarray, allowed: int, margin: int) -> int:
    """The largest distance a mark passes: `margin` bits below the least that would let more than `allowed` of the
    copies' `nearest` other items (Hamming distances) pass."""
    return int(np.sort(nearest)[allowed]) - 1 - margin


def _nearest_by_code(pool: tuple, key: np.ndarray, cos: np.ndarray) -> tuple:
    """The MARK_CANDIDATES smallest keys (instance distance, then item) of `pool` (keys, cosines) and a chunk's."""
    keys, sims = np.hstack([pool[0], key]), np.hstack([pool[1], cos])
    if keys.shape[1] > MARK_CANDIDATES:
        keep = np.argpartition(keys, MARK_CANDIDATES - 1, axis=1)[:, :MARK_CANDIDATES]
        keys, sims = np.take_along_axis(keys, keep, 1), np.take_along_axis(sims, keep, 1)
    return keys, sims


def _margins(pools: list, items: int, held_rows: np.ndarray, cos_own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each copy's margin over its original, the largest margin over any other item with the original out of
    the index) as a search that marks by margin measures them: less the MARK_NEIGHBOUR-th best cosine of the
    other candidates among the MARK_CANDIDATES items nearest by instance code (-inf: fewer)."""
    (with_keys, with_sims), (_, without) = pools
    others = np.where(with_keys % (items + 1) == held_rows[:, None], -np.inf, with_sims)  # (the original out)
    ranked = -np.sort(-others, axis=1)
    alone = -np.sort(-without, axis=1)
    if ranked.shape[1] <= MARK_NEIGHBOUR:  # (an index of too few items: no margin)
        return np.full(len(cos_own), -np.inf), np.full(len(cos_own), -np.inf)
    return cos_own - ranked[:, MARK_NEIGHBOUR - 1], alone[:, 0] - alone[:, MARK_NEIGHBOUR]


def _candidate(threshold: float, passed: np.ndarray, false: np.ndarray) -> dict:
    """A measure's threshold and what it does on the calibration copies."""
    recall = float(np.mean(passed))
    return {"threshold": threshold, "recall": recall, "false_marks": int(false.sum()),
            "usable": bool(0 < threshold <= 1 and recall >= MIN_MARK_RECALL)}


def cosine_rows(transform: InstanceTransform, x: np.ndarray, kept: bool = False) -> np.ndarray:
    """Unit rows whose dot products are the ranking's cosines: the transform's rows (`kept`: `x` are already
    the index's rows), or the embeddings centred on its mean."""
    if transform.maps_floats:
        return unit_vectors(np.asarray(x if kept else transform.rows(x), np.float64))
    return unit_vectors(unit_vectors(np.asarray(x, np.float64)) - transform.mean)




class RunPhotos:
    """A run's model (as queries are encoded) and its photos for `lbhash index build`, loaded once, when first
    needed (an index too small to learn or calibrate on never loads them)."""

    def __init__(self, run_dir, spec: str):
        self.run_dir, self.spec = run_dir, spec
        self._loaded = None

    def _load(self):
        from lbhash.indexes import index_inputs

        if self._loaded is None:
            self._loaded = (index_inputs.photo_embedder(self.run_dir), index_inputs.run_photos(self.run_dir, self.spec))
        return self._loaded

    def learn(self, train: np.ndarray, train_emb: np.ndarray, bits: int, seed: int = 0):
        if len(train) < MIN_LEARN_PHOTOS:
            return learn_transform(None, None, train, train_emb, bits, seed)  # (says why, loads nothing)
        return learn_transform(*self._load(), train, train_emb, bits, seed)

    def perceptual(self, ids: np.ndarray) -> np.ndarray:
        """The packed perceptual codes of the photos `ids` (lbhash.data.perceptual.perceptual_codes)."""
        photos = self._load()[1]
        return np.concatenate([perceptual_codes([photos.image(i) for i in ids[start:start + CHUNK].tolist()])
                               for start in range(0, len(ids), CHUNK)] or [perceptual_codes([])])

    def calibrate(self, ids: np.ndarray, held: np.ndarray, transform, instance, floats) -> dict:
        order = np.argsort(ids, kind="stable")
        rows = order[np.searchsorted(ids[order], held)]  # the held photos' rows among the index's items
        if len(held) < MIN_CALIBRATION:
            return calibrate_mark(None, None, held, rows, transform, instance, floats)  # (says why)
        return calibrate_mark(*self._load(), held, rows, transform, instance, floats)


def held_photos(ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """The index's photos its mark is calibrated on (and a learned code does not learn from): CALIBRATION of
    `ids`, a seeded sample, at most a fifth; ascending."""
    held = min(CALIBRATION, len(ids) // 5)
    rng = np.random.default_rng((seed, CALIBRATION_STREAM))  # not the sample of an evaluation's seed
    return np.sort(rng.choice(np.asarray(ids, np.int64), held, replace=False))


def no_mark(why: str) -> dict:
    """The same-picture record of an index that cannot calibrate one."""
    return {"mark": None, "why": why}
