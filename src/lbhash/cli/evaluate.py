"""`lbhash evaluate`: all metrics of a codes file, or of a query file against a database file."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.checks import parse_int_list
from lbhash.cli.common import parse_topk
from lbhash.errors import InputError
from lbhash.runs.metrics import CodesFiles, evaluate_files


@click.command()
@click.argument("codes_file", required=False, type=click.Path(path_type=Path))
@click.option("--queries", type=click.Path(path_type=Path),
              help="Query codes: a codes file (its query part, or its only part) or a .npy of codes; with --database.")
@click.option("--database", type=click.Path(path_type=Path),
              help="Database codes: a codes file (its db part, or its only part) or a .npy of codes.")
@click.option("--query-labels", type=click.Path(path_type=Path),
              help="Labels of the queries (.npy class ids or multi-hot rows), where their file has none.")
@click.option("--database-labels", type=click.Path(path_type=Path),
              help="Labels of the database items (.npy), where their file has none.")
@click.option("--bits", type=int, help="Code length of packed .npy codes whose length is not 8 x their bytes.")
@click.option("--topk", default=None,
              help="R of mAP@R: a positive integer, or 'all' for the whole database. "
                   "[default: the R the codes file records (its run's protocol), else all; printed as mAP@all whenever R covers the database]")
@click.option("--ks", default="100,200,300,400,500,600,700,800,900,1000", show_default=True,
              help="Rank cut-offs K for P@K, comma-separated.")
@click.option("--radius", default=2, show_default=True, type=int, help="Hamming radius of P@H<=r.")
@click.option("--knn", default=100, show_default=True, type=int, help="k of the kNN classifier.")
@click.option("--percentile", default=99.9, show_default=True, type=float,
              help="Percentile for max D_intra (and 100 - it for min D_inter) in the lower bound.")
@click.option("--tie-averaged", is_flag=True,
              help="Also compute the tie-averaged mAP (the expectation over random orders inside ties).")
@click.option("--asymmetric", type=click.Choice(["raw", "tanh"]), default=None,
              help="Also rank by the inner product of the database codes with the queries' real outputs "
                   "(the query part's `real`; tanh: of their tanh).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Also write the metrics as JSON to this file (never inside a run directory).")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
def evaluate(codes_file: Path | None, queries: Path | None, database: Path | None, query_labels: Path | None,
             database_labels: Path | None, bits: int | None, topk: str | None, ks: str, radius: int, knn: int,
             percentile: float, tie_averaged: bool, asymmetric: str | None, out: Path | None,
             overwrite: bool) -> None:
    """Evaluate codes and print every metric.

    CODES_FILE is a codes file with a query and a database part (a run's codes.npz; see docs/evaluation.md#codes-files).
    Or give --queries and --database: each a codes file (`lbhash encode`'s output, say) or a .npy of +/-1 or packed
    codes, with labels from the file or from --query-labels/--database-labels. mAP is at the R the files record
    unless --topk says otherwise. Nothing is written unless --out names a file.
    """
    if (codes_file is None) == (queries is None and database is None):
        raise InputError("give a codes file, or --queries and --database (not both)")
    if codes_file is None and (queries is None or database is None):
        raise InputError(f"--{'queries' if queries is None else 'database'} is missing: give both "
                         "--queries and --database")
    r = None if topk is None else ("all" if parse_topk(topk) is None else parse_topk(topk))
    files = CodesFiles(codes_file or queries, codes_file or database, codes_file is not None, query_labels,
                       database_labels, bits)
    click.echo("\n".join(evaluate_files(
        files, r, asymmetric, out, overwrite, ks=parse_int_list(ks, "--ks"), radius=radius, knn=knn,
        percentile=percentile, tie_averaged=tie_averaged)))
