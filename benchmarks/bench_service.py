"""Load test of the HTTP search service on 127.0.0.1.

    python benchmarks/bench_service.py                     # 1,000,000 x 64-bit codes, 4 clients, 20 s
    python benchmarks/bench_service.py --n 100000 --clients 8 --seconds 10 --writes 0.05
    python benchmarks/bench_service.py --churn 20          # searches while 20 changes/s go on

Builds a flat index in a temporary directory, starts `lbhash serve` on a free port of
127.0.0.1 (and stops it at the end), then runs --clients concurrent clients (each its own
process, started before the clock: their start-up is not counted) for --seconds,
each sending one POST /search (one query, top-k) at a time; with --writes a share of the
requests are POST /items instead. With --churn R one more client changes the index at a steady R
changes per second, in turn: DELETE /items/{id} of a random item, POST /items of that id again
with a new code (an id below the largest: a mid-range insert), and an upsert of another random
item. Reports requests per second, p50/p99 latency and errors, for searches and for changes,
and the server's CPU time per request (from /proc: on a small index, what HTTP, validation and
encoding cost beside the search), beside the CPU time the search clients took (the two share
the machine's cores).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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

from lbhash.index import CodeIndex  # noqa: E402

START_TIMEOUT_S = 180
CLIENT_START_S = 20  # time for the client processes to start and import before the clock runs


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(index_dir: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", "from lbhash.cli.serve import serve; serve()", str(index_dir),
                             "--host", "127.0.0.1", "--port", str(port)], env=env)
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


def wait_until(begin: float) -> float:
    """Sleep until `begin` (time.monotonic, the same clock in every process); the deadline."""
    time.sleep(max(0.0, begin - time.monotonic()))
    return begin


class Client:
    """One keep-alive HTTP/1.1 connection on a raw socket: a request is one `sendall`, a reply
    is read by its Content-Length. http.client, which parses every reply's headers with the
    email package, took 0.6-0.9 ms of CPU per search: a quarter of what the server it measures
    took, on the same two cores."""

    def __init__(self, url: str):
        host, port = url.rsplit("/", 1)[-1].split(":")
        self.address, self.host = (host, int(port)), host
        self.sock: socket.socket | None = None
        self.pending = b""  # bytes read past the previous reply

    def call(self, method: str, path: str, payload=None) -> int:
        """The reply's status; 0 when the connection failed (it reconnects on the next call)."""
        body = b"" if payload is None else json.dumps(payload).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
                + ("Content-Type: application/json\r\n" if body else "") + "\r\n")
        try:
            if self.sock is None:
                self.sock = socket.create_connection(self.address, timeout=60)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.sendall(head.encode() + body)
            return self._reply()
        except (OSError, ValueError):
            self.close()
            return 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.pending = None, b""

    def _reply(self) -> int:
        data = self.pending
        while b"\r\n\r\n" not in data:
            data += self._receive()
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        fields = {name.strip().lower(): value.strip() for name, value in (line.split(b":", 1) for line in lines[1:])}
        if b"content-length" not in fields:
            raise ValueError(f"a reply without Content-Length: {lines[0]!r}")
        length = int(fields[b"content-length"])
        while len(data) < length:
            data += self._receive()
        self.pending = data[length:]
        if fields.get(b"connection", b"").lower() == b"close":
            self.close()
        return int(lines[0].split()[1])

    def _receive(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk


def client_loop(url, queries, args, begin, seed, results):
    rng = np.random.default_rng(seed)
    latencies, errors, next_id = [], 0, 10**12 + seed * 10**9
    client = Client(url)
    deadline = wait_until(begin) + args.seconds
    cpu = time.process_time()
    while time.monotonic() < deadline:
        q = queries[rng.integers(len(queries))].tobytes().hex()
        write = rng.random() < args.writes
        start = time.perf_counter()
        if write:
            status = client.call("POST", "/items", {"codes": [q], "ids": [next_id]})
            next_id += 1
        else:
            status = client.call("POST", "/search", {"codes": [q], "k": args.k})
        latencies.append((time.perf_counter() - start) * 1000)
        errors += status != 200
    results.put(("search", latencies, errors, time.process_time() - cpu))


def churn_loop(url, args, begin, results):
    """Steady changes: delete, re-add below the largest id, upsert; one every 1 / rate s."""
    rng = np.random.default_rng(10**6 + args.seed)
    latencies, errors, step = [], 0, 0
    width = args.bits // 8
    client = Client(url)
    next_at = wait_until(begin)
    deadline = begin + args.seconds
    while time.monotonic() < deadline:
        item = int(rng.integers(args.n))
        code = rng.integers(0, 256, width, np.uint8).tobytes().hex()
        start = time.perf_counter()
        if step % 3 == 0:
            status = client.call("DELETE", f"/items/{item}")
            deleted = item
        elif step % 3 == 1:
            status = client.call("POST", "/items", {"codes": [code], "ids": [deleted]})
        else:
            status = client.call("POST", "/items", {"codes": [code], "ids": [item], "upsert": True})
        step += 2 if step % 3 == 0 and status == 404 else 1  # 404: already deleted, nothing to re-add
        latencies.append((time.perf_counter() - start) * 1000)
        errors += status not in (200, 404)
        next_at += 1 / args.churn
        time.sleep(max(0.0, next_at - time.monotonic()))
    results.put(("change", latencies, errors))


def summary(latencies: np.ndarray, elapsed: float) -> str:
    if not len(latencies):
        return "no requests"
    return (f"{len(latencies):,} requests, {len(latencies) / elapsed:,.0f} req/s, "
            f"p50 {np.percentile(latencies, 50):.2f} ms, p99 {np.percentile(latencies, 99):.2f} ms, "
            f"max {latencies.max():.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--writes", type=float, default=0.0, help="share of requests that add an item")
    parser.add_argument("--churn", type=float, default=0.0, help="changes per second by one more client")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"load average at start: {load_average()}")
    rng = np.random.default_rng(args.seed)
    width = args.bits // 8
    centers = rng.integers(0, 256, (1000, width), np.uint8)
    db = centers[rng.integers(0, 1000, args.n)] ^ (rng.random((args.n, width)) < 0.06).astype(np.uint8)
    queries = centers[rng.integers(0, 1000, 1000)] ^ (rng.random((1000, width)) < 0.06).astype(np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        index = CodeIndex(args.bits)
        index.add(db)
        index.save(Path(tmp) / "ix")
        del index
        port = free_port()
        proc = start_server(Path(tmp) / "ix", port)
        try:
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=url, timeout=30) as warm:
                for q in queries[:50]:
                    warm.post("/search", json={"codes": [q.tobytes().hex()], "k": args.k})
            # each client is its own process, so that clients do not queue for one interpreter
            context = multiprocessing.get_context("spawn")
            results = context.Queue()
            begin = time.monotonic() + CLIENT_START_S  # every client starts at once, after its imports
            clients = [context.Process(target=client_loop, args=(url, queries, args, begin, s, results))
                       for s in range(args.clients)]
            if args.churn > 0:
                clients.append(context.Process(target=churn_loop, args=(url, args, begin, results)))
            server_cpu = cpu_seconds(proc.pid)
            for c in clients:
                c.start()
            reports = [results.get(timeout=CLIENT_START_S + args.seconds + 300) for _ in clients]
            for c in clients:
                c.join(timeout=60)
            elapsed = args.seconds
            server_cpu = cpu_seconds(proc.pid) - server_cpu  # the clients' start-up is idle time for it
        finally:
            stop_server(proc)
    searches = [r for r in reports if r[0] == "search"]
    changes = [r[1:] for r in reports if r[0] == "change"]
    latencies = np.concatenate([np.array(r[1]) for r in searches])
    errors = sum(r[2] for r in searches)
    client_cpu = sum(r[3] for r in searches)
    print(f"{args.n:,} x {args.bits}-bit codes, {args.clients} clients, {elapsed:.1f} s, k={args.k}, "
          f"writes {args.writes:.0%}: {summary(latencies, elapsed)}, errors {errors}")
    requests = len(latencies) + sum(len(r[0]) for r in changes)
    print(f"server CPU: {server_cpu:.1f} s, {1000 * server_cpu / max(requests, 1):.2f} ms per request; "
          f"search clients' CPU: {client_cpu:.1f} s, {1000 * client_cpu / max(len(latencies), 1):.2f} ms per search")
    if args.churn > 0:
        change_ms = np.concatenate([np.array(r[0]) for r in changes])
        print(f"changes at {args.churn:g}/s (delete, re-add below the largest id, upsert): "
              f"{summary(change_ms, elapsed)}, errors {sum(r[1] for r in changes)}")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
