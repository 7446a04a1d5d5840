"""The journey on a CUDA device (issue 26): train -> encode -> evaluate -> index -> search, and
whether the codes of one item agree along every path when the GPU computes under bf16.

    python studies/gpu_chain.py --features data/features-slice.npz --images data/images.tar --out DIR

For a feature run (the shared CIFAR-10 MobileNet features as stored: uint8 with a scale) and an
image run (resnet20, channels_last, on a CIFAR-10 JPEG tarball), both trained on the GPU under
bf16-mixed (the run's codes are written in float32), it encodes the run's database again four
ways (GPU bf16, GPU float32, CPU float32,
and for features the stored uint8 rows through the input contract) and counts the bits that
differ from the codes the run stored, then searches an index of the run's codes with the rows.
It writes gpu_chain.json and gpu_chain.md into --out. No part is asserted: it measures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def lbhash(*args) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lbhash.cli", *map(str, args)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"lbhash {' '.join(map(str, args))}: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start, done.stdout


def differing_bits(a: np.ndarray, b: np.ndarray) -> dict:
    diff = np.unpackbits(a ^ b, axis=1).sum(axis=1)
    return {"items_differing": int((diff > 0).sum()), "bits_differing": int(diff.sum()), "items": int(len(a)),
            "max_bits_per_item": int(diff.max()) if len(diff) else 0}


def chain(kind: str, data: str, train_args: list[str], work: Path, stored_rows=None) -> dict:
    from lbhash.codes_file import load_codes_file

    run = work / f"{kind}-run"
    seconds, _ = lbhash("train", "--data", data, "--out", run, "--accelerator", "gpu", "--precision", "bf16-mixed",
                        "--no-progress", *train_args)
    metrics = json.loads((run / "metrics.json").read_text())
    codes = load_codes_file(run / "codes.npz")
    row = {"train_seconds": round(seconds, 1), "seconds_per_epoch": metrics["run"]["seconds_per_epoch"],
           "map": metrics["map"], "topk": metrics["topk"], "n_db": metrics["n_db"], "encode": {}}
    for label, extra in (("gpu bf16", ["--accelerator", "gpu"]),
                         ("gpu float32", ["--accelerator", "gpu", "--precision", "32-true"]),
                         ("cpu float32", [])):
        out = work / f"{kind}-{label.replace(' ', '-')}.npz"
        seconds, _ = lbhash("encode", run, "--part", "database", "--out", out, "--no-progress", *extra)
        again = load_codes_file(out, need=())
        row["encode"][label] = {"seconds": round(seconds, 1), **differing_bits(again["codes"], codes["db_codes"])}
    if stored_rows is not None:
        rows_file = work / "rows.npy"
        ids = codes["db_ids"][:1000]
        np.save(rows_file, stored_rows[ids])
        out = work / "rows.npz"
        lbhash("encode", run, "--data", f"features:{rows_file}", "--out", out, "--accelerator", "gpu", "--no-progress")
        row["encode"]["stored uint8 rows, gpu bf16"] = differing_bits(load_codes_file(out, need=())["codes"],
                                                                      codes["db_codes"][:1000])
        lbhash("index", "build", run, "--out", work / f"{kind}-idx")
        _, text = lbhash("search", work / f"{kind}-idx", "--features", rows_file, "--run", run, "-k", "1", "--json")
        hits = json.loads(text)
        row["search_own_code_at_distance_0"] = sum(h["distances"][0] == 0 for h in hits) / len(hits)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", type=Path, required=True)
    p.add_argument("--images", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "date": datetime.date.today().isoformat(), "rows": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stored = np.load(args.features)["feat"]
        for kind, data, train_args, rows in (
                ("features", f"features:{args.features}",
                 ["--protocol", "given", "--method", "csq", "--lbhash", "--bits", "64", "--epochs", "5"], stored),
                ("images", f"images:{args.images}",
                 ["--protocol", "given", "--method", "csq", "--lbhash", "--bits", "32", "--epochs", "3",
                  "--backbone", "resnet20"], None)):
            try:
                result["rows"][kind] = chain(kind, data, train_args, work, rows)
            except Exception as err:  # recorded, and the other part still runs
                result["rows"][kind] = {"failed": str(err)}
            (args.out / "gpu_chain.json").write_text(json.dumps(result, indent=1))
    lines = [f"# GPU chain, {result['device']}, torch {result['torch']}, {result['date']}", ""]
    for kind, row in result["rows"].items():
        lines.append(f"## {kind}\n\n```\n{json.dumps(row, indent=1)}\n```\n")
    (args.out / "gpu_chain.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
