"""The service's search batcher: requests queued together become one search, and each gets
exactly the hits a search of its own query gives."""

import threading

import numpy as np
import pytest

from index_reference import random_codes
from lbhash.index import CodeIndex, plan_search, search_hits
from lbhash.service.batching import SearchBatcher


def test_requests_queued_while_a_search_runs_are_searched_together_with_their_own_results(rng):
    index = CodeIndex(8)  # 9 distances for 600 items: every row is decided by the tie order
    index.add(random_codes(rng, 600, 8), labels=rng.integers(0, 4, 600))
    queries = random_codes(rng, 12, 8)
    plans = [plan_search(k, None) for k in (5, 5, 5, 9)]
    calls, release = [], threading.Event()

    def run(q, plan):
        calls.append(len(q))
        if len(calls) == 1:
            release.wait(10)  # hold the first search: the other requests queue meanwhile
        return search_hits(index, q, plan)

    batcher = SearchBatcher(run)
    got = [None] * len(queries)

    def one(i):
        got[i] = batcher.search(queries[i:i + 1], plans[i % len(plans)])

    first = threading.Thread(target=one, args=(0,))
    first.start()
    while not calls:
        threading.Event().wait(0.01)
    others = [threading.Thread(target=one, args=(i,)) for i in range(1, len(queries))]
    for t in others:
        t.start()
    while batcher._queue.qsize() < len(others):
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *others]:
        t.join(10)
    batcher.close()
    # the first alone, then the 11 queued ones in one search per distinct plan (k 5 and k 9)
    assert calls[0] == 1 and sorted(calls[1:]) == [3, 8]  # queries 3, 7, 11 ask for k 9
    for i, hits in enumerate(got):
        alone = search_hits(index, queries[i:i + 1], plans[i % len(plans)])
        assert len(hits) == 1 and hits[0] == alone[0]


def test_a_failed_search_fails_every_request_of_its_batch():
    def run(q, plan):
        raise RuntimeError("boom")

    batcher = SearchBatcher(run)
    with pytest.raises(RuntimeError, match="boom"):
        batcher.search(np.zeros((1, 1), np.uint8), plan_search(3, None))
    batcher.close()
