"""Codes for the classes nobody trained on, in one run (issue 44; docs/methods.md, "Codes for
classes nobody trained on"): CSQ_D with the neighbourhood term against CSQ_D and ITQ on seen and
unseen classes, and the label-free Distill code against ITQ and the sign of the features.

    python studies/bench_beyond.py --quick

--quick: seed 0, 64 bits, the CIFAR-10 MobileNet features (../shared/data, or --data). Seen and
unseen: protocol unseen:3:cifar10, 30 epochs, mAP@all (%). Label-free: protocol cifar10,
mAP@1000 (%); sign1024+rescore is the sign of the 1,024 standardised features, its top 4,000
by Hamming re-ranked by the float cosine. The weight and the student (cosine) are the ones
chosen on validation classes (studies/beyond_study.py curve; docs/results/beyond/curve.md and
cosine/curve.md), never on these.
The last two lines:

    seen+unseen: new seen=S unseen=U | csq_D seen=S1 unseen=U1 | itq seen=S2 unseen=U2
    label-free: new map@1000=M | itq64=M1 | itq128=M2 | sign1024+rescore=M3
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from beyond_study import (TOP, hamming_scores, ranked_map, rescored, seen_unseen, split_parts, standardised,
                          train_codes, unit_rows)
from lbhash.data import load_data

# chosen on validation classes, seeds 0-2, among the tanh curve and the cosine student
# (docs/results/beyond/curve.md, docs/results/beyond/cosine/curve.md)
CHOSEN_WEIGHT, CHOSEN_STUDENT = 10.0, "cosine"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-mobilenetv1-features.npz"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="seed 0, 64 bits (the only size so far)")
    p.add_argument("--data", default=f"features:{DATA}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight", type=float, default=CHOSEN_WEIGHT)
    p.add_argument("--student", choices=("tanh", "cosine"), default=CHOSEN_STUDENT)
    p.add_argument("--epochs", type=int, default=30)
    args = p.parse_args()
    start = time.perf_counter()
    dataset = load_data(args.data)
    common = {"data": args.data, "bits": 64}
    unseen = {}
    for name, values in (("new", {"method": "csq", "lbhash": True, "neighbourhood_weight": args.weight,
                                  "neighbourhood_student": args.student, "epochs": args.epochs}),
                         ("csq_D", {"method": "csq", "lbhash": True, "epochs": args.epochs}),
                         ("itq", {"method": "itq"})):
        unseen[name] = seen_unseen(dataset, {**common, **values}, "unseen:3:cifar10", args.seed)
        print(f"{name}: seen {unseen[name][0]:.4f} unseen {unseen[name][1]:.4f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)

    parts = split_parts(dataset, "cifar10", args.seed)
    q, db = parts["query"], parts["database"]
    relevant = (dataset.labels[q].astype(np.float32) @ dataset.labels[db].astype(np.float32).T) > 0
    top = min(TOP, len(db))
    label_free = {}
    for name, method, bits in (("new", "distill", 64), ("itq64", "itq", 64), ("itq128", "itq", 128)):
        codes = train_codes(dataset, {**common, "protocol": "cifar10", "seed": args.seed, "bits": bits,
                                      "method": method}, {"query": q, "database": db})
        label_free[name] = ranked_map(hamming_scores(codes["query"], codes["database"]), relevant, top)
        print(f"{name}: map@1000 {label_free[name]:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
    x = standardised(dataset, parts["train"])
    signs_q, signs_db = np.where(x[q] >= 0, 1, -1), np.where(x[db] >= 0, 1, -1)
    cosine = unit_rows(x[q]) @ unit_rows(x[db]).T
    label_free["sign"] = ranked_map(rescored(hamming_scores(signs_q, signs_db), cosine), relevant, top)
    print(f"total {time.perf_counter() - start:.0f} s, weight {args.weight:g}, student {args.student}, seed {args.seed}")

    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    print("seen+unseen: " + " | ".join(f"{n} seen={pct(unseen[n][0])} unseen={pct(unseen[n][1])}"
                                       for n in ("new", "csq_D", "itq")))
    print(f"label-free: new map@1000={pct(label_free['new'])} | itq64={pct(label_free['itq64'])} | "
          f"itq128={pct(label_free['itq128'])} | sign1024+rescore={pct(label_free['sign'])}")


if __name__ == "__main__":
    main()
