"""Retrieval quality of methods and their _D variants on a real data set, over seeds.

Trains every (method, variant, bits, seed) cell with lbhash's defaults through the library's
resumable cell runner (lbhash.reproduce.runner, parallel worker processes), and writes a
markdown table of mAP@R (mean +/- std over seeds) plus the per-run numbers as JSON lines.

    python benchmarks/bench_quality.py --data features:../shared/data/cifar10-mobilenetv1-features.npz \\
        --protocol cifar10 --methods csq --bits 16,32,64 --seeds 0,1,2 --epochs 50 --out runs/bench-quality
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lbhash.reproduce.runner import Cell, run_cells
from lbhash.runs.train_options import parse_yaml
from _smoke import parse_args  # beside this script


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="a data spec (required but with --smoke)")
    p.add_argument("--protocol", default=None)
    p.add_argument("--methods", default="csq")
    p.add_argument("--variants", default="base,d", help="base, d, or both")
    p.add_argument("--bits", default="16,32,64")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=None, help="default: each method's")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra TrainConfig values for every cell, e.g. lr_step=0 (repeatable)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="runs/bench-quality")
    p.add_argument("--title", default=None)
    args = parse_args(p, data="digits", methods="csq", bits="16", seeds="0,1", epochs=1, workers=1,
                      out="runs/bench-quality-smoke")
    if args.data is None:
        p.error("--data is required")

    out = Path(args.out)
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        extra[key.replace("-", "_")] = parse_yaml(value, f"--set {item}")
    cells = []
    for method in args.methods.split(","):
        for variant in args.variants.split(","):
            for bits in map(int, args.bits.split(",")):
                for seed in map(int, args.seeds.split(",")):
                    lbhash = variant == "d"
                    name = f"{method}{'_D' if lbhash else ''}-{bits}bits-seed{seed}"
                    config = dict(data=args.data, method=method, lbhash=lbhash, bits=bits, seed=seed)
                    if args.protocol:
                        config["protocol"] = args.protocol
                    if args.epochs:
                        config["epochs"] = args.epochs
                    cells.append(Cell(name, {**config, **extra}))
    start = time.perf_counter()
    metrics = run_cells(cells, out, args.workers)
    elapsed = time.perf_counter() - start
    results = [{**cell.config, "map": m["map"], "map_tie_averaged": m["map_tie_averaged"], "topk": m["topk"],
                "lower_bound_ratio": m["lower_bound"]["ratio"], "seconds_per_epoch": m["run"]["seconds_per_epoch"],
                "run_dir": str(out / cell.name)} for cell, m in zip(cells, metrics)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    table = markdown_table(results, args)
    (out / "results.md").write_text(table + f"\n\nwall time {elapsed:.0f} s\n")
    print(table)
    print(f"\nwall time {elapsed:.0f} s; per-run results in {out / 'results.jsonl'}")


def markdown_table(results: list[dict], args) -> str:
    bits = sorted({r["bits"] for r in results})
    rows = {}
    for r in results:
        key = r["method"] + ("_D" if r["lbhash"] else "")
        rows.setdefault(key, {}).setdefault(r["bits"], []).append(r)
    topk = results[0]["topk"]
    title = args.title or f"mAP@{topk} on {args.data} (protocol {args.protocol or 'default'})"
    settings = f"; settings {', '.join(args.set)}" if args.set else ""
    lines = [f"### {title}", "", f"seeds {args.seeds}; epochs {args.epochs or 'default'}{settings}; "
             "mean +/- sample std (ddof=1); s/epoch = mean training time per epoch",
             "", "| method | " + " | ".join(f"{b} bits" for b in bits) + " | s/epoch |",
             "|---|" + "---|" * (len(bits) + 1)]
    for key, by_bits in rows.items():
        cells = []
        for b in bits:
            maps = np.array([r["map"] for r in by_bits.get(b, [])])
            cells.append(f"{maps.mean():.4f} +/- {maps.std(ddof=1 if maps.size > 1 else 0):.4f}" if maps.size else "-")
        secs = np.mean([r["seconds_per_epoch"] for rs in by_bits.values() for r in rs])
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {secs:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
