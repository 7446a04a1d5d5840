"""Start-up of `lbhash serve` with an export (`--encoder`, ONNX Runtime, no torch) against the
run itself (`--run`, torch), and the size of the environments that serve them.

    python benchmarks/bench_serve_startup.py [--repeat 5] [--python-encoder .venv-serve/bin/python]

Trains a digits run (CSQ, 32 bits, 3 epochs) in a temporary folder, exports it and indexes its
database (into a folder beside the run: RUN/export would make `--run` encode through it), then starts
`lbhash serve IDX --encoder EXPORT` and `lbhash serve IDX --run RUN`
in turn (--repeat times each, interleaved) on 127.0.0.1, and times each from the process's
start to its first answer on /health (the port is bound before the index and the model are
loaded, so the first answer waits for all of it). `--python-encoder` serves the export with
another interpreter (the torch-free environment of `make test-serve-env`). Prints the median
and the range of each, and the size of each interpreter's environment (du of its prefix).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from _smoke import parse_args  # beside this script

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def start_time(python: str, index_dir: Path, *args) -> float:
    import os

    from serve_helpers import SERVE_CODE, free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    started = time.monotonic()
    proc = subprocess.Popen([python, "-c", SERVE_CODE, "serve", str(index_dir), "--host", "127.0.0.1", "--port",
                             str(port), "--read-only", *map(str, args)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.error
    import urllib.request

    try:
        while time.monotonic() - started < 120:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.02)
        raise RuntimeError("no answer within 120 s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def prefix_size(python: str) -> str:
    prefix = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                            check=True).stdout.strip()
    return subprocess.run(["du", "-sh", prefix], capture_output=True, text=True).stdout.split()[0] + f" ({prefix})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python-encoder", default=sys.executable)
    args = parse_args(parser, repeat=1)
    from lbhash.cli import main as lbhash

    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        run, idx = Path(tmp) / "run", Path(tmp) / "idx"
        RunDirectory(run).train(TrainConfig(data="digits", method="csq", bits=32, epochs=1 if args.smoke else 3, hidden=(64,),
                          progress=False))
        RunDirectory(run).export(Path(tmp) / "export")  # not RUN/export, which --run would encode through
        lbhash(["index", "build", str(run), "--out", str(idx)], standalone_mode=False)
        times = {"--encoder": [], "--run": []}
        for _ in range(args.repeat):
            times["--encoder"].append(start_time(args.python_encoder, idx, "--encoder", Path(tmp) / "export"))
            times["--run"].append(start_time(sys.executable, idx, "--run", run))
    for name, values in times.items():
        print(f"serve {name:9s}: median {statistics.median(values):.2f} s to the first answer "
              f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} starts)")
    print(f"environment of --encoder: {prefix_size(args.python_encoder)}")
    print(f"environment of --run:     {prefix_size(sys.executable)}")


if __name__ == "__main__":
    main()
