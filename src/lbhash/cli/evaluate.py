"""`lbhash evaluate`: all metrics of a codes file, or of a query file against a database file."""

from __future__ import annotations

from pathlib import Path

import click

import numpy as np

from lbhash.checks import parse_int_list
from lbhash.cli.common import parse_topk
from lbhash.errors import InputError


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

    CODES_FILE is a codes file with a query and a database part (a run's codes.npz; see
    docs/evaluation.md#codes-files). Or give --queries and --database: each a codes file
    (`lbhash encode`'s output, say) or a .npy of +/-1 or packed codes, with labels from the
    file or from --query-labels/--database-labels. mAP is at the R the files record unless
    --topk says otherwise. Nothing is written unless --out names a file.
    """
    from lbhash._io import check_new_output_file, write_json
    from lbhash.evaluate import evaluate_codes, format_metrics

    if (codes_file is None) == (queries is None and database is None):
        raise InputError("give a codes file, or --queries and --database (not both)")
    if codes_file is None and (queries is None or database is None):
        raise InputError(f"--{'queries' if queries is None else 'database'} is missing: give both "
                         "--queries and --database")
    if out is not None:
        check_new_output_file(out, "--out", overwrite)
    q_path, db_path = (codes_file, codes_file) if codes_file is not None else (queries, database)
    q = _side(q_path, "query", query_labels, "--query-labels", bits, codes_file is not None)
    db = _side(db_path, "db", database_labels, "--database-labels", bits, codes_file is not None)
    if q["bits"] != db["bits"]:
        raise InputError(f"{q_path} holds {q['bits']}-bit codes but {db_path} holds {db['bits']}-bit codes")
    r, where = _resolve_topk(topk, q, db)
    real = None
    if asymmetric is not None:
        if q["real"] is None:
            raise InputError(f"{q_path}: --asymmetric needs the queries' real-valued outputs (the query part's "
                             "`real`: lbhash encode --real, or a run's codes.npz)")
        real = q["real"]
        if asymmetric == "tanh" and real.dtype.kind in "iuf":  # other dtypes: refused by evaluate_codes
            real = np.tanh(real.astype(np.float64))
    metrics = evaluate_codes(
        q["codes"], db["codes"], q["labels"], db["labels"], bits=q["bits"], topk=r, ks=parse_int_list(ks, "--ks"),
        radius=radius, knn=knn, percentile=percentile, tie_averaged=tie_averaged, query_real=real)
    click.echo(f"R = {'all' if r is None else r} ({where})")
    click.echo(format_metrics(metrics))
    if out is not None:
        write_json(out, metrics)
        click.echo(f"wrote {out}")


def _side(path: Path, name: str, labels_path: Path | None, option: str, bits: int | None, both: bool) -> dict:
    """One side (queries or database) of an evaluation: its codes, labels, real outputs and R."""
    from lbhash import _io
    from lbhash.codes_file import load_codes_file, only_part, part

    data = load_codes_file(path, need=(name,) if both else (), bits=bits)
    fields = part(data, name if both else only_part(data, name, path))
    labels = fields["labels"]
    if labels_path is not None:
        labels = _io.load_npy(labels_path) if labels_path.suffix == ".npy" else None
        if labels is None:
            raise InputError(f"{option} {labels_path}: must be a .npy file of class ids or multi-hot rows")
        if len(labels) != len(fields["codes"]):
            raise InputError(f"{option} {labels_path}: {len(labels)} rows for {len(fields['codes'])} codes in {path}")
    if labels is None:
        what = "queries" if name == "query" else "database items"
        raise InputError(f"{path}: the {what} have no labels, which evaluation needs (give {option} FILE, "
                         "or encode labelled data)")
    return {"codes": fields["codes"], "labels": labels, "real": fields["real"], "bits": data["bits"],
            "topk": data["topk"], "has_topk": data["topk_recorded"], "path": path}


def _resolve_topk(topk: str | None, q: dict, db: dict) -> tuple[int | None, str]:
    if topk is not None:
        return parse_topk(topk), "--topk"
    recorded = {s["path"]: s["topk"] for s in (q, db) if s["has_topk"]}
    values = set(recorded.values())
    if len(values) > 1:
        listed = ", ".join(f"{p}: {v or 'all'}" for p, v in recorded.items())
        raise InputError(f"the files record different R ({listed}); choose one with --topk")
    if not values:
        return None, "no R recorded: the whole database"
    return values.pop(), f"recorded in {', '.join(map(str, dict.fromkeys(recorded)))}"
