"""`lbhash report`: the markdown report of a reproduction directory, from its tables alone."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where to write the report [default: report.md in DIRECTORY]; figures go "
                   "to a 'figures' folder beside it.")
@click.option("--bits", type=int, default=None,
              help="Bit length of the curves, convergence and t-SNE sections "
                   "[default: the largest in grid.csv].")
@click.option("--tsne-pairs", default=1, show_default=True, type=click.IntRange(min=0),
              help="How many base/_D pairs of codes_sample.npz to embed with t-SNE.")
@click.option("--tsne-points", default=5000, show_default=True, type=click.IntRange(min=10),
              help="At most this many codes per t-SNE embedding (a seeded subsample).")
def report(directory: Path, out: Path | None, bits: int | None, tsne_pairs: int, tsne_points: int) -> None:
    """Write a markdown report with PNG figures from the result tables in DIRECTORY.

    DIRECTORY holds meta.json and the tables of any mix of `lbhash reproduce` experiments:
    grid.csv, curves.csv, epochs.csv, codes_sample.npz (grid), timing.csv, centers.csv,
    bound.csv, toy.json and toy_probs.npz (toy), study.csv and study_epochs.csv (study),
    baselines.csv (baselines). Each present table gets its section; the others are left out.
    Nothing is retrained.
    """
    from lbhash._io import check_output_file
    from lbhash.reproduce.report import write_report

    check_output_file(out if out is not None else directory / "report.md", "--out")
    path = write_report(directory, out=out, bits=bits, tsne_pairs=tsne_pairs, tsne_points=tsne_points)
    click.echo(str(path))
