"""Issue 86, item 3: does the default two-code ranking keep what the instance code knows on unseen classes?

Protocol `unseen:K:cifar10` on the MobileNet v1 feature file (lbhash.data.make_split, `--seed`): a CSQ
64-bit class code trained (`HashEncoder`, the recommended recipe, 30 epochs) on the kept classes' training
items, the index's instance code (256-bit ITQ of the same items' features, `InstanceTransform.fit`, as
`lbhash index build` makes it for a feature run), no float rows. mAP@1000 by class on the held-out
classes' queries and database (unseen) and on the kept classes' own queries and database (seen), of:
ITQ 64 bits, CSQ 64 bits and the 256-bit instance code alone (Hamming order), the two-code ranking at
the fixed LOOKS_LIKE_CODES, and at the default (left out: each query's own, lbhash.index.blend,
`agreeing_looks_like`). Seed 1 chose the default's constants (validation); seed 0 reports.

    python studies/unseen_ranking.py ../shared/data/cifar10-mobilenetv1-features.npz --seed 1

About 5 minutes a seed on 2 idle cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ranking import average_precision  # noqa: E402
from lbhash import HashEncoder  # noqa: E402
from lbhash.data import load_data, make_split  # noqa: E402
from lbhash.evaluate import mean_average_precision  # noqa: E402
from lbhash.index import CodeIndex, Queries, blended_search  # noqa: E402
from lbhash.instance import LOOKS_LIKE_CODES, InstanceTransform  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("features")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--held-out", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    data = load_data(f"features:{args.features}")
    split = make_split(data, f"unseen:{args.held_out}:cifar10", args.seed)
    x, y, labels = data.x, data.labels.argmax(1), data.labels
    train = x[split.train]
    csq = HashEncoder(method="csq", bits=64, epochs=args.epochs, seed=0, progress=False).fit(train, y[split.train])
    itq = HashEncoder(method="itq", bits=64, seed=0, progress=False).fit(train, y[split.train])
    transform = InstanceTransform.fit(train, 256, "itq", 0)
    print(f"seed {args.seed}: unseen classes {split.unseen_classes.tolist()}; {len(split.train)} training items")
    print("| items | ITQ 64 | CSQ 64 | instance 256 alone | two codes, looks_like 0.7 | two codes, default |")
    print("|---|---|---|---|---|---|")
    for name, q, db in (("unseen", split.query, split.database), ("seen", split.seen_query, split.seen_database)):
        row = [mean_average_precision(e.encode(x[q]), e.encode(x[db]), labels[q], labels[db], topk=1000, bits=64)
               for e in (itq, csq)]
        qi, di = transform.apply(x[q]), transform.apply(x[db])
        row.append(mean_average_precision(qi, di, labels[q], labels[db], topk=1000, bits=256))
        index = CodeIndex(64, instance_bits=256)
        index.add(csq.encode(x[db]), ids=np.arange(len(db)), instance=di)
        for looks_like in (LOOKS_LIKE_CODES, None):
            top = blended_search(index, Queries(csq.encode(x[q]), instance=qi), 1000, looks_like=looks_like).ids
            row.append(float(np.mean([average_precision(y[db][top[r][top[r] >= 0]] == y[q][r])
                                      for r in range(len(q))])))
        print(f"| {name} ({len(q)} queries, {len(db)} items) | " + " | ".join(f"{v:.4f}" for v in row) + " |",
              flush=True)


if __name__ == "__main__":
    main()
