"""The service as a real uvicorn process on 127.0.0.1: an acknowledged write survives kill -9."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from index_reference import random_codes
from serve_helpers import SRC, free_port
from lbhash.index import CodeIndex
from lbhash.serving.index_store import wal_path_for


@pytest.mark.slow  # a real server killed with SIGKILL and started again
def test_acknowledged_writes_survive_kill_9(tmp_path, rng, server_factory):
    codes = random_codes(rng, 50, 32)
    index = CodeIndex(32)
    index.add(codes[:40], labels=rng.integers(0, 3, 40))
    index.save(tmp_path / "ix")
    port = free_port()
    server = server_factory(tmp_path / "ix", port)
    new_hex = [c.tobytes().hex() for c in codes[40:]]
    added = httpx.post(f"{server.url}/items", json={"codes": new_hex, "labels": [[2]] * 10}, timeout=10)
    assert added.status_code == 200 and added.json()["ids"] == list(range(40, 50))
    assert httpx.delete(f"{server.url}/items/3", timeout=10).status_code == 200
    server.kill(signal.SIGKILL)  # no shutdown hook runs

    server = server_factory(tmp_path / "ix", port)
    assert httpx.get(f"{server.url}/items/45", timeout=10).json() == {"id": 45, "code": new_hex[5], "labels": [2]}
    assert httpx.get(f"{server.url}/items/3", timeout=10).status_code == 404
    hits = httpx.post(f"{server.url}/search", json={"codes": new_hex[:1], "k": 1}, timeout=10).json()
    assert hits["results"][0]["hits"][0]["id"] == 40
    assert httpx.get(f"{server.url}/stats", timeout=10).json()["ntotal"] == 49
    server.kill(signal.SIGTERM)  # graceful: the log is folded into the saved index, then status 0
    assert server.proc.returncode == 0
    assert wal_path_for(tmp_path / "ix").read_bytes() == b""
    saved = CodeIndex.load(tmp_path / "ix")
    assert saved.ntotal == 49 and saved.metadata["wal_seq"] == 2


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_a_second_server_on_the_same_index_is_refused(tmp_path, rng, server_factory):
    """Issue 27, item 1: two servers on one index lose writes; the second now fails at start."""
    CodeIndex(32).save(tmp_path / "ix")
    first = server_factory(tmp_path / "ix", free_port())
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = "from lbhash.cli import main; main()"
    second = subprocess.run([sys.executable, "-c", code, "serve", str(tmp_path / "ix"), "--host", "127.0.0.1",
                             "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=120)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"is served by another process (pid {first.proc.pid}, lbhash serve;" in lines[0]
    codes = random_codes(rng, 1, 32)
    answer = httpx.post(f"{first.url}/items", json={"codes": [codes[0].tobytes().hex()], "ids": [777777]}, timeout=30)
    assert answer.status_code == 200, answer.text
    first.kill(signal.SIGTERM)
    assert CodeIndex.load(tmp_path / "ix").contains([777777]).tolist() == [True]


def _closed_by_server(sock, within_s):
    """True when the server closes `sock` within `within_s` seconds (recv returns b'')."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1024) == b""
    except (socket.timeout, ConnectionResetError):
        return False


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_a_client_that_never_finishes_its_headers_is_cut_off(tmp_path, server_factory):
    CodeIndex(32).save(tmp_path / "ix")
    server = server_factory(tmp_path / "ix", free_port(), "--header-timeout", "0.5")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as silent, \
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
        assert _closed_by_server(silent, 20) and _closed_by_server(slow, 20)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as prompt:  # a whole request in time
        prompt.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert prompt.recv(64).startswith(b"HTTP/1.1 200")


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_connections_beyond_the_limit_get_503(tmp_path, server_factory):
    CodeIndex(32).save(tmp_path / "ix")
    server = server_factory(tmp_path / "ix", free_port(), "--max-connections", "3", "--header-timeout", "10")
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(3)]
    try:
        time.sleep(0.5)  # the server has accepted them
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 503
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 20
    while httpx.get(f"{server.url}/health", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the service did not recover after the idle connections closed"
        time.sleep(0.2)


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_headers_beyond_the_limit_are_refused(tmp_path, server_factory):
    from lbhash.limits import MAX_HEADER_BYTES

    CodeIndex(32).save(tmp_path / "ix")
    server = server_factory(tmp_path / "ix", free_port())
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = 0
        try:
            while sent <= MAX_HEADER_BYTES + 8192:  # in pieces: the server buffers an unfinished header
                sock.sendall(b"X-Big-" + str(sent).encode() + b": " + b"a" * 4000 + b"\r\n")
                sent += 4096
                time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sock.recv(64).startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{server.url}/health", headers={"X-Fine": "a" * 1000}, timeout=10).status_code == 200


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_index_add_is_refused_while_a_server_holds_the_index(tmp_path, rng, server_factory):
    """Issue 27: the server holds the index's writer lock; `lbhash index add` on the same index
    stops in one line naming the server's pid (exit 2) and writes nothing, and succeeds once
    the server has stopped."""
    import numpy as np

    from helpers import cli, one_line_error

    codes = random_codes(rng, 3, 32)
    index = CodeIndex(32)
    index.add(codes[:1], ids=[1])
    index.save(tmp_path / "ix")
    np.savez(tmp_path / "more.npz", codes=codes[1:], bits=np.int64(32), ids=np.array([7, 8]), labels=[65535, 2])
    server = server_factory(tmp_path / "ix", free_port())
    one_line_error(cli("index", "add", tmp_path / "ix", tmp_path / "more.npz"),
                   f"{tmp_path / 'ix'} is served by another process (pid {server.proc.pid}, lbhash serve;")
    one_line_error(cli("index", "remove", tmp_path / "ix", "--ids", "1"), f"pid {server.proc.pid}")
    assert httpx.get(f"{server.url}/stats", timeout=10).json()["ntotal"] == 1
    server.kill(signal.SIGTERM)
    assert server.proc.returncode == 0
    result = cli("index", "add", tmp_path / "ix", tmp_path / "more.npz")
    assert result.exit_code == 0, result.output
    assert CodeIndex.load(tmp_path / "ix").labels_of([1, 7, 8]) == [[], [65535], [2]]
