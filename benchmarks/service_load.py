"""The load generator of bench_service.py: keep-alive HTTP/1.1 clients on raw sockets.

`search_load` drives `clients` connections from one process with epoll (selectors), each with
one request in flight at a time, as `clients` blocking clients would: a request is one `send`
of bytes made before the clock, a reply is read by its Content-Length. The per-process
blocking clients it replaces (http.client, then a raw socket per process) took 0.4-1.1 ms of
CPU per search on the two cores the server shares; this takes a few tens of microseconds.
`churn_loop` changes the index at a steady rate on a connection of its own.
"""

from __future__ import annotations

import json
import selectors
import socket
import time

import numpy as np


def request_bytes(method: str, path: str, payload=None, host: str = "127.0.0.1") -> bytes:
    body = b"" if payload is None else json.dumps(payload).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
            + ("Content-Type: application/json\r\n" if body else "") + "\r\n")
    return head.encode() + body


class Reply:
    """Bytes of a connection until one reply is complete: `feed` returns its status, or None."""

    def __init__(self):
        self.data = b""

    def feed(self, chunk: bytes) -> int | None:
        self.data += chunk
        end = self.data.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = self.data[:end].split(b"\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head[1:] if line.lower().startswith(b"content-length:")),
                      None)
        if length is None:
            raise ValueError(f"a reply without Content-Length: {head[0]!r}")
        if len(self.data) < end + 4 + length:
            return None
        self.data = self.data[end + 4 + length:]
        return int(head[0].split()[1])


def connect(address) -> socket.socket:
    sock = socket.create_connection(address, timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def search_load(port: int, searches: list[bytes], clients: int, seconds: float, writes: float, seed: int,
                results, width: int = 8) -> None:
    """`clients` connections sending requests for `seconds` (after all are connected): a search
    from `searches`, or with probability `writes` a POST /items of a new id (a code of `width` bytes). Puts (latencies
    in ms, errors, CPU seconds of this process) on `results`."""
    rng = np.random.default_rng(seed)
    selector = selectors.DefaultSelector()
    next_id = 10**12 + seed * 10**9
    conns = []
    for _ in range(clients):
        sock = connect(("127.0.0.1", port))
        sock.setblocking(False)
        conns.append(sock)
    latencies, errors = [], 0
    started: dict[socket.socket, float] = {}
    replies = {sock: Reply() for sock in conns}

    def send(sock) -> None:
        nonlocal next_id
        if writes and rng.random() < writes:
            code = rng.integers(0, 256, width, np.uint8).tobytes().hex()
            message = request_bytes("POST", "/items", {"codes": [code], "ids": [next_id]})
            next_id += 1
        else:
            message = searches[rng.integers(len(searches))]
        started[sock] = time.perf_counter()
        sock.sendall(message)  # a small request: the socket's buffer takes it whole

    cpu = time.process_time()
    deadline = time.monotonic() + seconds
    for sock in conns:
        selector.register(sock, selectors.EVENT_READ)
        send(sock)
    open_conns = len(conns)
    while open_conns:
        for key, _ in selector.select(timeout=5):
            sock = key.fileobj
            chunk = sock.recv(1 << 16)
            status = replies[sock].feed(chunk) if chunk else 0
            if status is None:
                continue
            latencies.append((time.perf_counter() - started[sock]) * 1000)
            errors += status != 200
            if status and time.monotonic() < deadline:
                send(sock)
            else:
                selector.unregister(sock)
                sock.close()
                open_conns -= 1
    results.put((latencies, errors, time.process_time() - cpu))


def churn_loop(port: int, n: int, bits: int, rate: float, seconds: float, seed: int, results) -> None:
    """Steady changes: delete, re-add below the largest id, upsert; one every 1 / rate s."""
    rng = np.random.default_rng(10**6 + seed)
    latencies, errors, step, deleted = [], 0, 0, None
    sock, reply = connect(("127.0.0.1", port)), Reply()
    next_at = time.monotonic()
    deadline = next_at + seconds
    while time.monotonic() < deadline:
        item = int(rng.integers(n))
        code = rng.integers(0, 256, bits // 8, np.uint8).tobytes().hex()
        if step % 3 == 0:
            message, deleted = request_bytes("DELETE", f"/items/{item}"), item
        elif step % 3 == 1:
            message = request_bytes("POST", "/items", {"codes": [code], "ids": [deleted]})
        else:
            message = request_bytes("POST", "/items", {"codes": [code], "ids": [item], "upsert": True})
        start = time.perf_counter()
        sock.sendall(message)
        while (status := reply.feed(sock.recv(1 << 16))) is None:
            pass
        step += 2 if step % 3 == 0 and status == 404 else 1  # 404: already deleted, nothing to re-add
        latencies.append((time.perf_counter() - start) * 1000)
        errors += status not in (200, 404)
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))
    sock.close()
    results.put((latencies, errors, 0.0))
