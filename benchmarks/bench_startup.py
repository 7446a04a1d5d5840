"""Start-up time of the commands that need no model and of those that only read a trained run,
against importing torch in the same run.

    python benchmarks/bench_startup.py [--repeat 5]

Builds a small codes file and index in a temporary folder and trains a digits run there
(`lbhash train --data digits --method csq --bits 16 --epochs 2`, with its index and a file of 5
digits rows), then times (median of --repeat fresh processes, wall-clock and CPU seconds)
`lbhash --help`, `index build`, `index info`, `search --codes` and `evaluate`; then, on the
run, `train --resume` (finished: nothing to do), `encode` of the 5 rows, `search --features
--run` and `index info`, then `search --features --run` once more after `lbhash export run` (the run's
current export encodes for it: no torch); and `python -c "import torch"` as the reference. A second line
times torch's import alone, without the collection Python runs at exit over all of its objects
(`gc.freeze` at exit, as the `lbhash` command does; lbhash.cli): the least a command that imports
torch can take. CPU seconds (user + system) approach the wall-clock time of an idle machine
when the machine is busy. The first line says how many of lbhash's modules have no current bytecode
(`__pycache__`): with PYTHONDONTWRITEBYTECODE set, Python compiles those in every process (`make install`
compiles them once).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lbhash.codes_file import save_codes_file
from _smoke import parse_args  # beside this script

COMMANDS = [["--help"], ["index", "build", "codes.npz", "--out", "idx", "--overwrite"], ["index", "info", "idx"],
            ["search", "idx", "--codes", "q.npy", "-k", "3"], ["evaluate", "codes.npz"]]
RUN_COMMANDS = [["train", "--out", "run", "--resume"],
                ["encode", "run", "--data", "features:rows5.npy", "--out", "rows5.npz", "--overwrite"],
                ["search", "run-idx", "--features", "rows5.npy", "--run", "run", "-k", "3"],
                ["index", "info", "run-idx"]]
EXPORTED_SEARCH = RUN_COMMANDS[2]  # timed again once the run has its export (lbhash export)
RUN = "import sys; from lbhash.cli import main; main(sys.argv[1:])"
TORCH_ALONE = "import atexit, gc, torch; atexit.register(gc.freeze)"


def stale_bytecode() -> tuple[int, int]:
    """(lbhash's modules whose bytecode is missing or older than their source, all of its modules)."""
    import lbhash

    sources = sorted(Path(lbhash.__file__).parent.rglob("*.py"))
    stale = 0
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        try:
            header = cached.read_bytes()[:16]
        except OSError:
            stale += 1
            continue
        stat = source.stat()  # a timestamp pyc's header: magic, flags, source mtime, source size
        stale += header[8:16] != (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + \
            (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return stale, len(sources)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_seconds(args: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of `repeat` fresh processes of python `args`."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), children_cpu()
        subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, check=True)
        wall.append(time.perf_counter() - start)
        cpu.append(children_cpu() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def lbhash(args: list[str], cwd: Path) -> None:
    subprocess.run([sys.executable, "-c", RUN, *args], cwd=cwd, capture_output=True, check=True)


def setup(work: Path, warm: bool = True) -> None:
    """The codes file, index and queries of COMMANDS; the digits run, its index and 5 rows of RUN_COMMANDS."""
    from lbhash.data import load_digits

    rng = np.random.default_rng(0)
    queries = rng.integers(0, 256, (5, 8), dtype=np.uint8)
    database = rng.integers(0, 256, (1000, 8), dtype=np.uint8)
    save_codes_file(work / "codes.npz", queries, database, rng.integers(0, 5, 5), rng.integers(0, 5, 1000))
    np.save(work / "q.npy", queries)
    np.save(work / "rows5.npy", load_digits().x[:5])
    lbhash(COMMANDS[1], work)
    lbhash(COMMANDS[4], work)  # numba compiles the metrics' kernels once after an install
    lbhash(["train", "--data", "digits", "--method", "csq", "--bits", "16", "--epochs", "2", "--out", "run",
            "--no-progress"], work)
    lbhash(["index", "build", "run", "--out", "run-idx"], work)
    for command in RUN_COMMANDS if warm else ():  # not with --smoke
        lbhash(command, work)  # the first run of each: compiled kernels and file caches in place


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_args(parser, repeat=1)
    repeat = args.repeat
    stale, modules = stale_bytecode()
    print(f"lbhash modules without current bytecode: {stale} of {modules}; PYTHONDONTWRITEBYTECODE "
          f"{'set: each process compiles those' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'unset'}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup(work, warm=not args.smoke)
        torch_s, torch_cpu = median_seconds(["-c", "import torch"], work, repeat)
        print(f"reference: python -c 'import torch': {torch_s:.2f} s (CPU {torch_cpu:.2f} s)")
        alone_s, alone_cpu = median_seconds(["-c", TORCH_ALONE], work, repeat)
        print(f"torch's import without the exit collection: {alone_s:.2f} s ({alone_s / torch_s:.2f} x import torch); "
              f"CPU {alone_cpu:.2f} s ({alone_cpu / torch_cpu:.2f} x)")
        for command in COMMANDS + RUN_COMMANDS:
            seconds, cpu = median_seconds(["-c", RUN, *command], work, repeat)
            print(f"lbhash {' '.join(command)}: {seconds:.2f} s ({seconds / torch_s:.2f} x import torch); "
                  f"CPU {cpu:.2f} s ({cpu / torch_cpu:.2f} x)")
        lbhash(["export", "run"], work)  # RUN/export: --run then encodes through it, without torch
        lbhash(EXPORTED_SEARCH, work)
        seconds, cpu = median_seconds(["-c", RUN, *EXPORTED_SEARCH], work, repeat)
        print(f"lbhash {' '.join(EXPORTED_SEARCH)}, the run exported: {seconds:.2f} s ({seconds / torch_s:.2f} x "
              f"import torch); CPU {cpu:.2f} s ({cpu / torch_cpu:.2f} x)")


if __name__ == "__main__":
    main()
