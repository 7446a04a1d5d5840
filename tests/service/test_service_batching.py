"""Concurrent searches gathered into shared scans (lbhash.service.batching): every request gets
exactly its one-at-a-time answer (tie order, filters, radius, re-ranking, errors), in fewer scans."""

import asyncio
import threading
import time

import httpx
import numpy as np
import pytest

from index_reference import random_codes, top_k
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, SearchOptions, plan_search, search_hits
from lbhash.service import Limits, create_app
from lbhash.serving.requests import Search
from lbhash.service.batching import Batching, SearchBatcher

DIM = 5  # the embeddings' width
BITS = 16  # few distinct distances over 300 items: many ties, whose order must survive batching
WAIT_S = 30  # every wait in this file is bounded


class GatedStore:
    """A flat index's store whose first search waits for `gate`: the jobs sent meanwhile queue
    for the next batch. Records the query rows of every search."""

    backend = "faiss"

    def __init__(self, index):
        self.index, self.gate, self.calls = index, threading.Event(), []

    def search(self, queries, plan, classes=None):
        if not self.calls:
            self.calls.append(None)
            self.gate.wait(WAIT_S)
            self.calls[0] = len(queries)
        else:
            self.calls.append(len(queries))
        return search_hits(self.index, queries, plan, classes)


def make_query(codes, plan, classes=None, real=None) -> Search:
    return Search(Queries(codes, real), plan, classes)


@pytest.fixture
def index(rng):
    codes = random_codes(rng, 300, BITS)
    index = CodeIndex(BITS)
    index.add(codes, labels=rng.integers(0, 4, 300), embeddings=rng.standard_normal((300, DIM)))
    return index, codes


def rows(hits):
    return [list(zip(h.ids, h.distances, h.labels)) for h in hits]


async def gathered(batcher, store, queries):
    """Run every Search through the batcher: the first alone, holding the gate until all the
    others are queued. Returns per query its hits or the exception raised."""
    async def one(q):
        try:
            return await batcher.run(lambda: q if isinstance(q, Search) else q(), lambda query, hits: hits,
                                     len(q.queries) if isinstance(q, Search) else 1)
        except Exception as exc:  # noqa: BLE001 - compared with the one-at-a-time error
            return exc

    async def until(done):
        for _ in range(WAIT_S * 100):
            if done():
                return
            await asyncio.sleep(0.01)

    first = asyncio.ensure_future(one(queries[0]))
    await until(lambda: store.calls)  # the first search is waiting at the gate
    rest = [asyncio.ensure_future(one(q)) for q in queries[1:]]
    await until(lambda: batcher.pending == len(rest))
    store.gate.set()
    return await asyncio.wait_for(asyncio.gather(first, *rest), WAIT_S)


def test_jobs_queued_during_a_scan_share_the_next_one(index, rng):
    index, codes = index
    store = GatedStore(index)
    batcher = SearchBatcher(store)
    queries = random_codes(rng, 24, BITS)
    ks = [1, 3, 10, 300, 7, 2] * 4  # different k share an exact index's scan: each is cut to its own
    jobs = [make_query(queries[i:i + 1], plan_search(SearchOptions(ks[i]))) for i in range(24)]
    try:
        results = asyncio.run(gathered(batcher, store, jobs))
    finally:
        batcher.close()
    assert store.calls == [1, 23] and batcher.scans == 2
    for i, hits in enumerate(results):
        ref_d, ref_i = top_k(queries[i:i + 1], codes, np.arange(300), ks[i])
        assert [h.ids for h in hits] == [ref_i[0][ref_i[0] >= 0].tolist()]
        assert [h.distances for h in hits] == [ref_d[0][ref_i[0] >= 0].tolist()]
        assert rows(hits) == rows(search_hits(index, Queries(queries[i:i + 1]), plan_search(SearchOptions(ks[i]))))


def test_a_batch_holds_at_most_max_rows(index, rng):
    index, _ = index
    store = GatedStore(index)
    batcher = SearchBatcher(store, Batching(max_rows=4))
    queries = random_codes(rng, 16, BITS)
    sizes = [1, 2, 1, 3, 1, 1, 2, 5]  # the job of 5 rows is over the bound: it goes alone
    jobs, start = [], 0
    for n in sizes:
        jobs.append(make_query(queries[start:start + n], plan_search(SearchOptions(5))))
        start += n
    try:
        results = asyncio.run(gathered(batcher, store, jobs))
    finally:
        batcher.close()
    assert store.calls == [1, 3, 4, 3, 5]  # taken in order, each batch up to 4 rows
    for job, hits in zip(jobs, results):
        assert rows(hits) == rows(search_hits(index, job.queries, job.plan))


