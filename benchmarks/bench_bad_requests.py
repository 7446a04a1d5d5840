"""The memory of `lbhash serve` answering each bad request of issue 69, one request at a time.

    python benchmarks/bench_bad_requests.py                          # the issue's sizes: under a minute on 2 busy cores
    python benchmarks/bench_bad_requests.py --items 50000 --codes 2000000 --bound-mb 512

Starts the real server (`python -m lbhash.cli serve`, 127.0.0.1, a free port, stopped at the end) three times,
one after the other, over indexes it builds in a temporary folder:
1. keyless, over a flat index of --items 64-bit items that all share one class code, kept with --dim-wide
   float16 embeddings: a re-scored POST /search of --queries codes at Hamming distance 1 from that code
   (every item ties at the boundary), with their embeddings, k 1, rescore_factor 1; a POST /search of
   `{"codes": [1, 1, ...]}` with --codes elements; one with --keys unknown keys; one of --rows one-number
   embedding rows `[[1],[1],...]` (issue 87), once and four at once.
2. with a write key, over the index of a tiny image run trained here (a CIFAR ResNet-8, 16 bits, one
   epoch on 32 x 32 PNGs; serve --run): an ICNS whose one entry says 256 x 256 (`ic08`) and holds a
   --side x --side PNG, posted to /search/image and to /items/image; two greyscale PNGs of --photo
   pixels (issue 87: 6000 x 6600 each) in one /search/image.
3. the same index served through the run's export (`lbhash export`, serve --encoder): the two PNGs again,
   once and four at once (the pixel budget answers what it cannot admit with 503).
Before a server's first request it reads the server's resident size (VmRSS in /proc/PID/status), after
each request its peak (VmHWM, which only rises). Each line: the request, the HTTP status, the seconds,
the peak over idle, the rise over the previous peak, "ok" or "OVER" against --bound-mb (and the start of
a refusal's detail). A valid request comes first on each server (its first search loads and warms what
every search needs), so that a bad request's rise is its own. Last, the largest rise. Exit status 0
whatever the figures: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lbhash.index import CodeIndex  # noqa: E402
from _smoke import parse_args  # beside this script

START_TIMEOUT_S = 180
KEY_HEADER = "X-Lbhash-Key"
# the server's own environment: no key of the caller's leaks into the keyless server
ENV = {k: v for k, v in os.environ.items() if k not in ("LBHASH_WRITE_KEY", "LBHASH_READ_KEY")}
ENV["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])


def lbhash(args: list, log: Path) -> None:
    """One command of the CLI, its output in `log` (the benchmark prints only its own lines)."""
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, "-m", "lbhash.cli", *map(str, args)], env=ENV, stdout=out,
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        sys.exit(f"lbhash {args[0]} failed ({done.returncode}):\n{log.read_text()[-3000:]}")


class Server:
    """`lbhash serve INDEX` in a subprocess, and its memory from /proc (MB)."""

    def __init__(self, index: Path, log: Path, options: list, env: dict | None = None):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.log_path, self.log = log, log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "lbhash.cli", "serve", str(index), "--host", "127.0.0.1",
                                      "--port", str(self.port), *map(str, options)], env={**ENV, **(env or {})},
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.idle, self.peak = self.memory("VmRSS"), self.memory("VmHWM")
                    return
            except httpx.TransportError:
                time.sleep(0.5)
        why = f"exited ({self.proc.returncode})" if self.proc.poll() is not None else f"did not answer in {START_TIMEOUT_S} s"
        self.stop()
        sys.exit(f"the server {why}:\n{self.log_path.read_text()[-3000:]}")

    def memory(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise ProcessLookupError(f"no {field}: the server has exited")  # (a zombie's status has no memory lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()


def refusal(reply: httpx.Response) -> str:
    """The start of what a refusal says (its JSON detail where it has one)."""
    try:
        text = str(reply.json()["detail"])
    except (ValueError, KeyError, TypeError):
        text = reply.text
    return "  (" + " ".join(text.split())[:90] + ")"


def measure(server: Server, shape: str, call, bound: float, rises: list) -> None:
    """Send one request (`call`), then read the server's peak and print the request's line."""
    start = time.perf_counter()
    try:
        reply = call()
        status, detail = str(reply.status_code), "" if reply.status_code == 200 else refusal(reply)
    except httpx.HTTPError as err:  # no answer at all (the server died, or a timeout): not a bounded answer
        status, detail = "no answer", f"  ({type(err).__name__})"
    took = time.perf_counter() - start
    try:
        peak = server.memory("VmHWM")
    except (OSError, ProcessLookupError):
        print(f"{shape:<76} {status:>3} {took:6.1f} s  server exited ({server.proc.poll()}): OVER{detail}", flush=True)
        rises.append((float("inf"), shape, True))
        return
    rise, server.peak = peak - server.peak, peak
    over = peak - server.idle
    rises.append((rise, shape, over >= bound))
    print(f"{shape:<76} {status:>3} {took:6.1f} s  peak +{over:,.0f} MB over idle, rise +{rise:,.0f} MB: "
          f"{'ok' if over < bound else 'OVER'}{detail}", flush=True)


def tied_index(path: Path, args, rng) -> tuple[np.ndarray, np.ndarray]:
    """--items items of one 64-bit code with random float16 embeddings; (queries at distance 1, their embeddings)."""
    code = rng.integers(0, 256, 8, np.uint8)
    index = CodeIndex(64, embedding_dtype="float16")
    index.add(np.repeat(code[None], args.items, 0), embeddings=rng.standard_normal((args.items, args.dim)))
    index.save(path)
    queries = np.repeat(code[None], args.queries, 0)
    bit = np.arange(args.queries) % 64
    queries[np.arange(args.queries), bit // 8] ^= (1 << (bit % 8)).astype(np.uint8)  # one bit flipped each
    return queries, rng.standard_normal((args.queries, args.dim)).round(4)


def json_bodies(args) -> tuple[bytes, bytes]:
    """The two bad bodies as bytes, written directly (a list of 8,000,000 ints would take the client 64 MB)."""
    codes = b'{"codes":[' + b"1," * (args.codes - 1) + b'1]}'
    keys = b'{"codes":["' + b"00" * 8 + b'"],' + b",".join(b'"x%x":1' % i for i in range(args.keys)) + b"}"
    return codes, keys


def one_number_rows(rows: int) -> bytes:
    """`{"codes": [one], "embeddings": [[1], [1], ...], "k": 1}` with `rows` rows, as bytes."""
    return b'{"codes":["' + b"0f" * 8 + b'"],"embeddings":[' + b"[1]," * (rows - 1) + b'[1]],"k":1}'


def grey_pngs(shape: tuple[int, int]) -> list:
    """Two greyscale PNGs of `shape` (height, width) pixels, of one colour each (small files)."""
    blobs = []
    for level in (90, 160):
        out = io.BytesIO()
        Image.new("L", shape[::-1], level).save(out, format="PNG")
        blobs.append(("files", (f"grey{level}.png", out.getvalue(), "image/png")))
    return blobs


def at_once(call, times: int = 4):
    """`call` made `times` times concurrently; the first reply that is not a 200, else the last."""
    from concurrent.futures import ThreadPoolExecutor

    def send():
        with ThreadPoolExecutor(times) as pool:
            replies = list(pool.map(lambda _: call(), range(times)))
        return next((r for r in replies if r.status_code != 200), replies[-1])
    return send


def lying_icns(side: int) -> bytes:
    """An ICNS whose one entry is `ic08` (256 x 256, what Pillow's reader reports) holding a side x side
    PNG of one colour (tests/index/test_upload_pixels.py's construction, with a larger PNG)."""
    out = io.BytesIO()
    Image.new("L", (side, side), 128).save(out, format="PNG")  # one colour: 12000 x 12000 is 168 KB
    block = b"ic08" + struct.pack(">I", 8 + len(out.getvalue())) + out.getvalue()
    return b"icns" + struct.pack(">I", 8 + len(block)) + block


def image_run(tmp: Path, log: Path) -> Path:
    """A tiny image run (seconds) and its index: what serve --run needs to decode uploads."""
    rng = np.random.default_rng(0)
    for split, per in (("train", 8), ("test", 2)):
        for name, colour in (("red", (200, 40, 40)), ("blue", (40, 60, 200))):
            folder = tmp / "images" / split / name
            folder.mkdir(parents=True)
            for k in range(per):
                pixels = np.clip(np.array(colour) + rng.normal(0, 25, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{k}.png")
    lbhash(["train", "--data", f"images:{tmp / 'images'}", "--epochs", 1, "--method", "csq", "--bits", 16,
            "--backbone", "resnet8", "--image-size", 32, "--transform", "cifar", "--protocol", "given",
            "--centers", "hadamard", "--lr-step", 0, "--batch-size", 8, "--no-progress", "--out", tmp / "run"], log)
    lbhash(["index", "build", tmp / "run", "--out", tmp / "images-ix"], log)
    return tmp / "run"


def json_requests(tmp: Path, log: Path, args, rises: list) -> None:
    queries, emb = tied_index(tmp / "tied", args, np.random.default_rng(args.seed))
    codes_body, keys_body = json_bodies(args)
    server = Server(tmp / "tied", log, [])
    try:
        server.wait_ready()
        print(f"server 1 (keyless; {args.items:,} items of one 64-bit code, {args.dim}-d float16 embeddings): "
              f"idle VmRSS {server.idle:,.0f} MB, VmHWM {server.peak:,.0f} MB", flush=True)
        hexes = [q.tobytes().hex() for q in queries]
        raw = {"content-type": "application/json"}
        with httpx.Client(base_url=server.url, timeout=600) as client:
            def search(n):
                return lambda: client.post("/search", json={"codes": hexes[:n], "embeddings": emb[:n].tolist(),
                                                            "k": 1, "rescore_factor": 1})
            measure(server, "warm-up: 1 ranked query, k 1, rescore_factor 1", search(1), args.bound_mb, rises)
            measure(server, f"tied classes: {args.queries} queries at distance 1 from {args.items:,} tied items, "
                            "k 1, factor 1", search(args.queries), args.bound_mb, rises)
            measure(server, f"{args.codes:,} bad codes [1, 1, ...] ({len(codes_body) / 1e6:.1f} MB)",
                    lambda: client.post("/search", content=codes_body, headers=raw), args.bound_mb, rises)
            measure(server, f"{args.keys:,} unknown keys ({len(keys_body) / 1e6:.1f} MB)",
                    lambda: client.post("/search", content=keys_body, headers=raw), args.bound_mb, rises)
            rows = one_number_rows(args.rows)
            post_rows = lambda: client.post("/search", content=rows, headers=raw)  # noqa: E731
            what = f"{args.rows:,} one-number rows [[1],[1],...] ({len(rows) / 1e6:.1f} MB)"
            measure(server, what, post_rows, args.bound_mb, rises)
            measure(server, f"{what}, four at once", at_once(post_rows), args.bound_mb, rises)
    finally:
        server.stop()


def image_requests(tmp: Path, log: Path, args, rises: list) -> None:
    run = image_run(tmp, log)
    icns, key = lying_icns(args.side), secrets.token_hex(16)
    small = (tmp / "images" / "test" / "red" / "0.png").read_bytes()
    server = Server(tmp / "images-ix", log, ["--run", run], env={"LBHASH_WRITE_KEY": key})
    try:
        server.wait_ready()
        print(f"server 2 (a write key; a 16-bit image run attached): idle VmRSS {server.idle:,.0f} MB, "
              f"VmHWM {server.peak:,.0f} MB", flush=True)
        with httpx.Client(base_url=server.url, timeout=600) as client:
            def upload(path, blob, name, headers=None):
                return lambda: client.post(path, files=[("files", (name, blob, "image/png"))], headers=headers)
            measure(server, "warm-up: a 32 x 32 PNG to /search/image", upload("/search/image", small, "small.png"),
                    args.bound_mb, rises)
            what = f"ICNS saying 256 x 256 holding a {args.side} x {args.side} PNG ({len(icns) / 1e3:.0f} KB)"
            measure(server, f"{what} to /search/image", upload("/search/image", icns, "icon.icns"), args.bound_mb,
                    rises)
            measure(server, f"{what} to /items/image", upload("/items/image", icns, "icon.icns", {KEY_HEADER: key}),
                    args.bound_mb, rises)
            photos = grey_pngs(args.photo)
            measure(server, f"two greyscale PNGs of {args.photo[0]} x {args.photo[1]} through the run",
                    lambda: client.post("/search/image", files=photos), args.bound_mb, rises)
    finally:
        server.stop()
    lbhash(["export", run, "--out", run / "export"], log)
    server = Server(tmp / "images-ix", log, ["--encoder", run / "export"])
    try:
        server.wait_ready()
        print(f"server 3 (keyless; the run's export): idle VmRSS {server.idle:,.0f} MB, VmHWM {server.peak:,.0f} MB",
              flush=True)
        with httpx.Client(base_url=server.url, timeout=600) as client:
            measure(server, "warm-up: a 32 x 32 PNG to /search/image",
                    lambda: client.post("/search/image", files=[("files", ("small.png", small, "image/png"))]),
                    args.bound_mb, rises)
            post_photos = lambda: client.post("/search/image", files=photos)  # noqa: E731
            what = f"two greyscale PNGs of {args.photo[0]} x {args.photo[1]} through the export"
            measure(server, what, post_photos, args.bound_mb, rises)
            measure(server, f"{what}, four at once", at_once(post_photos), args.bound_mb, rises)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200_000, help="items sharing one class code")
    parser.add_argument("--dim", type=int, default=64, help="their embeddings' width (float16)")
    parser.add_argument("--queries", type=int, default=256, help="query codes at distance 1 from it")
    parser.add_argument("--side", type=int, default=12000, help="the PNG inside the ICNS: side x side pixels")
    parser.add_argument("--codes", type=int, default=8_000_000, help='elements of {"codes": [1, 1, ...]}')
    parser.add_argument("--keys", type=int, default=1_300_000, help="unknown keys of a JSON body")
    parser.add_argument("--rows", type=int, default=4_100_000, help="one-number embedding rows of a JSON body")
    parser.add_argument("--photo", type=lambda v: tuple(map(int, v.split("x"))), default=(6000, 6600),
                        help="HEIGHTxWIDTH of the two greyscale PNGs")
    parser.add_argument("--bound-mb", type=float, default=1024, help="the bound on the peak over idle (MB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, items=2000, dim=16, queries=16, side=600, codes=20_000, keys=20_000, rows=20_000,
                      photo=(300, 330))
    rises: list = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"  # the servers' and the CLI's output, shown only when one fails
        json_requests(Path(tmp), log, args, rises)
        image_requests(Path(tmp), log, args, rises)
    rise, shape, _ = max(rises)
    print(f"largest rise: +{rise:,.0f} MB ({shape}); {sum(r[2] for r in rises)} of {len(rises)} requests OVER "
          f"{args.bound_mb:,.0f} MB over idle")


if __name__ == "__main__":
    main()
