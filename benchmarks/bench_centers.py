"""Min pairwise Hamming distance of every center generator, next to the reference table of docs/results/centers.md.

For bits in {16, 32, 48, 64} x classes in {10, 100}, builds each kind without the disk cache
(seed 0) and prints a markdown table: min distance per kind ("-" where the kind does not
apply), the kind `auto` picked, the Plotkin bound, the reference values and the time
each row took.

    python benchmarks/bench_centers.py [--bits 16,32,48,64] [--classes 10,100] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

from lbhash.centers import center_report, plotkin_bound, select_centers
from _smoke import parse_args  # beside this script

KINDS = ("hadamard", "bch", "reed_solomon", "random", "auto")
# Reference values (docs/results/centers.md): (bits, classes) -> eBCH, RS GF(16), Hadamard/CSQ, random.
REFERENCE = {
    (16, 10): (8, 6, 8, 6), (16, 100): (6, 4, 2, 2), (32, 10): (16, 12, 16, 12),
    (32, 100): (12, 11, 8, 7), (48, 100): (18, 17, None, 13), (64, 100): (32, None, 32, 20),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", default="16,32,48,64")
    parser.add_argument("--classes", default="10,100")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, bits="16", classes="10")
    bits_list = [int(b) for b in args.bits.split(",")]
    classes_list = [int(c) for c in args.classes.split(",")]

    print("| bits | C | hadamard | bch | reed_solomon | random | auto (kind) | Plotkin "
          "| reference eBCH / RS / Had / random | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for bits in bits_list:
        for classes in classes_list:
            start = time.perf_counter()
            cells = []
            for kind in KINDS:
                try:
                    centers, made_by = select_centers(bits, classes, kind, args.seed, cache=False)
                except ValueError:
                    cells.append("-")
                    continue
                dist = center_report(centers).min_distance
                cells.append(f"{dist} ({made_by})" if kind == "auto" else str(dist))
            spec = REFERENCE.get((bits, classes))
            spec_text = " / ".join("-" if v is None else str(v) for v in spec) if spec else "n/a"
            print(f"| {bits} | {classes} | {' | '.join(cells)} | {plotkin_bound(bits, classes)} "
                  f"| {spec_text} | {time.perf_counter() - start:.1f} |", flush=True)


if __name__ == "__main__":
    main()
