"""Concurrent `/search` requests gathered into one scan of the index (docs/reference/service.md, "Batching").

A request hands its job to `SearchBatcher.run` (`prepare()` decodes it, `answer(search, hits)`
makes the response). The batcher's threads take every job queued while their previous batch ran,
up to `Batching.max_rows` query rows, and run one scan per group that can share it (lbhash.serving.requests);
each job gets back its own rows and its own error (a failed shared scan is retried one job at a time).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from lbhash.limits import BATCH_ROWS as MAX_ROWS  # query rows per shared scan: its latency grows with them
from lbhash.serving.requests import Search, start_batch_thread
from lbhash.service.offload import settle


@dataclass(frozen=True)
class Batching:
    """How `/search` requests share scans (lbhash serve --batch-window-ms, --batch-rows). `window`:
    seconds a batch waits for more jobs after its first (0: none); `max_rows`: query rows per batch
    (a job with more runs alone)."""

    window: float = 0.0
    max_rows: int = MAX_ROWS


@dataclass
class _Job:
    prepare: Callable[[], Search]
    answer: Callable[[Search, list], Any]
    rows: int
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future
    search: Search | None = None
    result: Any = None
    error: BaseException | None = None

    def decode(self) -> None:
        self.search = self.prepare()

    def respond(self) -> None:
        self.result = self.answer(self.search, self.result)


class SearchBatcher:
    """`await batcher.run(prepare, answer)`: answer(search, its hits), search = prepare(), run
    in a shared scan. `batching`: the window and rows of a batch (`Batching`); `threads`: batches
    in flight at once. `scans` counts the store's searches."""

    def __init__(self, store, batching: Batching = Batching(), threads: int = 1):
        self.store, self.batching, self.threads = store, batching, threads
        self.scans = 0
        self._pending: list[_Job] = []
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = False

    async def run(self, prepare: Callable[[], Search], answer: Callable[[Search, list], Any], rows: int = 1):
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
        start_batch_thread(self.threads)
        while (jobs := self._take()) is not None:
            for job in jobs:
                _call(job, _Job.decode)
            self._search(jobs)
            for job in jobs:
                _call(job, _Job.respond)  # (skips a job with an error)
            _settle(jobs)

    def _take(self) -> list[_Job] | None:
        """The next batch: the first job, and those after it up to `max_rows` rows."""
        window, max_rows = self.batching.window, self.batching.max_rows
        with self._cond:
            while not self._pending:
                if self._closed:
                    return None
                self._cond.wait()
            if window > 0:
                deadline = time.monotonic() + window
                while sum(job.rows for job in self._pending) < max_rows and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            taken, rows = 0, 0
            for job in self._pending:
                rows += job.rows
                if taken and rows > max_rows:
                    break
                taken += 1
            jobs, self._pending = self._pending[:taken], self._pending[taken:]
            return jobs

    def _search(self, jobs: list[_Job]) -> None:
        groups: dict[tuple, list[_Job]] = {}
        for job in jobs:
            if job.error is None:
                groups.setdefault(job.search.scan_key(self.store), []).append(job)
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

    def _alone(self, job: _Job) -> None:
        self._count()
        job.result = job.search.run(self.store)

    def _shared(self, group: list[_Job]) -> None:
        searches = [job.search for job in group]
        joined = Search.joined(searches)
        self._count()
        for job, hits in zip(group, joined.split(joined.run(self.store), searches)):
            job.result = hits


def _call(job: _Job, step: Callable[[_Job], None]) -> None:
    """step(job), its exception kept as the job's error (skipped once the job has one)."""
    if job.error is not None:
        return
    try:
        step(job)
    except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request, which re-raises it
        job.error = exc


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