def test_the_window_waits_for_more_and_max_rows_ends_it(index, rng):
    index, _ = index
    queries = random_codes(rng, 3, BITS)
    store = GatedStore(index)
    store.gate.set()
    # a window of a minute that three one-row jobs fill at once: answered without waiting it out
    batcher = SearchBatcher(store, Batching(window=60, max_rows=3))

    async def three():
        return await asyncio.wait_for(asyncio.gather(*[
            batcher.run(lambda i=i: make_query(queries[i:i + 1], plan_search(SearchOptions(4))), lambda query, hits: hits) for i in range(3)]),
            WAIT_S)

    try:
        results = asyncio.run(three())
    finally:
        batcher.close()
    assert store.calls == [3]
    for i, hits in enumerate(results):
        assert rows(hits) == rows(search_hits(index, Queries(queries[i:i + 1]), plan_search(SearchOptions(4))))


def test_groups_filters_radius_and_reranking_and_keeps_errors_apart(index, rng):
    index, codes = index
    store = GatedStore(index)
    batcher = SearchBatcher(store)
    q = random_codes(rng, 8, BITS)
    real = rng.standard_normal((8, DIM))

    def bad_decode():
        raise InputError("codes[0] is not a hex string")

    jobs = [make_query(q[0:1], plan_search(SearchOptions(5))),
            make_query(q[1:3], plan_search(SearchOptions(5)), classes=[[1], [0, 2]]),
            make_query(q[3:4], plan_search(SearchOptions(radius=3))),
            make_query(q[4:5], plan_search(SearchOptions(radius=3)), classes=[[3]]),
            make_query(q[5:6], plan_search(SearchOptions(4, factor=3), rank=True), real=real[5:6]),
            make_query(q[6:7], plan_search(SearchOptions(4, factor=3), rank=True), real=real[6:7]),
            make_query(q[7:8], plan_search(SearchOptions(5)), classes=[[2], [1]]),  # two filters for one query: its own error
            bad_decode,  # fails while decoding: the others go on
            make_query(q[7:8], plan_search(SearchOptions(2)), classes=[[2]])]
    try:
        results = asyncio.run(gathered(batcher, store, jobs))
    finally:
        batcher.close()
    for job, got in zip(jobs, results):
        if job is bad_decode:
            assert isinstance(got, InputError) and "hex" in str(got)
            continue
        try:
            expected = search_hits(index, job.queries, job.plan, job.classes)
        except InputError as err:
            assert isinstance(got, InputError) and str(got) == str(err)
            continue
        assert not isinstance(got, Exception), got
        assert rows(got) == rows(expected)
        assert [h.scores for h in got] == [h.scores for h in expected]
    # the first alone; then the filtered top-k (4 rows) failed on the job with two filters and
    # was searched job by job (2, 1, 1), then radius, filtered radius, and both re-ranked together
    assert store.calls == [1, 4, 2, 1, 1, 1, 1, 2]


# --- through the app -------------------------------------------------------------------------


