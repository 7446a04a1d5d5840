"""Issue 60, item 8: is `linear`'s ridge=0.1 (chosen on a validation split of the CIFAR-10
MobileNet features, docs/methods.md "Baselines") the choice on other data too? Validation only:
per seed, 10% of the training items of the protocol (per class for single-label data, at random
for multi-label data) are the queries, the other 90% are fitted and are the database; mAP@all of
those queries, at each ridge. The test queries are never read.

    python studies/advice_ridge.py --data features:FILE --protocol cifar10 --out CSV [--seeds 0,1,2]

Writes CSV (one row per seed and ridge) and prints the mean over seeds of each ridge.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from lbhash.data import ArrayDataset, load_data, make_split
from lbhash.evaluate import mean_average_precision
from lbhash.train.config import make_config
from lbhash.train.forward import encode
from lbhash.train.fit import prepare, train_to_end

RIDGES = (0.01, 0.1, 1.0, 10.0)


def validation_set(dataset, protocol: str, seed: int, share: float = 0.1) -> ArrayDataset:
    """The protocol's training items, 10% of them marked as queries (`is_test`): protocol
    `given` then fits the other 90% and searches the queries among them."""
    train = make_split(dataset, protocol, seed).train
    labels = dataset.labels[train]
    rng = np.random.default_rng(seed)
    held = np.zeros(len(train), bool)
    if dataset.multi_label:
        held[rng.choice(len(train), int(round(share * len(train))), replace=False)] = True
    else:
        for c in range(labels.shape[1]):
            rows = np.flatnonzero(labels[:, c])
            held[rng.choice(rows, int(np.ceil(share * len(rows))), replace=False)] = True
    return ArrayDataset(dataset.x[train], labels, held, f"{dataset.name} (validation, seed {seed})")


def validation_map(data: str, dataset: ArrayDataset, seed: int, ridge: float, bits: int) -> float:
    cfg = make_config({"data": data, "protocol": "given", "seed": seed, "bits": bits, "method": "linear",
                       "method_options": {"ridge": ridge}, "validation": 0.0, "progress": False, "test": False})
    trainer = prepare(cfg, None, dataset, False, None)
    train_to_end(trainer)
    model = trainer.learner.model.eval()
    q, db = np.flatnonzero(dataset.is_test), np.flatnonzero(~dataset.is_test)
    cq = encode(model, trainer.exp.dataset, q, trainer.options)
    cdb = encode(model, trainer.exp.dataset, db, trainer.options)
    return float(mean_average_precision(cq, cdb, dataset.labels[q], dataset.labels[db]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--protocol", default="cifar10")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--bits", type=int, default=64)
    args = p.parse_args()
    dataset = load_data(args.data)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        val = validation_set(dataset, args.protocol, seed)
        for ridge in RIDGES:
            rows.append({"data": args.data.rsplit("/", 1)[-1], "protocol": args.protocol, "bits": args.bits,
                         "seed": seed, "ridge": ridge, "validation_map": validation_map(args.data, val, seed, ridge,
                                                                                        args.bits)})
            print(f"seed {seed} ridge {ridge:g}: validation mAP@all {rows[-1]['validation_map']:.4f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for ridge in RIDGES:
        v = [r["validation_map"] for r in rows if r["ridge"] == ridge]
        print(f"ridge {ridge:g}: {100 * np.mean(v):.1f} ± {100 * np.std(v, ddof=1) if len(v) > 1 else 0:.1f}")


if __name__ == "__main__":
    main()
