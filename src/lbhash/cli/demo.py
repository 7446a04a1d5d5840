"""`lbhash demo`: the main job on the embedded default data set (scikit-learn's digits)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click

VARIANTS = ((False, "CSQ"), (True, "CSQ_D"))


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True,
              help="Directory for the runs (the demo replaces its own earlier runs there).")
@click.option("--bits", default="16,32,64", show_default=True, help="Code lengths, comma-separated.")
@click.option("--epochs", default=50, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
def demo(out: Path, bits: str, epochs: int, seed: int) -> None:
    """Train CSQ and CSQ_D on the bundled digits data set and compare them.

    Digits (1,797 8x8 images as 64 features, 10 classes), protocol `digits`: per class 100
    training and 30 query images, database = all but the queries, and 10 of each class's
    training images held out to choose the epoch kept (they stay in the database). Prints
    mAP@all, the lower-bound ratio of the database codes and the training time per epoch.

    Both train with CSQ's recommended recipe (`lbhash methods`), as `lbhash train` does.
    """
    from lbhash.checks import parse_int_list
    from lbhash.evaluate import RATIO_SCALE
    from lbhash.methods.options import schedule_text
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig
    from lbhash.train.summary import DATA_SUMMARY, split_sizes

    lengths = parse_int_list(bits, "--bits")
    rows = []
    start = time.perf_counter()
    for b in lengths:
        row = {"bits": b}
        for lbhash, name in VARIANTS:
            run_dir = out / f"{name.lower()}-{b}bits"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            click.echo(f"training {name} at {b} bits ({epochs} epochs) -> {run_dir}")
            cfg = TrainConfig(data="digits", method="csq", lbhash=lbhash, bits=b, epochs=epochs, seed=seed)
            m = RunDirectory(run_dir).train(cfg)
            cfg = RunDirectory(run_dir).config()  # resolved: the recipe it trained with
            ratio = m["lower_bound"]["ratio"]
            row[name] = (m["map"], float("inf") if ratio == "inf" else ratio, m["run"]["seconds_per_epoch"])
        rows.append(row)
    split = json.loads((run_dir / DATA_SUMMARY).read_text())["split"]
    kept = "best validation epoch" if cfg.select == "best-val" else "last epoch"
    click.echo(f"\ndigits, split {split['protocol']}: {split_sizes(split)}; seed {seed}, "
               f"{epochs} epochs, lr {cfg.lr:g} {schedule_text(cfg)}, {kept} kept, "
               f"total {time.perf_counter() - start:.0f} s")
    click.echo(f"{'bits':>4}  {'mAP CSQ':>8} {'mAP CSQ_D':>9}  {'LB CSQ':>7} {'LB CSQ_D':>8}  "
               f"{'s/ep CSQ':>8} {'s/ep CSQ_D':>10}")
    for row in rows:
        (m0, r0, t0), (m1, r1, t1) = row["CSQ"], row["CSQ_D"]
        click.echo(f"{row['bits']:>4}  {m0:>8.4f} {m1:>9.4f}  {r0:>7.3f} {r1:>8.3f}  {t0:>8.3f} {t1:>10.3f}")
    click.echo("mAP: mAP@all of the queries, each searched in the database (ties by index); LB: "
               "min D_inter / max D_intra of the database codes (99.9th percentiles)")
    click.echo(f"LB's scale: {RATIO_SCALE}; on the same data and bits a higher LB tends to go with a "
               "higher mAP (docs/evaluation.md#reading-the-lower-bound)")
    click.echo(f"chance level: a random ranking has mAP@all {m['chance_map']:.4f} on these queries")
    search_demo(out / f"csq_d-{max(lengths)}bits")


def search_demo(run_dir: Path, queries: int = 5, k: int = 8) -> None:
    """Index a run's database codes and show the labels of a few queries' nearest neighbours."""
    from lbhash.codes_file import load_codes_file
    from lbhash.index import CodeIndex

    codes = load_codes_file(run_dir / "codes.npz")
    index = CodeIndex(codes["bits"])
    index.add(codes["db_codes"], ids=codes["db_ids"], labels=codes["db_labels"])
    dist, ids = index.search(codes["query_codes"][:queries], k=k)
    label_of = dict(zip(codes["db_ids"].tolist(), codes["db_labels"].tolist()))
    click.echo(f"\nsearch: the {k} nearest database items of {queries} queries, {run_dir.name} codes in a flat "
               f"index of {len(index)} items (ties by id)")
    for q in range(min(queries, len(ids))):
        digits = " ".join(str(label_of[i]) for i in ids[q])
        click.echo(f"  query {int(codes['query_ids'][q]):>4} (digit {int(codes['query_labels'][q])}): "
                   f"neighbours' digits {digits}  distances {' '.join(map(str, dist[q]))}")
