"""Where a `/search` request's CPU goes inside the service, without sockets or clients.

    python benchmarks/profile_service.py [--n 2000] [--requests 3000]

Drives the ASGI app of `lbhash serve` directly (no HTTP parsing, no event-loop I/O) over a
small flat index, so that the scan costs next to nothing, and times in the same run: the
whole request through the app (FastAPI's middleware, then `SearchPath`, which answers a valid
`/search` past FastAPI's routing), the same work with no middleware at all (validation, the
search on a search thread, the response), the body's validation alone, the store's search alone
(`search_hits` and the locks), and one handoff to a search thread and back. Everything but
the scan holds the GIL; `bench_service.py` measures the same server under load.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lbhash.index import CodeIndex, Queries, SearchOptions, plan_search  # noqa: E402
from lbhash.service import models  # noqa: E402
from lbhash.service.app import create_app, hits_response  # noqa: E402
from lbhash.service.decode import decode_search  # noqa: E402
from functools import partial  # noqa: E402
from _smoke import parse_args  # beside this script


async def cpu_us(work, repeats: int) -> float:
    """Median over 3 rounds of the CPU time per call of `work()` (awaited when it returns an
    awaitable), in microseconds."""
    rounds = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeats):
            result = work()
            if inspect.isawaitable(result):
                await result
        rounds.append((time.process_time() - start) / repeats * 1e6)
    return float(np.median(rounds))


async def profile(app, body: bytes, repeats: int) -> dict[str, float]:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/search", "raw_path": b"/search", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode()),
                         (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    state = app.state

    async def without_fastapi(scope, receive, send):
        """The same request's work with no middleware: what SearchPath does, bare."""
        parsed = models.SearchRequest.model_validate_json((await receive())["body"])
        search = partial(decode_search, parsed, state.limits, state.store.bits, state.encoder,
                         state.store.index.embedding_dim)
        response = await state.batcher.run(search, partial(hits_response, state.store, state.media))
        await response(scope, receive, send)

    def request(through):
        async def call():
            status = []

            async def send(message):
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            await through(dict(scope), receive, send)
            if status != [200]:
                raise RuntimeError(f"/search answered {status}")
        return call

    query = models.SearchRequest.model_validate_json(body)
    codes = np.frombuffer(bytes.fromhex(query.codes[0]), np.uint8)[None]
    plan = plan_search(SearchOptions(query.k), max_k=state.limits.max_k, max_candidates=state.limits.max_rescore_candidates)
    async with app.router.lifespan_context(app):
        for _ in range(200):
            await request(app)()
        return {
            "whole request (the app, SearchPath)": await cpu_us(request(app), repeats),
            "the same without any middleware": await cpu_us(request(without_fastapi), repeats),
            "validation (SearchRequest.model_validate_json)": await cpu_us(
                lambda: models.SearchRequest.model_validate_json(body), repeats),
            "store search (search_hits, locks)": await cpu_us(lambda: state.store.search(Queries(codes), plan), repeats),
            "handoff to a search thread and back": await cpu_us(lambda: state.offload.run(int), repeats),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="codes in the index")
    parser.add_argument("--requests", type=int, default=3000, help="calls per timing round")
    args = parse_args(parser, n=200, requests=50)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (args.n, 8), np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        index = CodeIndex(64)
        index.add(codes, labels=np.eye(10, dtype=np.uint8)[np.arange(args.n) % 10])
        index.save(Path(tmp) / "ix")
        app = create_app(Path(tmp) / "ix")
        body = json.dumps({"codes": [codes[5].tobytes().hex()], "k": 10}).encode()
        figures = asyncio.run(profile(app, body, args.requests))
    print(f"{args.n:,} x 64-bit codes, top-10, one query per request; CPU per call, median of 3 rounds:")
    for name, us in figures.items():
        print(f"  {name:<48} {us:8.0f} us")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
