"""The most any Python server path could give `/search` on this machine, beside the in-process rate.

    python benchmarks/bench_asgi_ceiling.py                  # 32 clients, 10 s per server
    python benchmarks/bench_asgi_ceiling.py --clients 32 --seconds 5 --n 1000000

Serves, with uvicorn on 127.0.0.1 as `lbhash serve` runs it (httptools; the event loop uvicorn
picks: uvloop where installed), two apps that do no search at all and answer every POST /search
with the same 10-hit body: a bare ASGI callable (`raw_app`), and a FastAPI app with one route
that validates the request into a pydantic model and returns the bytes (`fastapi_app`). Each is
driven by the load generator of bench_service.py (benchmarks/service_load.py) with the same
request bodies. Before them it times one-at-a-time searches in process (`IndexStore.search`, a
flat index of --n random 64-bit codes), the denominator of bench_service.py's last line, and
the scan alone (`CodeIndex.search`) per query for one query and for 32 in one call, whose rate
bounds any service that scans (`scan/inprocess`: with no HTTP, no Python beside the scan).
Prints per app req/s, p50/p99 and server CPU per request, and the ratio its rate would give:
`ceiling/inprocess = R`; then the most a service on that path could answer once each request
also takes a shared scan's CPU: the machine's cores over the app's CPU per request, the shared
scan's and the load generator's (which runs on the same cores), against the in-process rate. A service whose every request does a search, validation, batching
and JSON cannot beat the FastAPI route's line.
"""

import json  # no `from __future__ import annotations`: FastAPI reads the local model's annotation
from _smoke import parse_args  # beside this script

# the 10 hits every answer carries (bench_service.py's searches are top-10)
BODY = json.dumps({"results": [{"code": "0011223344556677", "hits": [
    {"id": i, "distance": 3 + i // 2, "labels": []} for i in range(10)]}]}, separators=(",", ":")).encode()
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def raw_app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def _fastapi_app():
    from fastapi import FastAPI, Response
    from pydantic import BaseModel

    class SearchRequest(BaseModel):
        codes: list[str]
        k: int = 10

    app = FastAPI()

    @app.post("/search")
    async def search(body: SearchRequest):
        return Response(BODY, media_type="application/json")
    return app


def __getattr__(name):  # uvicorn imports `fastapi_app` in the server process only
    if name == "fastapi_app":
        return _fastapi_app()
    raise AttributeError(name)


def main() -> None:
    import argparse
    import multiprocessing
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import numpy as np

    from bench_service import cpu_seconds, free_port, inprocess_rate, load_average, stop_server, summary
    from lbhash.cpus import usable_cpus
    from lbhash.index import CodeIndex
    from service_load import request_bytes, search_load

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="codes of the in-process index")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parse_args(parser, n=2000, clients=2, seconds=1.0)
    print(f"load average at start: {load_average()}")
    rng = np.random.default_rng(0)
    queries = rng.integers(0, 256, (1000, 8), np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        index = CodeIndex(64)
        index.add(rng.integers(0, 256, (args.n, 8), np.uint8))
        (alone, alone_cpu), (shared, shared_cpu) = (scan_ms(index, queries[:size]) for size in (1, 32))
        print(f"CodeIndex.search, top-10, per query: one query alone {alone:.3f} ms ({alone_cpu:.3f} ms CPU); "
              f"32 in one call (every thread) {shared:.3f} ms ({shared_cpu:.3f} ms CPU)")
        index.save(Path(tmp) / "ix")
        del index
        inprocess, cpu = inprocess_rate(Path(tmp) / "ix", queries, 10, min(args.seconds, 10))
    print(f"in process, one at a time (IndexStore.search, {args.n:,} x 64-bit codes): {inprocess:,.0f} searches/s, "
          f"{cpu:.2f} ms CPU each; http{args.clients}/inprocess = 2 needs {2 * inprocess:,.0f} req/s")
    # a service that did nothing but shared scans: the most any server path could reach
    print(f"scans alone, 32 queries per call: {1000 / shared:,.0f} searches/s; "
          f"scan/inprocess = {1000 / shared / inprocess:.2f}")
    cores = usable_cpus()
    searches = [request_bytes("POST", "/search", {"codes": [q.tobytes().hex()], "k": 10}) for q in queries]
    here = Path(__file__).resolve().parent
    for app in ("raw_app", "fastapi_app"):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", f"bench_asgi_ceiling:{app}", "--app-dir", str(here),
                                 "--host", "127.0.0.1", "--port", str(port), "--http", "httptools",
                                 "--log-level", "warning"])
        try:
            _wait_for(port, proc)
            context = multiprocessing.get_context("spawn")
            results = context.Queue()
            worker = context.Process(target=search_load, args=(port, searches, args.clients, args.seconds, 0.0, 0,
                                                               results))
            before = cpu_seconds(proc.pid)
            worker.start()
            latencies, errors, client = results.get(timeout=args.seconds + 300)
            worker.join(timeout=60)
            server = cpu_seconds(proc.pid) - before
        finally:
            stop_server(proc)
        rate, served = len(latencies) / args.seconds, max(len(latencies), 1)
        server_ms, client_ms = 1000 * server / served, 1000 * client / served
        # the two cores shared by this app's work per request, the shared scan's and the clients'
        with_scan = cores * 1000 / (server_ms + shared_cpu + client_ms)
        print(f"{app}, {args.clients} clients: {summary(np.array(latencies), args.seconds)}, errors {errors}; "
              f"server CPU {server_ms:.3f} ms per request, client process {client_ms:.3f} ms; "
              f"ceiling/inprocess = {rate / inprocess:.2f}; with a shared scan's CPU added, at most "
              f"{with_scan:,.0f} req/s on {cores} cores: {with_scan / inprocess:.2f}", flush=True)
    print(f"load average at end: {load_average()}")


def scan_ms(index, queries, seconds: float = 2.0) -> tuple[float, float]:
    """Milliseconds per query of `index.search(queries, 10)`, wall and CPU (all threads),
    repeated for about `seconds`."""
    import time

    index.search(queries, 10)
    calls, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        index.search(queries, 10)
        calls += 1
    per_query = calls * len(queries) / 1000
    return (time.perf_counter() - start) / per_query, (time.process_time() - cpu) / per_query


def _wait_for(port: int, proc, timeout: float = 60.0) -> None:
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"uvicorn exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"uvicorn did not listen on port {port} within {timeout:g} s")


if __name__ == "__main__":
    main()
