"""What the bf16 backbone does to a run's codes and mAP: its query and database encoded again
with the backbone in bf16 (as the run encodes) and in float32.

    python studies/bf16_codes.py RUN_DIR [RUN_DIR ...]

For each run (an image run whose backbone_precision is bf16) it prints, for bf16 and fp32: the
share of query and database items whose code equals the run's codes.npz, the mean number of
differing bits among those that differ, and the mAP at the run's R. The images go through the
backbone in both cases (no cached features), in the run's evaluation transform.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from lbhash.codes import pack
from lbhash.codes_file import load_codes_file
from lbhash.data import load_data, load_split
from lbhash.evaluate import mean_average_precision
from lbhash.train.builder import evaluation_topk, input_options
from lbhash.train.forward import encode
from lbhash.runs.encoder import load_run_model


def compare(run: Path) -> None:
    model, cfg = load_run_model(run)
    model.set_frozen(False)  # images through the backbone, never the cached features
    split, dataset = load_split(run / "split.npz"), load_data(cfg.dataset.data)
    stored = load_codes_file(run / "codes.npz")
    labels = dataset.labels
    print(f"{run.name}: {cfg.variant} {cfg.hashing.bits} bits, {cfg.model.backbone} at {cfg.dataset.image_size} px, "
          f"{len(split.query)} queries, {len(split.database)} database items, run precision {cfg.model.backbone_precision}")
    for precision in ("bf16", "fp32"):
        model.bf16_backbone = precision == "bf16"
        q = encode(model, dataset, split.query, input_options(cfg))
        db = encode(model, dataset, split.database, input_options(cfg))
        parts = []
        for name, codes, ref in (("query", q, stored["query_codes"]), ("database", db, stored["db_codes"])):
            differ = (np.unpackbits(pack(codes) ^ ref, axis=1)).sum(1)
            moved = differ[differ > 0]
            parts.append(f"{name} equal {np.mean(differ == 0):.4f}"
                         + (f" (others differ by {moved.mean():.2f} bits)" if len(moved) else ""))
        value = mean_average_precision(q, db, labels[split.query], labels[split.database],
                                       topk=evaluation_topk(cfg, split))
        print(f"  {precision}: {'; '.join(parts)}; mAP {value:.4f}")


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        compare(Path(folder))
