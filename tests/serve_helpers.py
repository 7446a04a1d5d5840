"""`lbhash serve` in a child process on 127.0.0.1 (a free port, bounded waits), with only the
standard library on the client side (`ServeProcess`, and `Server` for the service tests):
tests/service/test_serve_env.py runs it in an environment
without torch or httpx. The child reports at exit whether torch was imported."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
START_TIMEOUT_S = 60
# the base URL of the tests' FastAPI TestClients: the service answers only requests whose Host
# names it (lbhash.service.access.HostNames), and TestClient's own "testserver" does not
LOCAL = "http://localhost"
# run in the server process: at exit, one line saying whether torch was ever imported
SERVE_CODE = ("import atexit, sys; atexit.register(lambda: sys.stderr.write("
              "f'torch imported: {\"torch\" in sys.modules}\\n')); from lbhash.cli import main; main()")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post_json(url: str, body: dict, timeout: float = 30) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# How far the blended ranking through an export may stand from the run's (docs/export.md, "The ranking"):
# the export's float32 outputs differ from torch's by rounding (ONNX Runtime sums in another order), so
# a score moves by a few 1e-6 and two hits whose run scores are closer than that can change places
# (measured on the README's photo run: 2 of 400 queries at k 10, swapped hits at most 9.6e-8 apart).
SCORE_TOLERANCE = 2e-5  # |served score - run score| at each rank (measured at most 5.9e-6)
SWAP_TOLERANCE = 1e-6   # hits may change places only where the run's scores are this close


def same_ranking(got: list[dict], want: list[dict]) -> bool:
    """Whether the hits `got` (JSON, each with id, distance, score, ...) are the run's `want` but for hits
    that trade places within SWAP_TOLERANCE of each other's score (or of the last score, at the cut):
    each hit's other fields exactly as the run gave them for its id, the scores at each rank within
    SCORE_TOLERANCE. Raises AssertionError saying what differs."""
    assert len(got) == len(want), (len(got), len(want))
    by_id = {h["id"]: h for h in want}
    assert len({h["id"] for h in got}) == len(got), got
    for rank, (g, w) in enumerate(zip(got, want)):
        assert abs(g["score"] - w["score"]) <= SCORE_TOLERANCE, (rank, g, w)
        own = by_id.get(g["id"])
        if own is None:  # in at the cut: tied with the run's last hit
            assert abs(g["score"] - want[-1]["score"]) <= SWAP_TOLERANCE, (rank, g, want[-1])
            continue
        assert {k: v for k, v in g.items() if k != "score"} == {k: v for k, v in own.items() if k != "score"}, (g, own)
        assert abs(own["score"] - w["score"]) <= SWAP_TOLERANCE, (rank, g, w)  # a place traded within a tie
    return True


def post_files(url: str, files: list[tuple[str, bytes]], fields: dict | None = None,
               timeout: float = 60) -> tuple[int, dict]:
    """A multipart/form-data POST of `files` (name, bytes) under the field `files`, beside `fields`."""
    boundary = f"lbhash-{os.urandom(8).hex()}"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
             for key, value in (fields or {}).items()]
    parts += [f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
              f"Content-Type: application/octet-stream\r\n\r\n".encode() + blob + b"\r\n" for name, blob in files]
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, body, {"content-type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class ServeProcess:
    """`lbhash serve INDEX --host 127.0.0.1 --port FREE ARGS...`; `stop()` ends it with SIGTERM
    and returns what it printed on stderr."""

    def __init__(self, index_dir, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE_CODE, "serve", str(index_dir), "--host", "127.0.0.1",
                                      "--port", str(self.port), *map(str, args)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = self.started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lbhash serve exited: {self.proc.stderr.read().decode()[-800:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    self.start_s = time.monotonic() - self.started
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"lbhash serve did not answer within {START_TIMEOUT_S} s")

    def mapped_files(self) -> str:
        """The files mapped into the server's memory (/proc/PID/maps)."""
        return Path(f"/proc/{self.proc.pid}/maps").read_text()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        return err


class Server:
    """`lbhash serve` in a child process; started and stopped by the test, bounded waits."""

    def __init__(self, index_dir: Path, port: int, *extra: str):
        self.index_dir, self.port, self.proc, self.extra = index_dir, port, None, [str(e) for e in extra]
        self.url, self.log = f"http://127.0.0.1:{port}", ""

    def start(self):
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        code = "from lbhash.cli.serve import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(self.index_dir), "--host", "127.0.0.1",
                                      "--port", str(self.port), *self.extra], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()[-500:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"server did not answer within {START_TIMEOUT_S} s")

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        if self.proc is not None and not self.proc.stderr.closed:
            self.log += self.proc.stderr.read().decode(errors="replace")  # what the server printed
            self.proc.stderr.close()
