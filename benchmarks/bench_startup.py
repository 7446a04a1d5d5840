"""Start-up time of the commands that need no model, against importing torch in the same run.

    python benchmarks/bench_startup.py [--repeat 5]

Builds a small codes file and index in a temporary folder, then times (median of --repeat
fresh processes) `lbhash --help`, `index build`, `index info`, `search --codes` and `evaluate`,
and `python -c "import torch"` as the reference: a command that imported torch would take at
least that long.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lbhash.codes_file import save_codes_file

COMMANDS = [["--help"], ["index", "build", "codes.npz", "--out", "idx", "--overwrite"], ["index", "info", "idx"],
            ["search", "idx", "--codes", "q.npy", "-k", "3"], ["evaluate", "codes.npz"]]
RUN = "import sys; from lbhash.cli import main; main(sys.argv[1:])"


def median_seconds(args: list[str], cwd: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rng = np.random.default_rng(0)
        queries = rng.integers(0, 256, (5, 8), dtype=np.uint8)
        database = rng.integers(0, 256, (1000, 8), dtype=np.uint8)
        save_codes_file(work / "codes.npz", queries, database, rng.integers(0, 5, 5), rng.integers(0, 5, 1000))
        np.save(work / "q.npy", queries)
        subprocess.run([sys.executable, "-c", RUN, *COMMANDS[1]], cwd=work, capture_output=True, check=True)
        subprocess.run([sys.executable, "-c", RUN, *COMMANDS[4]], cwd=work, capture_output=True, check=True)
        torch_s = median_seconds(["-c", "import torch"], work, repeat)
        print(f"reference: python -c 'import torch': {torch_s:.2f} s")
        for command in COMMANDS:
            seconds = median_seconds(["-c", RUN, *command], work, repeat)
            print(f"lbhash {' '.join(command)}: {seconds:.2f} s ({seconds / torch_s:.2f} x import torch)")


if __name__ == "__main__":
    main()
