"""One ranking from two codes: a search that finds the class and the very picture at once
(docs/search.md, "Instance codes").

An index that keeps an instance code beside each class code (lbhash.instance) is searched by both:
the class code's top `k * factor` and the instance code's top `k * factor` are merged, and each
candidate is scored

    score = (1 - looks_like) * (1 - 2 * d_class / bits) + looks_like * similarity

where `similarity` is the cosine of the query's and the item's embeddings where the index keeps them
(read for these candidates only), else cos(pi * d_instance / instance_bits), the angle that the
instance codes' Hamming distance estimates. `looks_like` reads from 0 (same class first: the class
distance decides, the look breaks its ties) to 1 (looks like first). Order: descending score, then
class distance, instance distance, id. A hit whose similarity passes the same-picture threshold
(`SAME_COSINE`, or `SAME_INSTANCE` of the instance bits) is marked `same`: an edited copy or a
duplicate of the query.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lbhash.errors import InputError
from lbhash.index import _checks
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend
from lbhash.index.rescore import EMBEDDING_DTYPE, check_embeddings, cosine_scores, unit_rows
from lbhash.instance import BLEND_FACTOR, LOOKS_LIKE, SAME_COSINE, SAME_INSTANCE

BUDGET = 1 << 22        # gathered candidate values scored at a time
# the similarity enters the score raised to this power (its sign kept): a copy's similarity near 1 keeps
# its weight while the moderate similarities of other items of the class shrink, so that the class
# distance orders them (chosen on validation items with LOOKS_LIKE)
SIMILARITY_POWER = 3


class Blended(NamedTuple):
    """A blended top k, each (nq, k), by (descending score, class distance, instance distance, id):
    scores float64, class `distances` int32, `instance_distances` int32, `ids` int64, `same` bool
    (the same picture); padded with -inf, PAD_DISTANCE, PAD_DISTANCE, PAD_ID, False."""

    scores: np.ndarray
    distances: np.ndarray
    instance_distances: np.ndarray
    ids: np.ndarray
    same: np.ndarray


def check_looks_like(value, name: str = "looks_like") -> float:
    """A ranking parameter between 0 (same class first) and 1 (looks like first)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not np.isfinite(value) or not 0 <= value <= 1:
        raise InputError(f"{name} must be a number from 0 (same class first) to 1 (looks like first), got {value!r}")
    return float(value)


def blended_search(index: Backend, queries, k, instance_queries, embeddings=None, labels=None,
                   factor=BLEND_FACTOR, looks_like=LOOKS_LIKE, center=None) -> Blended:
    """Top-k of `index` (a `Backend` keeping instance codes) by both codes: the merged candidates of
    the class codes `queries` and the `instance_queries` scored as the module says; `embeddings`
    (nq, d): the queries' own, to score by cosine (the index must keep embeddings then), of the unit
    rows less `center` (d,) where given (the instance transform's mean: pooled features are all
    positive, so their raw cosines crowd near 1)."""
    k = _checks.top_k(k)
    factor = _checks.rescore_factor(factor)
    looks_like = check_looks_like(looks_like)
    queries = _checks.packed_codes(queries, index.bits, "queries")
    ibits = index.instance_bits
    if ibits is None:
        raise InputError("the index keeps no instance codes: search it in Hamming order, or re-score by embeddings")
    inst = _checks.packed_codes(instance_queries, ibits, "instance queries")
    if len(inst) != len(queries):
        raise InputError(f"there are {len(queries)} queries but {len(inst)} instance queries")
    units = None
    if embeddings is not None:
        if index.embedding_dim is None:
            raise InputError("the index keeps no embeddings, so it cannot score by cosine: search by the two codes "
                             "alone (leave the query embeddings out)")
        units = unit_rows(check_embeddings(embeddings, len(queries), index.embedding_dim, "query embeddings"))
        if center is not None:
            center = check_embeddings(np.reshape(center, (1, -1)), 1, index.embedding_dim, "center")[0]
    wanted = max(1, min(k * factor, index.ntotal))
    index.check_k(wanted, f"k * factor ({wanted} candidates)")
    _, by_class = index.search(queries, wanted, labels)
    _, by_look = index.instance_search(inst, wanted, labels)
    candidates = _merged(by_class, by_look)
    return _ranked(index, queries, inst, units, candidates, k, looks_like, center)


