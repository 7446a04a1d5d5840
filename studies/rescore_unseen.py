"""Issue 58 on unseen classes: a code that finds seen classes and, re-scored, unseen ones too?

Protocol `unseen:3:cifar10` on the MobileNet v1 feature file (lbhash.data.make_split, seed 0):
the training items of the 7 kept classes train a CSQ 64-bit head (`HashEncoder`, the
recommended recipe, `--epochs`); the queries are the 300 queries of the 3 held-out classes,
the database their 5,400 database items (docs/data.md). An index over the database keeps the
features as embeddings. mAP@1000 by class of:

- CSQ's Hamming order, and CSQ re-scored (factors 1, 4 and 16; the top 1000 re-scored);
- ITQ 64 bits fitted on the same training items (unsupervised), Hamming order;
- float kNN: cosine over the features themselves (the ceiling of re-scoring).

    python studies/rescore_unseen.py ../shared/data/cifar10-mobilenetv1-features.npz [--epochs 30]

About 5 minutes on 2 idle cores.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("features")
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    data = load_data(f"features:{args.features}")
    split = make_split(data, "unseen:3:cifar10", 0)
    x, y = data.x, data.labels.argmax(1)
    train, query, db = split.train, split.query, split.database
    print(f"unseen classes {split.unseen_classes.tolist()}: {len(train)} training items, {len(query)} queries, "
          f"{len(db)} database items")
    rows, packed = [], {}
    for method in ("csq", "itq"):
        enc = HashEncoder(method=method, bits=64, epochs=args.epochs if method == "csq" else None, seed=0,
                          progress=False).fit(x[train], y[train])
        packed[method] = enc.encode(x[query]), enc.encode(x[db])  # FAISS bit layout
        rows.append((f"{method.upper()} 64 bits, Hamming order",
                     mean_average_precision(*packed[method], data.labels[query], data.labels[db], topk=1000,
                                            bits=64)))
    q_packed, db_packed = packed["csq"]
    index = CodeIndex(64)
    index.add(db_packed, ids=np.arange(len(db)), embeddings=x[db])
    for factor in (1, 4, 16):
        top = blended_search(index, Queries(q_packed, x[query]), 1000, factor=factor).ids
        aps = [average_precision(y[db][top[q][top[q] >= 0]] == y[query][q]) for q in range(len(query))]
        rows.insert(1 + (factor > 1) + (factor > 4), (f"CSQ re-scored, factor {factor}", float(np.mean(aps))))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cosine = unit[query] @ unit[db].T
    order = np.argsort(-cosine, axis=1, kind="stable")[:, :1000]
    rows.append(("float kNN (cosine over the features)",
                 float(np.mean([average_precision(y[db][order[q]] == y[query][q]) for q in range(len(query))]))))
    print("| search | mAP@1000, unseen classes |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value:.4f} |")


if __name__ == "__main__":
    main()
