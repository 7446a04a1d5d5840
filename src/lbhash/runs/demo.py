"""`lbhash demo`: CSQ and CSQ_D trained on the bundled digits set (scikit-learn's) at a few code
lengths and compared, then the longest CSQ_D run's codes searched in a flat index."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Iterator

from lbhash.codes_file import load_codes_file
from lbhash.evaluate import RATIO_SCALE
from lbhash.index import CodeIndex
from lbhash.methods.options import schedule_text
from lbhash.runs.run_dir import RunDirectory
from lbhash.train import TrainConfig
from lbhash.train.summary import DATA_SUMMARY, split_sizes

VARIANTS = ((False, "CSQ"), (True, "CSQ_D"))


def demo_lines(out: Path, lengths: list[int], epochs: int, seed: int) -> Iterator[str]:
    """Train both variants at each code length into OUT/<variant>-<bits>bits (replacing the demo's
    earlier runs there), with CSQ's recommended recipe as `lbhash train` does; the lines to print,
    each as soon as it is known: the run being trained, then the table and the search."""
    rows = []
    start = time.perf_counter()
    for b in lengths:
        row = {"bits": b}
        for lbhash, name in VARIANTS:
            run_dir = out / f"{name.lower()}-{b}bits"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            yield f"training {name} at {b} bits ({epochs} epochs) -> {run_dir}"
            cfg = TrainConfig(data="digits", method="csq", lbhash=lbhash, bits=b, epochs=epochs, seed=seed)
            m = RunDirectory(run_dir).train(cfg)
            cfg = RunDirectory(run_dir).config()  # resolved: the recipe it trained with
            ratio = m["lower_bound"]["ratio"]
            row[name] = (m["map"], float("inf") if ratio == "inf" else ratio, m["run"]["seconds_per_epoch"])
        rows.append(row)
    split = json.loads((run_dir / DATA_SUMMARY).read_text())["split"]
    kept = "best validation epoch" if cfg.recipe.select == "best-val" else "last epoch"
    yield (f"\ndigits, split {split['protocol']}: {split_sizes(split)}; seed {seed}, "
           f"{epochs} epochs, lr {cfg.recipe.lr:g} {schedule_text(cfg.recipe)}, {kept} kept, "
           f"total {time.perf_counter() - start:.0f} s")
    yield (f"{'bits':>4}  {'mAP CSQ':>8} {'mAP CSQ_D':>9}  {'LB CSQ':>7} {'LB CSQ_D':>8}  "
           f"{'s/ep CSQ':>8} {'s/ep CSQ_D':>10}")
    for row in rows:
        (m0, r0, t0), (m1, r1, t1) = row["CSQ"], row["CSQ_D"]
        yield f"{row['bits']:>4}  {m0:>8.4f} {m1:>9.4f}  {r0:>7.3f} {r1:>8.3f}  {t0:>8.3f} {t1:>10.3f}"
    yield ("mAP: mAP@all of the queries, each searched in the database (ties by index); LB: "
           "min D_inter / max D_intra of the database codes (99.9th percentiles)")
    yield (f"LB's scale: {RATIO_SCALE}; on the same data and bits a higher LB tends to go with a "
           "higher mAP (docs/evaluation.md#reading-the-lower-bound)")
    yield f"chance level: a random ranking has mAP@all {m['chance_map']:.4f} on these queries"
    yield from _search_lines(out / f"csq_d-{max(lengths)}bits")


def _search_lines(run_dir: Path, queries: int = 5, k: int = 8) -> Iterator[str]:
    """Index a run's database codes and show the labels of a few queries' nearest neighbours."""
    codes = load_codes_file(run_dir / "codes.npz")
    index = CodeIndex(codes["bits"])
    index.add(codes["db_codes"], ids=codes["db_ids"], labels=codes["db_labels"])
    dist, ids = index.search(codes["query_codes"][:queries], k=k)
    label_of = dict(zip(codes["db_ids"].tolist(), codes["db_labels"].tolist()))
    yield (f"\nsearch: the {k} nearest database items of {queries} queries, {run_dir.name} codes in a flat "
           f"index of {len(index)} items (ties by id)")
    for q in range(min(queries, len(ids))):
        digits = " ".join(str(label_of[i]) for i in ids[q])
        yield (f"  query {int(codes['query_ids'][q]):>4} (digit {int(codes['query_labels'][q])}): "
               f"neighbours' digits {digits}  distances {' '.join(map(str, dist[q]))}")