def requests_of(rng, codes, n=64):
    """Search bodies of every kind, and a few bad ones."""
    bodies = []
    for i in range(n):
        q = codes[rng.integers(300)] ^ rng.integers(0, 256, BITS // 8, np.uint8)
        hexes = [q.tobytes().hex()]
        kind = i % 8
        if kind == 0:
            bodies.append({"codes": hexes, "k": int(rng.integers(1, 40))})
        elif kind == 1:
            bodies.append({"codes": hexes, "radius": int(rng.integers(0, 4))})
        elif kind == 2:
            bodies.append({"codes": hexes, "k": 6, "labels": [[int(rng.integers(4))]]})
        elif kind == 3:
            bodies.append({"codes": hexes, "k": 5, "embeddings": rng.standard_normal((1, DIM)).tolist(),
                           "rescore_factor": 3})
        elif kind == 4:
            bodies.append({"codes": hexes + [codes[i].tobytes().hex()]})  # two queries, default k
        elif kind == 5:
            bodies.append({"codes": [hexes[0][:-2]], "k": 3})  # a code one byte short: 400
        elif kind == 6:
            bodies.append({"codes": hexes, "k": 50, "embeddings": [[1.0] * DIM], "rescore_factor": 1000})  # over the cap
        else:
            bodies.append({"codes": hexes, "k": 0})  # refused by validation: 422
    return bodies


def count_jobs(batcher):
    """[the count of jobs handed to `batcher.run`], kept up to date."""
    submitted = [0]
    run = batcher.run

    async def counted(*args, **kwargs):
        submitted[0] += 1
        return await run(*args, **kwargs)

    batcher.run = counted
    return submitted


def gate_searches(store, ready):
    """Every `store.search` waits (bounded) until ready()."""
    search = store.search

    def gated(*args, **kwargs):
        deadline = time.monotonic() + WAIT_S
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        return search(*args, **kwargs)

    store.search = gated


@pytest.mark.parametrize("kind", ["flat", "multihash"])
def test_concurrent_requests_get_their_one_at_a_time_answers(tmp_path, rng, kind):
    codes = random_codes(rng, 300, BITS)
    index = CodeIndex(BITS, kind)
    index.add(codes, labels=rng.integers(0, 4, 300), embeddings=rng.standard_normal((300, DIM)))
    index.save(tmp_path / "ix")
    app = create_app(tmp_path / "ix", limits=Limits(max_k=100, max_rescore_candidates=500))
    bodies = requests_of(rng, codes)

    async def exchange():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                batcher = app.state.batcher
                submitted = count_jobs(batcher)
                alone = [await client.post("/search", json=b) for b in bodies]
                scans, reaching = batcher.scans, submitted[0]
                # every search of the concurrent round waits until all its jobs are queued: the
                # round shares scans however fast the machine's event loop and threads run
                submitted[0] = 0
                gate_searches(batcher.store, lambda: submitted[0] >= reaching)
                together = await asyncio.wait_for(
                    asyncio.gather(*[client.post("/search", json=b) for b in bodies]), WAIT_S)
                return alone, together, scans, batcher.scans - scans

    alone, together, alone_scans, shared_scans = asyncio.run(exchange())
    assert alone_scans == sum(r.status_code == 200 for r in alone)  # one scan each, one at a time
    assert {r.status_code for r in alone} == {200, 400, 422}
    for a, b in zip(alone, together):
        assert (b.status_code, b.json()) == (a.status_code, a.json())
    assert shared_scans < alone_scans  # requests shared scans



class ThreadRecordingStore:
    """A flat index's store that records, per search, the OpenMP threads its calling thread may
    use (what FAISS and the flat scan read) and whether the scan ran on that thread alone."""

    backend = "faiss"

    def __init__(self, index):
        self.index, self.omp_threads, self.on_own_thread = index, [], []

    def search(self, queries, plan, classes=None):
        import faiss

        from lbhash import ranking

        self.omp_threads.append(faiss.omp_get_max_threads())
        seen, real_for_query_ranges = set(), ranking.for_query_ranges

        def recording(n, work, threads, *args):
            def recorded(a, b):
                seen.add(threading.get_ident())
                work(a, b)
            real_for_query_ranges(n, recorded, threads, *args)

        ranking.for_query_ranges = recording
        try:
            return search_hits(self.index, queries, plan, classes)
        finally:
            ranking.for_query_ranges = real_for_query_ranges
            self.on_own_thread.append(seen == {threading.get_ident()})


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_thread_per_core_scans_on_its_own_thread(rng, monkeypatch, threads):
    import faiss

    real_work = SearchBatcher._work

    def on_two_cores(batcher):  # each batch thread starts free to use two OpenMP threads, whatever the suite's setting
        faiss.omp_set_num_threads(2)
        real_work(batcher)

    monkeypatch.setattr(SearchBatcher, "_work", on_two_cores)
    codes = random_codes(rng, 20_000, 64)  # past the numpy scan: the compiled one, which may spread
    index = CodeIndex(64)
    index.add(codes)
    store = ThreadRecordingStore(index)
    batcher = SearchBatcher(store, threads=threads)
    queries = random_codes(rng, 8, 64)
    try:
        hits = asyncio.run(asyncio.wait_for(batcher.run(lambda: make_query(queries, plan_search(SearchOptions(5))),
                                                        lambda query, found: found, 8), WAIT_S))
    finally:
        batcher.close()
    ref_d, ref_i = top_k(queries, codes, np.arange(20_000), 5)
    assert [h.ids for h in hits] == ref_i.tolist() and [h.distances for h in hits] == ref_d.tolist()
    # a batch thread per core: each batch on its own thread; one batch thread: its scan uses both cores
    assert store.omp_threads == [1 if threads > 1 else 2]
    assert store.on_own_thread == [threads > 1]


def test_create_app_hands_its_batching_to_the_batcher(tmp_path, rng):
    index = CodeIndex(BITS)
    index.add(random_codes(rng, 10, BITS))
    index.save(tmp_path / "ix")
    for given, used in ((None, Batching(window=0.0, max_rows=256)), (Batching(0.002, 7), Batching(0.002, 7))):
        app = create_app(tmp_path / "ix", batching=given)

        async def batching_in_use():
            async with app.router.lifespan_context(app):  # (it closes the store: one server per index)
                return app.state.batcher.batching

        assert asyncio.run(batching_in_use()) == used
