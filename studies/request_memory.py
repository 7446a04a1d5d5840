"""Issue 69, items 1, 3 and 4: the memory one small request takes, measured in a fresh process per case.

- `ties`: a flat index of 200,000 items sharing one 64-bit code (8-d embeddings), NQ queries at
  distance 1 with their embeddings, ranked by their embeddings (`blended_search`, what `lbhash search` and
  `POST /search` run): the growth of the process's peak RSS over a warmed process.
- `body`: `POST /search` (a TestClient over a keyless in-memory service) with a body that names
  N bad elements (`{"codes": [1, 1, ...]}`) or N unknown keys: the peak RSS growth and the status.

Usage: python studies/request_memory.py ties NQ K FACTOR | body elements|keys N
Prints one line per case (docs/search.md, "Re-scoring by stored embeddings"; docs/indexes.md, "Limits").
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ties(nq: int, k: int, factor: int, n: int = 200_000) -> str:
    from lbhash.index import CodeIndex, Queries, blended_search

    rng = np.random.default_rng(0)
    index = CodeIndex(64)
    index.add(np.zeros((n, 8), np.uint8), embeddings=rng.standard_normal((n, 8)))
    queries = np.zeros((nq, 8), np.uint8)
    queries[:, 0] = 1
    q_emb = rng.standard_normal((nq, 8))
    index.warm()
    blended_search(index, Queries(queries[:1], q_emb[:1]), 1)  # compiled and warmed before the baseline
    base, start = peak_mb(), time.perf_counter()
    blended_search(index, Queries(queries, q_emb), k, factor=factor)
    return (f"ties: {n:,} items of one code, {nq} queries, k {k}, factor {factor}: peak RSS +{peak_mb() - base:.0f} MB, "
            f"{time.perf_counter() - start:.1f} s")


def body(what: str, n: int) -> str:
    """The server (`lbhash serve`, keyless, in its own process) answering one bad body: its peak
    RSS (VmHWM) over its size before the request."""
    import socket
    import subprocess
    import tempfile
    import urllib.error
    import urllib.request
    from pathlib import Path

    from lbhash.index import CodeIndex

    data = ({"codes": [1] * n} if what == "elements" else {"codes": ["00" * 8], **{f"x{i}": 1 for i in range(n)}})
    raw = json.dumps(data, separators=(",", ":")).encode()
    del data
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        index = CodeIndex(64)
        index.add(np.zeros((10, 8), np.uint8))
        index.save(Path(tmp) / "ix")
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        server = subprocess.Popen([sys.executable, "-m", "lbhash.cli", "serve", str(Path(tmp) / "ix"), "--port",
                                   str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(url + "/health", timeout=1).read()
                    break
                except OSError:
                    time.sleep(0.1)

            def memory(field: str) -> float:
                text = Path(f"/proc/{server.pid}/status").read_text()
                return int(next(line.split()[1] for line in text.splitlines() if line.startswith(field))) / 1024

            base, start = memory("VmRSS"), time.perf_counter()
            request = urllib.request.Request(url + "/search", raw, {"content-type": "application/json"})
            try:
                status, detail = 200, urllib.request.urlopen(request, timeout=600).read()
            except urllib.error.HTTPError as err:
                status, detail = err.code, json.loads(err.read())["detail"]
            took = time.perf_counter() - start
            return (f"body: {n:,} bad {what} ({len(raw) / 1e6:.1f} MB): {status} in {took:.1f} s, server peak RSS "
                    f"{memory('VmHWM') - base:+.0f} MB over its {base:.0f} MB; detail {len(detail)} chars: "
                    f"{detail[:100]}")
        finally:
            server.terminate()
            server.wait(60)


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    print(ties(*map(int, args)) if kind == "ties" else body(args[0], int(args[1])))
