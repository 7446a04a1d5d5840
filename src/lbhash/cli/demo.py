"""`lbhash demo`: the main job on the embedded default data set (scikit-learn's digits)."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.checks import parse_int_list


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
    from lbhash.runs.demo import demo_lines

    for line in demo_lines(out, parse_int_list(bits, "--bits"), epochs, seed):
        click.echo(line)
