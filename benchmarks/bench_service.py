"""Load test of the HTTP search service on 127.0.0.1, beside the same searches in process.

    python benchmarks/bench_service.py                     # 1,000,000 x 64-bit codes; 1, 4 and 32 clients
    python benchmarks/bench_service.py --quick             # 100,000 codes, 5 s per round
    python benchmarks/bench_service.py --n 100000 --clients 8 --seconds 10 --writes 0.05
    python benchmarks/bench_service.py --clients 4 --churn 20 --no-encode   # searches while 20 changes/s go on

Builds a flat index of random codes (--codes clustered: around 1,000 centers) in a temporary
directory and first times, in this process, one-at-a-time searches of it through the store
the service uses (`IndexStore.search`: one query, top-k, what a request searched before
searches were batched). Then starts `lbhash serve` on a free port of 127.0.0.1 (stopped at the
end) and, for each number in --clients, runs that many concurrent keep-alive connections for
--seconds, each sending one POST /search (one query, top-k) at a time (benchmarks/service_load.py:
one client process, epoll); with --writes a share of the requests are POST /items instead.
With --churn R one more connection changes the index at a steady R changes per second, in
turn: DELETE /items/{id} of a random item, POST /items of that id again with a new code (an id
below the largest: a mid-range insert), and an upsert of another random item. Reports per
round requests per second, p50/p99 latency and errors, and the server's CPU time per request
(from /proc), beside the CPU the client process took; then the encoding rate of a small run
through PyTorch and through ONNX Runtime (benchmarks/encode_rates.py; --no-encode skips it).
The last line is the HTTP rate at the largest --clients over the in-process rate:
`http32/inprocess = R`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from encode_rates import encode_rates  # noqa: E402
from lbhash.index import CodeIndex, Queries, SearchOptions, plan_search  # noqa: E402
from lbhash.serving.index_store import IndexStore  # noqa: E402
from service_load import churn_loop, request_bytes, search_load  # noqa: E402
from _smoke import parse_args  # beside this script

START_TIMEOUT_S = 180


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index_dir: Path, port: int, options: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", "from lbhash.cli.serve import serve; serve()", str(index_dir),
                             "--host", "127.0.0.1", "--port", str(port), *options], env=env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with status {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.5)
    stop_server(proc)
    sys.exit(f"the server did not answer within {START_TIMEOUT_S} s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(latencies: np.ndarray, elapsed: float) -> str:
    if not len(latencies):
        return "no requests"
    return (f"{len(latencies):,} requests, {len(latencies) / elapsed:,.0f} req/s, "
            f"p50 {np.percentile(latencies, 50):.2f} ms, p99 {np.percentile(latencies, 99):.2f} ms, "
            f"max {latencies.max():.1f} ms")


def inprocess_rate(index_dir: Path, queries: np.ndarray, k: int, seconds: float) -> tuple[float, float]:
    """(searches per second, CPU ms per search) of one query at a time through `IndexStore.search`."""
    store = IndexStore(index_dir)
    try:
        store.warm()
        plan = plan_search(SearchOptions(k))
        for q in queries[:50]:
            store.search(Queries(q[None]), plan)
        done, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            for q in queries[done % len(queries):][:100]:
                store.search(Queries(q[None]), plan)
            done += 100
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        store.close()
    return done / elapsed, 1000 * cpu / done


def make_codes(args, rng) -> tuple[np.ndarray, np.ndarray]:
    width = args.bits // 8
    if args.codes == "random":
        return rng.integers(0, 256, (args.n, width), np.uint8), rng.integers(0, 256, (1000, width), np.uint8)
    centers = rng.integers(0, 256, (1000, width), np.uint8)
    db = centers[rng.integers(0, 1000, args.n)] ^ (rng.random((args.n, width)) < 0.06).astype(np.uint8)
    queries = centers[rng.integers(0, 1000, 1000)] ^ (rng.random((1000, width)) < 0.06).astype(np.uint8)
    return db, queries


def load_round(port: int, proc, searches: list[bytes], clients: int, args) -> tuple[str, float]:
    """One round of `clients` connections (and the churn's); its report line and its req/s."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=search_load, args=(port, searches, clients, args.seconds, args.writes,
                                                          args.seed, results, args.bits // 8))]
    if args.churn > 0:
        workers.append(context.Process(target=churn_loop, args=(port, args.n, args.bits, args.churn, args.seconds,
                                                                args.seed, results)))
    server_cpu = cpu_seconds(proc.pid)
    for w in workers:
        w.start()
    reports = [results.get(timeout=args.seconds + 300) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    server_cpu = cpu_seconds(proc.pid) - server_cpu
    latencies = np.array(reports[0][0])
    requests = sum(len(r[0]) for r in reports)
    line = (f"{clients:>2} clients: {summary(latencies, args.seconds)}, errors {reports[0][1]}; server CPU "
            f"{1000 * server_cpu / max(requests, 1):.2f} ms per request, client process "
            f"{1000 * reports[0][2] / max(len(latencies), 1):.3f} ms")
    if args.churn > 0:
        line += (f"\n    changes at {args.churn:g}/s (delete, re-add below the largest id, upsert): "
                 f"{summary(np.array(reports[1][0]), args.seconds)}, errors {reports[1][1]}")
    return line, len(latencies) / args.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="codes in the index (default 1,000,000; --quick 100,000)")
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--codes", choices=["random", "clustered"], default="random")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clients", default="1,4,32", help="comma-separated: one round per number")
    parser.add_argument("--seconds", type=float, default=None, help="per round (default 15; --quick 5)")
    parser.add_argument("--quick", action="store_true", help="a smaller index and shorter rounds")
    parser.add_argument("--writes", type=float, default=0.0, help="share of requests that add an item")
    parser.add_argument("--churn", type=float, default=0.0, help="changes per second on one more connection")
    parser.add_argument("--serve-options", default="", help="more options of lbhash serve, as one string")
    parser.add_argument("--no-encode", action="store_true", help="skip the encoding rates")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, n=2000, seconds=1.0, clients="1,2", churn=2.0, writes=0.1)
    args.n = args.n or (100_000 if args.quick else 1_000_000)
    args.seconds = args.seconds or (5.0 if args.quick else 15.0)
    clients = [int(c) for c in args.clients.split(",")]
    print(f"load average at start: {load_average()}")
    db, queries = make_codes(args, np.random.default_rng(args.seed))
    searches = [request_bytes("POST", "/search", {"codes": [q.tobytes().hex()], "k": args.k}) for q in queries]
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        index = CodeIndex(args.bits)
        index.add(db)
        index.save(Path(tmp) / "ix")
        del index
        inprocess, inprocess_cpu = inprocess_rate(Path(tmp) / "ix", queries, args.k, min(args.seconds, 10))
        print(f"{args.n:,} x {args.bits}-bit {args.codes} codes, top-{args.k}, one query per request, "
              f"{args.seconds:g} s per round")
        print(f"in process, one at a time (IndexStore.search): {inprocess:,.0f} searches/s, "
              f"{inprocess_cpu:.2f} ms CPU each")
        port = free_port()
        proc = start_server(Path(tmp) / "ix", port, shlex.split(args.serve_options))
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as warm:
                for q in queries[:50]:
                    warm.post("/search", json={"codes": [q.tobytes().hex()], "k": args.k})
            for c in clients:
                line, rates[c] = load_round(port, proc, searches, c, args)
                print(line, flush=True)
        finally:
            stop_server(proc)
        if not args.no_encode:
            for line in encode_rates(Path(tmp), *((200, 16) if args.smoke else ())):
                print(line)
    print(f"load average at end: {load_average()}")
    top = max(clients)
    print(f"http{top}/inprocess = {rates[top] / inprocess:.2f}")


if __name__ == "__main__":
    main()
