"""The one ranking of a search that reads more than the class codes (docs/search.md, "Ranking").

A top k is ranked from candidates: the class code's top `k * factor`, and where the index keeps an
instance code beside each class code (lbhash.instance) and the queries give theirs, the instance
code's top `k * factor`, merged. Without instance codes the class candidates are widened to every
item tied with the last (`with_boundary_ties`), so that a class collapsed onto one code is not cut
by id. Each candidate is scored

    score = (1 - looks_like) * (1 - 2 * d_class / bits) + looks_like * s^3

where s, the similarity, is the cosine of the query's and the item's embeddings where the queries
give theirs and the index keeps them (read for these candidates only; less `center`, the instance
transform's mean, where given), else cos(pi * d_instance / instance_bits), the angle that the instance
codes' Hamming distance estimates. `looks_like` reads from 0 (same class first: the class distance
decides, the look breaks its ties) to 1 (looks like first: the similarity decides, the class distance
breaks its ties). Order: descending score, then class distance, instance distance, id; a candidate the
same picture by its perceptual hashes (below) before all others. A hit whose
similarity passes the same-picture threshold that the index calibrated on its own photos
(lbhash.instance.mark_rule: a centred cosine, its margin over the query's other candidates, a share of
the instance bits, or the margin or the share; or, where the instance code ends in perceptual hashes, their
distance) is marked `same`: an edited copy or a duplicate of the query. An index without a calibrated mark
marks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lbhash.errors import InputError
from lbhash.index import _checks
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend, Candidates, FloatQueries
from lbhash.index.rescore import (PAIRS, RESCORE_FACTOR, check_embeddings, scoring_rows, unit_rows,
                                  with_boundary_ties)
from lbhash.instance import (AGREEING, CLASS_NEAR, LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES,
                              LOOKS_LIKE_CODES_LEARNED, LOOKS_LIKE_LEARNED, MARGIN_MARKS, MARK_BY, MARK_CANDIDATES,
                              MARK_NEIGHBOUR, NO_MARK, HASH_BITS, Mark, learned_index, mark_rule,
                              perceptual_distances)
from lbhash.limits import MAX_RESCORE_CANDIDATES

BUDGET = 1 << 22        # gathered candidate values scored at a time
# the similarity enters the score raised to this power (its sign kept): a copy's similarity near 1 keeps
# its weight while the moderate similarities of other items of the class shrink, so that the class
# distance orders them (chosen on validation items with LOOKS_LIKE 0.8, before the item views)
SIMILARITY_POWER = 3
# the default where the queries give no instance codes: the similarity decides (the cosine re-scoring
# that the tables of docs/search.md, "Re-scoring", measure); LOOKS_LIKE was chosen with instance codes
SIMILARITY_FIRST = 1.0


@dataclass(frozen=True)
class Queries:
    """A search's queries: packed `codes` uint8 (nq, bits // 8) and, for a ranked search, their
    `embeddings` (nq, d; where the index keeps them), from the forward pass that made the codes (or
    given beside them), their packed `instance` codes (lbhash.instance; where the index keeps them)
    and `center` (d,), the instance transform's mean, which the ranking's cosine centres on."""

    codes: np.ndarray
    embeddings: np.ndarray | None = None
    instance: np.ndarray | None = None
    center: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: slice) -> "Queries":
        """The queries of `rows` (the centre is shared)."""
        return Queries(self.codes[rows], *(None if a is None else a[rows] for a in (self.embeddings, self.instance)),
                       self.center)


class Blended(NamedTuple):
    """A ranked top k, each (nq, k), by (descending score, class distance, instance distance, id):
    scores float64, class `distances` int32, `instance_distances` int32 (PAD_DISTANCE throughout
    where the queries gave no instance codes), `ids` int64, `same` bool (the same picture); padded
    with -inf, PAD_DISTANCE, PAD_DISTANCE, PAD_ID, False."""

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


def default_looks_like(instance: bool, floats: bool = True, learned: bool = False) -> float:
    """`looks_like` where a search leaves it out: where the queries give instance codes, with `floats` (the
    cosine of float rows scores) `LOOKS_LIKE_LEARNED` for an index whose transform is `learned` (its float
    rows are in the learned space) and `LOOKS_LIKE` for another, and without floats `LOOKS_LIKE_CODES_LEARNED`
    for a learned transform, `LOOKS_LIKE_CODES` for another; else `SIMILARITY_FIRST` (each chosen on validation
    photos: docs/search.md). Without floats and with an unlearned transform, the search raises
    LOOKS_LIKE_CODES query by query (`agreeing_looks_like`)."""
    if not instance:
        return SIMILARITY_FIRST
    if not floats:
        return LOOKS_LIKE_CODES_LEARNED if learned else LOOKS_LIKE_CODES
    return LOOKS_LIKE_LEARNED if learned else LOOKS_LIKE


def blended_search(index: Backend, queries: Queries, k, labels=None, factor=RESCORE_FACTOR,
                   looks_like=None) -> Blended:
    """Top-k of `index` (any `Backend`) ranked as the module says, for `queries` (`Queries`): their
    class `codes` and their `instance` codes (the index must keep instance codes) and/or their
    `embeddings` (nq, d; the index must keep embeddings), one of the two at least; their `center` (d,):
    the cosine's centre (the instance transform's mean: pooled features are all positive, so their raw
    cosines crowd near 1); `looks_like` None: `default_looks_like`. The queries go in groups that hold
    at most `PAIRS` (query, candidate) pairs (one query at least): a query's answer does not depend on
    the others."""
    if not isinstance(queries, Queries):
        raise TypeError(f"blended_search takes its queries as lbhash.index.Queries, got {type(queries).__name__}")
    k = _checks.top_k(k)
    factor = _checks.rescore_factor(factor)
    codes = _checks.packed_codes(queries.codes, index.bits, "queries")
    inst = _instance_queries(index, queries.instance, len(codes))
    units = _query_units(index, queries.embeddings, len(codes), inst is not None)
    learned = learned_index(getattr(index, "metadata", None))
    # left out, with the two codes alone of an unlearned transform: each query's own, from its candidates
    # (`agreeing_looks_like`)
    by_query = looks_like is None and inst is not None and units is None and not learned
    looks_like = default_looks_like(inst is not None, units is not None, learned) if looks_like is None \
        else check_looks_like(looks_like)
    center = queries.center
    if center is not None:
        if units is None:
            raise InputError("a centre goes with the query embeddings")
        center = check_embeddings(np.reshape(center, (1, -1)), 1, index.embedding_dim, "center")[0]
    # the index's calibrated mark: by the cosine of the rows its transform keeps, or its margin over the query's
    # other candidates (where this search scores by it; the margin where no label restricts the candidates), or
    # the instance distance; none without instance codes (a raw cosine has no calibrated threshold)
    mark = mark_rule(getattr(index, "metadata", None), units is not None, filtered=labels is not None) \
        if inst is not None else NO_MARK
    # (a query's own looks_like reads its AGREEING nearest items by instance code, a margin mark its
    # MARK_CANDIDATES nearest, as calibrated: they are candidates)
    least = max(AGREEING if by_query else 1, MARK_CANDIDATES if mark.by in MARGIN_MARKS else 1)
    wanted = max(1, min(max(k * factor, least), index.ntotal))
    index.check_k(wanted, f"k * factor ({wanted} candidates)")
    rows = None if labels is None else _checks.label_rows(labels, len(codes), "query labels")
    widen = inst is None and wanted < index.ntotal  # (instance candidates find what a tied class hides)
    step = max(1, PAIRS // max(wanted * (1 if inst is None else 2), MAX_RESCORE_CANDIDATES if widen else 1))
    parts, floats = [], _float_queries(units, center)
    for start in range(0, max(1, len(codes)), step):  # (an empty batch is one empty group)
        part = slice(start, start + step)
        group = None if rows is None else rows.take(np.arange(len(codes))[part])
        part_floats = None if floats is None else floats[part]
        if inst is None:
            dist, candidates = index.search(codes[part], wanted, group)
            if widen:
                dist, candidates = with_boundary_ties(index, codes[part], dist, candidates, group)
            found = Candidates(candidates, dist, np.full(dist.shape, PAD_DISTANCE, np.int32))
        else:
            found = index.both_candidates(codes[part], inst[part], wanted, group, part_floats)
        weights = agreeing_looks_like(found, index.bits) if by_query else np.full(len(found.ids), looks_like)
        near = perceptually_near(index, None if inst is None else inst[part], found.ids, mark)
        parts.append(_ranked(index, part_floats, mark, found, k, weights, near))
    return parts[0] if len(parts) == 1 else Blended(*(np.concatenate([p[i] for p in parts]) for i in range(5)))


def warm_ranking() -> None:
    """Load the ranking's compiled kernels (lbhash.index._blend_kernel: numba, about 0.6 s from its cache,
    seconds after an install) now, as a served index does at start-up, not in the first ranked search."""
    from lbhash.index._blend_kernel import ranked_top

    ids, distances = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int32)
    floats = FloatQueries(np.ones((1, 1)), np.zeros(1))
    similarity = floats.cosines(np.ones((1, 1), np.float16), ids)
    out = Blended(np.zeros((1, 1)), distances.copy(), distances.copy(), ids.copy(), np.zeros((1, 1), bool))
    rule = (8, SIMILARITY_POWER, 0.5, MARK_BY.index("margin_or_instance"), 8, MARK_NEIGHBOUR, 0.5)
    ranked_top((ids, distances, distances, similarity, np.zeros((1, 1), bool)), np.full(1, 0.5), rule, tuple(out))


def perceptually_near(index: Backend, instance: np.ndarray | None, ids: np.ndarray, mark: Mark) -> np.ndarray:
    """Which candidates `ids` (nq, c; -1 padding) are the same picture by their perceptual hashes (the instance
    codes' last bits within the mark's `perceptual_threshold` of the queries' `instance` codes): all False
    where the mark has no perceptual part. (`lbhash duplicates` asks it of each item's candidates too.)"""
    near = np.zeros(ids.shape, bool)
    ok = ids >= 0
    if not mark.perceptual_bits or instance is None or not ok.any():
        return near
    held, where = np.unique(ids[ok], return_inverse=True)
    theirs = index.get_instance_codes(held)[where]
    mine = np.repeat(instance, ok.sum(axis=1), axis=0)  # (row-major, as ids[ok])
    near[ok] = perceptual_distances(mine, theirs, mark.perceptual_bits, paired=True) <= \
        mark.perceptual_threshold * HASH_BITS
    return near


def _instance_queries(index: Backend, instance_queries, n: int) -> np.ndarray | None:
    if instance_queries is None:
        return None
    if index.instance_bits is None:
        raise InputError("the index keeps no instance codes: rank by the query embeddings alone, or build the "
                         "index with its instance codes (`lbhash index build --instance-bits`)")
    inst = _checks.packed_codes(instance_queries, index.instance_bits, "instance queries")
    if len(inst) != n:
        raise InputError(f"there are {n} queries but {len(inst)} instance queries")
    return inst


def _query_units(index: Backend, embeddings, n: int, instance: bool) -> np.ndarray | None:
    if embeddings is None:
        if not instance:
            raise InputError("a ranked search needs the queries' embeddings or instance codes: search in Hamming "
                             "order (--no-rescore, rescore false) with codes alone")
        return None
    if index.embedding_dim is None:
        raise InputError("the index keeps no embeddings, so it cannot score by cosine: search in Hamming order "
                         "(--no-rescore, rescore false), rank by the instance codes alone (leave the query "
                         "embeddings out), or build the index with its embeddings")
    return unit_rows(check_embeddings(embeddings, n, index.embedding_dim, "query embeddings"))


def _float_queries(units: np.ndarray | None, center: np.ndarray | None) -> FloatQueries | None:
    """The unit float16 query rows as float rows score them: less `center` and made unit again, where given
    (each row's cosine is then (r - c) . q' / |r - c|, docs/search.md, "Ranking")."""
    if units is None:
        return None
    if center is None:
        return FloatQueries(units.astype(np.float64), None)
    q = units.astype(np.float64) - center
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return FloatQueries(q, center)


def _similarities_by_id(index: Backend, floats: FloatQueries, ids: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """`FloatQueries.cosines` of the candidates `ids` (nq, c; `ok` where not padding), their rows read by id
    (int8 rows as the unit float16 rows of their directions)."""
    held = np.unique(ids[ok])
    where = np.where(ok, np.searchsorted(held, np.where(ok, ids, held[0])), -1)
    return floats.cosines(scoring_rows(index.get_embeddings(held)), where)


def agreeing_looks_like(found: Candidates, bits: int) -> np.ndarray:
    """Each query's looks_like (nq,) where the two codes alone rank and the search leaves it out: from
    LOOKS_LIKE_CODES, where all its AGREEING candidates nearest by instance code (ties by id) have a class code
    within CLASS_NEAR * bits of its own, to LOOKS_LIKE_APART, where none has; linear in their share between.
    A query of a class the run was trained on finds its look-alikes under its class code; one of a class it
    never saw, under several (validation: docs/search.md, "Unseen classes")."""
    ids, d_inst = found.ids, found.instance_distances
    by_id = np.argsort(np.where(ids >= 0, ids, np.iinfo(np.int64).max), axis=1, kind="stable")
    key = np.where(ids >= 0, d_inst, np.iinfo(np.int32).max).astype(np.int64)
    nearest = np.take_along_axis(by_id, np.argsort(np.take_along_axis(key, by_id, 1), axis=1, kind="stable"), 1)
    nearest = nearest[:, :AGREEING]
    held = np.take_along_axis(ids, nearest, 1) >= 0
    near = (np.take_along_axis(found.distances, nearest, 1) <= CLASS_NEAR * bits) & held
    share = near.sum(1) / np.maximum(held.sum(1), 1)
    share[held.sum(1) == 0] = 1.0
    return LOOKS_LIKE_CODES + (LOOKS_LIKE_APART - LOOKS_LIKE_CODES) * (1.0 - share)


def _ranked(index: Backend, floats: FloatQueries | None, mark: Mark, found: Candidates, k: int,
            looks_like: np.ndarray, near: np.ndarray) -> Blended:
    """The best k of the `found` candidates, scored as the module says: by the cosines of their float rows
    for `floats` (found.similarities where the backend scored them), else by their `instance` distances;
    ranked in compiled code (lbhash.index._blend_kernel.ranked_top: at 1M items a one-query search spent
    more in numpy's calls around its scores than in its two searches' kernels). The candidates `near` (the
    same picture by their perceptual hashes) come first and are marked."""
    from lbhash.index._blend_kernel import ranked_top  # (numba loads with the first ranking)

    ids = found.ids
    nq, c = ids.shape
    out = Blended(np.full((nq, k), -np.inf), np.full((nq, k), PAD_DISTANCE, np.int32),
                  np.full((nq, k), PAD_DISTANCE, np.int32), np.full((nq, k), PAD_ID, np.int64), np.zeros((nq, k), bool))
    valid = ids >= 0
    dim = 0 if floats is None else floats.vectors.shape[1]
    # bounded memory: rows read by id are gathered for `step` queries' candidates at a time
    step = max(1, nq if floats is None or found.similarities is not None else BUDGET // max(1, c * dim))
    for s in range(0, nq, step):
        e = min(nq, s + step)
        d_class, d_inst = found.distances[s:e], found.instance_distances[s:e]
        if floats is None:
            similarity = np.cos(np.pi * d_inst / (index.instance_bits or 1))
        elif found.similarities is not None:
            similarity = found.similarities[s:e]
        elif valid[s:e].any():
            similarity = _similarities_by_id(index, floats[s:e], ids[s:e], valid[s:e])
        else:
            continue
        # (the index's calibrated mark, `mark_rule`, as this search applies it)
        rule = (index.bits, SIMILARITY_POWER, mark.threshold, MARK_BY.index(mark.by) if mark.by else 0,
                index.instance_bits or 0, MARK_NEIGHBOUR, mark.instance_threshold)
        ranked_top((ids[s:e], d_class, d_inst, similarity, near[s:e]),
                   np.ascontiguousarray(looks_like[s:e], np.float64), rule, tuple(part[s:e] for part in out))
    return out
