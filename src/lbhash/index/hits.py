"""The rules of a search request, in one place for `lbhash search` and the HTTP service.

`plan_search` checks a request's options before any work, `check_classes` its class-id lists;
`search_hits` runs a plan on any `Backend` for `Queries`. Every search, the CLI's and the
service's, is this function; messages name the options as the caller spells them (`Spelling`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lbhash.checks import positive_int
from lbhash.errors import InputError
from lbhash.index import _checks
from lbhash.index.backend import Backend
from lbhash.index.blend import Queries, blended_search, check_looks_like
from lbhash.index.rescore import RESCORE_FACTOR
from lbhash.index.sparse_labels import SparseLabels
from lbhash.limits import MAX_BATCH, MAX_CLASS_ID, MAX_K, check_class_ids, check_k

DEFAULT_K = 10
# (query, item) pairs one range search of a capped plan may find: its queries go to the index in
# groups of RANGE_PAIRS // ntotal (one at least), and the first query over the cap ends the search,
# so that a radius that takes in the whole index costs this much, not queries x items (64 codes at
# radius 32 on 200,000 codes took 5.1 GB and answered 517 MB before the cap)
RANGE_PAIRS = 1 << 22


@dataclass(frozen=True)
class Spelling:
    """How a caller names the search options in its error messages."""

    k: str = "k"
    radius: str = "radius"
    factor: str = "rescore_factor"
    rescore: str = "rescore"  # what asks for a ranked search (its false: the Hamming order)
    classes: str = "labels"
    looks_like: str = "looks_like"


@dataclass(frozen=True)
class SearchPlan:
    """A checked search: the top `k` (radius None) or every item within `radius` (k None);
    `factor`: rank k * factor candidates per result from each code by the one ranking
    (lbhash.index.blend: the queries' embeddings and instance codes), with `looks_like` (None: the
    ranking's default for the queries); None: Hamming order; `max_hits`: a radius search's most
    hits per query, more is refused (None: not capped)."""

    k: int | None
    radius: int | None
    factor: int | None = None
    spelling: Spelling = Spelling()
    max_hits: int | None = None
    looks_like: float | None = None


@dataclass(frozen=True)
class Hits:
    """One query's results, padding stripped: ids, Hamming distances and class ids of the hits,
    by (distance, id); ranked: by (descending score, distance, instance distance, id), with `scores`,
    `same` (the hit is the same picture as the query) and `instance_distances` (where the queries
    had instance codes)."""

    ids: list[int]
    distances: list[int]
    labels: list[list[int]]
    scores: list[float] | None = None
    instance_distances: list[int] | None = None
    same: list[bool] | None = None

    def rows(self):
        """(id, distance, class ids, score or None) of each hit."""
        scores = [None] * len(self.ids) if self.scores is None else self.scores
        return zip(self.ids, self.distances, self.labels, scores)


@dataclass(frozen=True)
class SearchOptions:
    """A search's options as its caller gives them, checked by `plan_search`: the top `k` or every item
    within `radius` (neither: the default k) and, for a ranked search, `factor` candidates per result from
    each code and `looks_like` (None: the defaults)."""

    k: int | None = None
    radius: int | None = None
    factor: int | None = None
    looks_like: float | None = None

    @property
    def asks_ranking(self) -> bool:
        """Whether they ask for a ranked search: a factor or looks_like given."""
        return self.factor is not None or self.looks_like is not None


def plan_search(options: SearchOptions = SearchOptions(), rank: bool = False, spelling: Spelling = Spelling(),
                max_k: int = MAX_K, max_candidates: int | None = None) -> SearchPlan:
    """The plan of a request's `options`. rank=True: the one ranking (lbhash.index.blend), `factor`
    candidates per result (default `RESCORE_FACTOR`, or less where `max_candidates` / k is less) and
    `looks_like`; both go with `rank` only (a factor without it is left to the caller). `max_k` caps
    k and a radius search's hits per query alike; `max_candidates`: a cap on k * factor."""
    k, radius, factor, looks_like = options.k, options.radius, options.factor, options.looks_like
    names = spelling
    if looks_like is not None:
        check_looks_like(looks_like, names.looks_like)
        if not rank:
            raise InputError(f"{names.looks_like} ranks by the instance codes and the embeddings: the index keeps "
                             "neither, the queries have none, or the search keeps the Hamming order (leave out "
                             f"{names.looks_like}, or build the index with its instance codes)")
    if k is not None and radius is not None:
        raise InputError(f"give either {names.k} or {names.radius}, not both "
                         f"(got {names.k} {k} and {names.radius} {radius})")
    if rank and radius is not None:
        raise InputError(f"a ranked search orders a top k: give {names.k}, not {names.radius}, with {names.rescore}")
    if radius is not None:
        return SearchPlan(None, _checks.radius_value(radius), None, spelling, max_hits=check_k(max_k, "max_k"))
    k = check_k(DEFAULT_K if k is None else k, names.k, max_k)
    if not rank:
        return SearchPlan(k, None, None, spelling)
    if factor is None:  # the default, within the caller's cap where k allows
        factor = RESCORE_FACTOR if max_candidates is None else max(1, min(RESCORE_FACTOR, max_candidates // k))
    else:
        factor = positive_int(factor, names.factor)
    if max_candidates is not None and k * factor > max_candidates:
        raise InputError(f"{names.k} * {names.factor} must be at most {max_candidates} (candidates ranked per "
                         f"query from each code), got {k} * {factor} = {k * factor}")
    return SearchPlan(k, None, factor, spelling, looks_like=None if looks_like is None else float(looks_like))


def check_classes(lists: list[list[int]], name: str = "labels", max_class_id: int = MAX_CLASS_ID) -> list[list[int]]:
    """Class-id lists as given in a request or on a command line: each id from 0 to
    `max_class_id` (a server may lower the table's limit)."""
    for row in lists:
        check_class_ids(row, name)
        if any(c > max_class_id for c in row):
            raise InputError(f"{name} must be class ids between 0 and {max_class_id}, got {max(row)}")
    return lists


def search_hits(index: Backend, queries: Queries, plan: SearchPlan, classes: list[list[int]] | None = None
                ) -> list[Hits]:
    """`plan` run on `index` for `queries`: one `Hits` per query. `classes`: per query, the class ids
    an item must share one of (`check_classes`). Queries go to the index in batches of `MAX_BATCH`,
    those of a capped radius search in groups that find at most `RANGE_PAIRS` pairs."""
    if classes is not None and len(classes) != len(queries):
        raise InputError(f"{plan.spelling.classes} has {len(classes)} entries but there are {len(queries)} queries")
    if plan.factor is None and (queries.embeddings is not None or queries.instance is not None):
        raise TypeError("query embeddings and instance codes go with a ranked plan")
    rows, step = [], MAX_BATCH
    if plan.radius is not None and plan.max_hits is not None:
        step = max(1, min(MAX_BATCH, RANGE_PAIRS // max(1, index.ntotal)))
    for start in range(0, len(queries), step):
        part = slice(start, start + step)
        labels = None if classes is None else SparseLabels.from_lists(classes[part], plan.spelling.classes)
        rows += _batch_rows(index, queries[part], plan, labels, start)
    # the labels of every hit, read in one lookup
    found = np.unique(np.concatenate([row[1] for row in rows])) if rows else np.empty(0, np.int64)
    label_lists = dict(zip(found.tolist(), index.labels_of(found))) if len(found) else {}
    return [_hits(row, label_lists) for row in rows]


def _hits(row: tuple, label_lists: dict) -> Hits:
    """A `_batch_rows` row as `Hits`."""
    dist, ids, *extra = row
    return Hits(ids.tolist(), dist.tolist(), [label_lists[x] for x in ids.tolist()],
                *(None if part is None else part.tolist() for part in extra))


def _batch_rows(index, queries: Queries, plan: SearchPlan, labels, start: int) -> list[tuple]:
    """Per query of `queries` (a batch): (distances, ids, scores, instance distances, same), padding stripped; None where the
    search has none (scores and same: a Hamming-order search; instance distances: no instance codes).
    `start`: the number of the batch's first query among the request's (for messages)."""
    if plan.radius is not None:
        lims, dist, ids = index.range_search(queries.codes, plan.radius, labels)
        counts = np.diff(lims)
        over = np.flatnonzero(counts > plan.max_hits) if plan.max_hits is not None else ()
        if len(over):
            names = plan.spelling
            raise InputError(f"{names.radius} {plan.radius} finds {counts[over[0]]} items for query {start + over[0]}, "
                             f"more than the {plan.max_hits} a search returns per query (as {names.k}): give a "
                             f"smaller {names.radius}, or {names.k} for the nearest")
        return [(dist[a:b], ids[a:b], None, None, None) for a, b in zip(lims[:-1], lims[1:])]
    if plan.factor is None:
        dist, ids = index.search(queries.codes, plan.k, labels)
        return [(d[f], i[f], None, None, None) for d, i, f in zip(dist, ids, ids >= 0)]
    got = blended_search(index, queries, plan.k, labels, plan.factor, plan.looks_like)
    kept = queries.instance is not None
    return [(d[f], i[f], s[f], di[f] if kept else None, same[f])
            for d, i, s, di, same, f in zip(got.distances, got.ids, got.scores, got.instance_distances, got.same,
                                            got.ids >= 0)]