def _merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's ids of `a` and `b` (-1: padding), each once, ascending, padding last."""
    ids = np.sort(np.concatenate([a, b], axis=1), axis=1)
    ids[:, 1:][ids[:, 1:] == ids[:, :-1]] = PAD_ID  # a repeat (or padding after padding)
    ids = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    ids = np.sort(ids, axis=1)
    return np.where(ids == np.iinfo(np.int64).max, PAD_ID, ids)


def _distances(query_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hamming distances int32 (nq, c) of packed `query_rows` (nq, b) and candidate `rows` (nq, c, b)."""
    return np.bitwise_count(rows ^ query_rows[:, None, :]).sum(axis=2, dtype=np.int32)


def _centred_cosine(query_units: np.ndarray, rows: np.ndarray, center: np.ndarray) -> np.ndarray:
    """Cosine float64 (nq, c) of unit float16 `query_units` (nq, d) and `rows` (nq, c, d), each less `center`."""
    q = query_units.astype(np.float64) - center
    r = rows.astype(np.float64) - center
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    r /= np.maximum(np.linalg.norm(r, axis=2, keepdims=True), 1e-12)
    return np.einsum("qcd,qd->qc", r, q, optimize=False)


def _ranked(index: Backend, queries, inst, units, ids: np.ndarray, k: int, looks_like: float,
            center: np.ndarray | None = None) -> Blended:
    nq, c = ids.shape
    keep = min(k, c)
    out = Blended(np.full((nq, k), -np.inf), np.full((nq, k), PAD_DISTANCE, np.int32),
                  np.full((nq, k), PAD_DISTANCE, np.int32), np.full((nq, k), PAD_ID, np.int64), np.zeros((nq, k), bool))
    valid = ids >= 0
    if not valid.any():
        return out
    found = np.unique(ids[valid])
    codes, icodes = np.asarray(index.get_codes(found)), np.asarray(index.get_instance_codes(found))
    stored = None if units is None else np.asarray(index.get_embeddings(found), EMBEDDING_DTYPE)
    bits, ibits = index.bits, index.instance_bits
    width = icodes.shape[1] + (0 if stored is None else stored.shape[1] * 16)
    step = max(1, BUDGET // max(1, c * width))
    for s in range(0, nq, step):  # bounded memory: (step, c, ...) gathered rows
        e = min(nq, s + step)
        ok = valid[s:e]
        where = np.searchsorted(found, np.where(ok, ids[s:e], found[0]))
        d_class = _distances(queries[s:e], codes[where])
        d_inst = _distances(inst[s:e], icodes[where])
        if stored is None:
            similarity = np.cos(np.pi * d_inst / ibits)
            same = d_inst <= SAME_INSTANCE * ibits
        else:
            similarity = cosine_scores(units[s:e], stored[where]) if center is None else \
                _centred_cosine(units[s:e], stored[where], center)
            same = similarity >= SAME_COSINE
        sharp = np.sign(similarity) * np.abs(similarity) ** SIMILARITY_POWER
        scores = (1 - looks_like) * (1 - 2 * d_class / bits) + looks_like * sharp
        scores[~ok] = -np.inf  # padding goes last (a real score is finite)
        order = np.lexsort((ids[s:e], d_inst, d_class, -scores), axis=1)[:, :keep]
        rows_ok = np.take_along_axis(ok, order, 1)
        out.scores[s:e, :keep] = np.take_along_axis(scores, order, 1)
        out.distances[s:e, :keep] = np.where(rows_ok, np.take_along_axis(d_class, order, 1), PAD_DISTANCE)
        out.instance_distances[s:e, :keep] = np.where(rows_ok, np.take_along_axis(d_inst, order, 1), PAD_DISTANCE)
        out.ids[s:e, :keep] = np.where(rows_ok, np.take_along_axis(ids[s:e], order, 1), PAD_ID)
        out.same[s:e, :keep] = rows_ok & np.take_along_axis(same, order, 1)
    return out
