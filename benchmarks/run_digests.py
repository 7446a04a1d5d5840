"""Digests of five `lbhash train` runs on digits, to show that a change leaves training
bit-identical: run it at two commits and diff the outputs.

    python benchmarks/run_digests.py OUT > a.json   # at one commit (OUT: a new folder)
    python benchmarks/run_digests.py --smoke        # runs c and e only, in a temporary folder
    python benchmarks/run_digests.py OUT2 > b.json  # at the other
    diff a.json b.json                              # no output: identical

The runs: CSQ_D keeping its best validation epoch (evaluated every epoch), DSDH, ITQ,
GreedyHash_D under unseen:2, and CSQ trained 2 epochs then resumed to 4. Every array of every
.npz, every member of every .pt, the other files, the log records and metrics.json are
digested, leaving out wall-clock seconds (and the manifest, which holds the files' hashes).
About 40 s on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

RUNS = {
    "a": "--method csq --lbhash --bits 16 --epochs 3 --hidden 64 --validation 0.1 --select best-val --eval-every 1",
    "b": "--method dsdh --bits 16 --epochs 2 --hidden 64",
    "c": "--method itq --bits 16",
    "d": "--method greedyhash --lbhash --bits 32 --epochs 2 --protocol unseen:2",
    "e": "--method csq --bits 16 --epochs 2",
}
TIMES = ("seconds", "seconds_per_epoch", "encode_seconds")


def lbhash(*args: str) -> None:
    command = Path(sys.executable).with_name("lbhash")  # the command this Python installed
    subprocess.run([str(command), *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def without_times(value):
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIMES}
    return [without_times(v) for v in value] if isinstance(value, list) else value


def digest(path: Path):
    short = lambda data: hashlib.sha256(data).hexdigest()[:16]  # noqa: E731
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {n: short(np.ascontiguousarray(z[n]).tobytes()) for n in z.files if n not in TIMES}
    if path.suffix == ".pt":
        with zipfile.ZipFile(path) as z:  # members without the archive's folder name
            return {n.split("/", 1)[1]: short(z.read(n)) for n in sorted(z.namelist())}
    if path.name == "log.jsonl":
        return [without_times(json.loads(line)) for line in path.read_text().splitlines()]
    if path.name == "metrics.json":
        return without_times(json.loads(path.read_text()))
    return short(path.read_bytes())


def main(out: Path, runs: dict[str, str] = RUNS) -> None:
    for name, flags in runs.items():
        lbhash("train", "--data", "digits", *flags.split(), "--out", str(out / name))
    lbhash("train", "--out", str(out / "e"), "--resume", "--epochs", "4")
    files = sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p.name != "manifest.json")
    print(json.dumps({str(p.relative_to(out)): digest(p) for p in files}, indent=1, sort_keys=True))


if __name__ == "__main__":
    if sys.argv[1:] == ["--smoke"]:  # the closed-form run and the resumed one
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "out", {name: RUNS[name] for name in "ce"})
        sys.exit()
    if len(sys.argv) != 2 or Path(sys.argv[1]).exists():
        sys.exit("usage: python benchmarks/run_digests.py OUT (a new folder) | --smoke")
    main(Path(sys.argv[1]))
