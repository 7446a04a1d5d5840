"""What the search service asks of the engines, so that its HTTP layer (lbhash.service) imports none:
its searches (`Search`), their threads, the checks of what it adds and the attached run's summary."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lbhash.errors import InputError
from lbhash.evaluate.formatting import RATIO_SCALE
from lbhash.index import Hits, Queries, SearchOptions, SearchPlan, check_classes, plan_search, search_on_this_thread
from lbhash.index.rescore import check_embeddings
from lbhash.serving.index_store import Store, lists_to_labels
from lbhash.serving.searcher import QueryEncoder


@dataclass(frozen=True)
class Search:
    """A checked search (`checked`): its `Queries`, plan and per-query class filters. Searches of one
    `scan_key` can share a scan: `joined`, whose hits `split` gives back to each."""

    queries: Queries
    plan: SearchPlan
    classes: list[list[int]] | None = None

    @classmethod
    def checked(cls, limits, queries: Queries, options: SearchOptions, labels: list[list[int]] | None = None,
                rank: bool = False) -> Search:
        """A request's search of `queries` with its `options` and per-query class-id lists (`labels`),
        ranked where `rank` (lbhash.index.blend: the queries carry what it needs), checked against the
        service's `limits` (max_k, max_rescore_candidates, max_class_id)."""
        plan = plan_search(options, rank, max_k=limits.max_k, max_candidates=limits.max_rescore_candidates)
        classes = None if labels is None else check_classes(labels, "labels", limits.max_class_id)
        return cls(queries, plan, classes)

    def run(self, store: Store) -> list[Hits]:
        """Its hits in `store` (a scan of its own): one `Hits` per query."""
        return store.search(self.queries, self.plan, self.classes)

    def scan_key(self, store: Store) -> tuple:
        """One plan, but for k on FAISS's exact flat index, whose top k is the prefix of any larger k's."""
        plan = self.plan
        prefix = store.backend == "faiss" and store.index.kind == "flat" and plan.radius is None and plan.factor is None
        k = None if prefix else plan.k
        return k, plan.radius, plan.factor, plan.spelling, plan.max_hits, self.classes is None, plan.looks_like

    @classmethod
    def joined(cls, searches: list[Search]) -> Search:
        """One search of the rows of `searches` (of one `scan_key`), to the largest k among them."""
        first = searches[0]
        plan = first.plan if first.plan.k is None else replace(first.plan, k=max(s.plan.k for s in searches))
        classes = None if first.classes is None else [c for s in searches for c in s.classes]
        real = None if first.queries.embeddings is None else np.concatenate([s.queries.embeddings for s in searches])
        inst = None if first.queries.instance is None else np.concatenate([s.queries.instance for s in searches])
        return cls(Queries(np.concatenate([s.queries.codes for s in searches]), real, inst, first.queries.center),
                   plan, classes)

    def split(self, hits: list[Hits], searches: list[Search]) -> list[list[Hits]]:
        """Each of the `searches` joined here its own rows of this search's `hits`, cut to its own k."""
        parts, start = [], 0
        for search in searches:
            rows, k = hits[start:start + len(search.queries)], search.plan.k
            start += len(search.queries)
            parts.append(rows if k in (None, self.plan.k) else
                         [Hits(*(None if part is None else part[:k] for part in
                                 (h.ids, h.distances, h.labels, h.scores, h.instance_distances, h.same)))
                          for h in rows])
        return parts


def start_batch_thread(threads: int) -> None:
    """On each of `threads` threads that keep a batch of searches in flight: with more than one, its
    scans run on it alone, since the batches in flight already keep the cores busy."""
    if threads > 1:
        search_on_this_thread()


def given_embeddings(rows: list, n: int, what: str, keeps: int | None) -> np.ndarray:
    """Embeddings a request gives beside n codes of `what`, float64 (n, d), as wide as the index's (`keeps`)."""
    if len(rows) != n:
        raise InputError(f"embeddings has {len(rows)} rows but there are {n} {what}")
    try:
        array = np.asarray(rows, dtype=np.float64)
    except ValueError:
        raise InputError("embeddings must be lists of numbers of one length") from None
    return check_embeddings(array, n, keeps, "embeddings")


def item_labels(lists: list[list[int]], n: int, max_class_id: int):
    """The labels of n added items, from a request's class-id lists (one per item)."""
    return lists_to_labels(check_classes(lists, "labels", max_class_id), n)


def run_summary(encoder: QueryEncoder | None) -> dict | None:
    """The attached run: its method, bits and data, and its quality from metrics.json (with the
    lower bound's `scale`, what its ratio means)."""
    info = None if encoder is None else encoder.encoder.run_info()
    if info is None:
        return None
    bound = info.get("lower_bound")
    return {**info, "lower_bound": {**bound, "scale": RATIO_SCALE} if isinstance(bound, dict) else None}
