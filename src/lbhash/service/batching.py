"""One FAISS call for the single-query searches that arrive together.

A top-k scan of a flat index streams every code past each query; FAISS compares a block of
codes with every query of a batch while the block is in cache, so a batch of 4 queries costs
far less than 4 scans. `SearchBatcher` runs searches on one thread of its own: each request
queues its query and waits; the thread takes everything queued, runs each group of equal
plans as one search (a batch uses every core through FAISS's threads, a lone query one), and
hands each request its own hits. Nothing waits on purpose: a query that arrives while the
thread is idle is searched at once, alone. Results are exactly those of separate searches
(each query's hits do not depend on the others in its batch; the tests check it).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

import numpy as np

_STOP = object()


class SearchBatcher:
    """`search(queries, plan)` through `run(queries, plan) -> list of per-query results`,
    joined with the other requests queued at the same moment."""

    def __init__(self, run, max_queries: int = 64):
        self._run, self._max = run, max_queries
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def search(self, queries: np.ndarray, plan) -> list:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, name="lbhash-search-batcher", daemon=True)
                    self._thread.start()
        done: Future = Future()
        self._queue.put((queries, plan, done))
        return done.result()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=60)

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            waiting, count = [first], len(first[0])
            while count < self._max:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)  # after this batch
                    break
                waiting.append(more)
                count += len(more[0])
            for plan in dict.fromkeys(request[1] for request in waiting):
                self._search_together([r for r in waiting if r[1] == plan], plan)

    def _search_together(self, requests: list, plan) -> None:
        try:
            results = self._run(np.concatenate([r[0] for r in requests]), plan)
        except BaseException as err:  # each request raises what its search raised
            for request in requests:
                request[2].set_exception(err)
            return
        start = 0
        for queries, _, done in requests:
            done.set_result(results[start:start + len(queries)])
            start += len(queries)
