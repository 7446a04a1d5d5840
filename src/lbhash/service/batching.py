"""Concurrent `/search` requests gathered into one scan of the index (docs/search.md, "Batching").

A request hands its job to `SearchBatcher.run` (`prepare()` decodes it, `answer(query, hits)`
makes the response). The batcher's threads take every job queued while their previous batch ran,
up to `max_rows` query rows, and run one `store.search` per group that can share a scan; each job
gets back its own rows and its own error (a failed shared scan is retried one job at a time).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from lbhash.index import Hits, Queries, SearchPlan, search_on_this_thread
from lbhash.limits import BATCH_ROWS as MAX_ROWS  # query rows per shared scan: its latency grows with them
from lbhash.service.offload import settle


@dataclass(frozen=True)
class Query:
    """A decoded search: its `Queries`, its plan and per-query class filters."""

    queries: Queries
    plan: SearchPlan
    classes: list[list[int]] | None = None


@dataclass
class _Job:
    prepare: Callable[[], Query]
    answer: Callable[[Query, list[Hits]], Any]
    rows: int
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future
    query: Query | None = None
    result: Any = None
    error: BaseException | None = None


class SearchBatcher:
    """`await batcher.run(prepare, answer)`: answer(query, its hits), query = prepare(), searched
    in a shared scan. `window`: seconds a batch waits for more jobs after its first (0: none);
    `max_rows`: query rows per batch (a job with more runs alone); `threads`: batches in flight
    at once. `scans` counts the store's searches."""

    def __init__(self, store, window: float = 0.0, max_rows: int = MAX_ROWS, threads: int = 1):
        self.store, self.window, self.max_rows, self.threads = store, window, max_rows, threads
        self.scans = 0
        self._pending: list[_Job] = []
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = False
        self._prefix = store.backend == "faiss" and store.index.kind == "flat"

    async def run(self, prepare: Callable[[], Query], answer: Callable[[Query, list[Hits]], Any], rows: int = 1):
        """`rows`: the query rows the request gives (it bounds a batch before decoding)."""
        loop = asyncio.get_running_loop()
        job = _Job(prepare, answer, max(1, rows), loop, loop.create_future())
        with self._cond:
            if self._closed:
                raise RuntimeError("the search batcher is closed")
            if not self._workers:
                self._start()
            self._pending.append(job)
            self._cond.notify()
        return await job.done

    @property
    def pending(self) -> int:
        """Jobs queued and not yet taken by a batch."""
        with self._cond:
            return len(self._pending)

    def close(self) -> None:
        """Stop the threads once the jobs queued before are answered."""
        with self._cond:
            self._closed = True
            workers, self._workers = self._workers, []
            self._cond.notify_all()
        for worker in workers:
            worker.join()

    def _start(self) -> None:
        for n in range(self.threads):
            worker = threading.Thread(target=self._work, name=f"lbhash-batch-{n}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def _work(self) -> None:
        if self.threads > 1:  # a batch in flight per thread already keeps the cores busy
            search_on_this_thread()
        while (jobs := self._take()) is not None:
            for job in jobs:
                _call(job, _prepare)
            self._search(jobs)
            for job in jobs:
                if job.error is None:
                    _call(job, _answer)
            _settle(jobs)

    def _take(self) -> list[_Job] | None:
        """The next batch: the first job, and those after it up to `max_rows` rows."""
        with self._cond:
            while not self._pending:
                if self._closed:
                    return None
                self._cond.wait()
            if self.window > 0:
                deadline = time.monotonic() + self.window
                while sum(job.rows for job in self._pending) < self.max_rows and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            taken, rows = 0, 0
            for job in self._pending:
                rows += job.rows
                if taken and rows > self.max_rows:
                    break
                taken += 1
            jobs, self._pending = self._pending[:taken], self._pending[taken:]
            return jobs

    def _search(self, jobs: list[_Job]) -> None:
        groups: dict[tuple, list[_Job]] = {}
        for job in jobs:
            if job.error is None:
                groups.setdefault(self._key(job.query), []).append(job)
        for group in groups.values():
            if len(group) > 1:
                try:
                    self._shared(group)
                    continue
                except Exception:  # noqa: BLE001 - searched again one by one: each job gets its own error
                    pass
            for job in group:
                _call(job, self._alone)

    def _count(self) -> None:
        with self._cond:
            self.scans += 1

    def _key(self, query: Query) -> tuple:
        plan = query.plan
        k = None if self._prefix and plan.radius is None and plan.factor is None else plan.k
        return k, plan.radius, plan.factor, plan.spelling, plan.max_hits, query.classes is None

    def _alone(self, job: _Job) -> None:
        q = job.query
        self._count()
        job.result = self.store.search(q.queries, q.plan, q.classes)

    def _shared(self, group: list[_Job]) -> None:
        queries = [job.query for job in group]
        plan = queries[0].plan
        if plan.k is not None:
            plan = replace(plan, k=max(q.plan.k for q in queries))
        classes = None if queries[0].classes is None else [c for q in queries for c in q.classes]
        real = None if queries[0].queries.embeddings is None else np.concatenate([q.queries.embeddings for q in queries])
        together = Queries(np.concatenate([q.queries.codes for q in queries]), real)
        self._count()
        hits = self.store.search(together, plan, classes)
        start = 0
        for job, q in zip(group, queries):
            rows = hits[start:start + len(q.queries)]
            start += len(q.queries)
            job.result = rows if q.plan.k in (None, plan.k) else [_first(h, q.plan.k) for h in rows]


def _prepare(job: _Job) -> None:
    job.query = job.prepare()


def _answer(job: _Job) -> None:
    job.result = job.answer(job.query, job.result)


def _call(job: _Job, step: Callable[[_Job], None]) -> None:
    """step(job), its exception kept as the job's error (skipped once the job has one)."""
    if job.error is not None:
        return
    try:
        step(job)
    except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request, which re-raises it
        job.error = exc


def _first(hits: Hits, k: int) -> Hits:
    return Hits(hits.ids[:k], hits.distances[:k], hits.labels[:k], None if hits.scores is None else hits.scores[:k])


def _settle(jobs: list[_Job]) -> None:
    """Answer every job of a batch: one call into each event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
    for job in jobs:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, group in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, group)
        except RuntimeError:  # the loop closed while the batch ran: nobody awaits it any more
            pass


def _deliver(jobs: list[_Job]) -> None:
    for job in jobs:
        settle(job.done, job.result, job.error)
