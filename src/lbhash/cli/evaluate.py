"""`lbhash evaluate`: all metrics of a codes file."""

from __future__ import annotations

from pathlib import Path

import click

import numpy as np

from lbhash.cli.common import parse_int_list, parse_topk
from lbhash.errors import InputError


@click.command()
@click.argument("codes_file", type=click.Path(path_type=Path))
@click.option("--topk", default="all", show_default=True,
              help="R of mAP@R: a positive integer, or 'all' for the whole database (printed as mAP@all "
                   "whenever R covers it).")
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
                   "(the file's query_real; tanh: of their tanh).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where to write the metrics JSON [default: metrics.json beside CODES_FILE].")
def evaluate(codes_file: Path, topk: str, ks: str, radius: int, knn: int, percentile: float,
             tie_averaged: bool, asymmetric: str | None, out: Path | None) -> None:
    """Evaluate a codes file and write metrics.json.

    CODES_FILE is an .npz with query_codes and db_codes (packed uint8), query_labels and
    db_labels (class ids or multi-hot rows) and bits; --asymmetric also needs query_real
    (n_query, bits), the queries' real-valued outputs.
    """
    from lbhash._io import check_output_file, write_json
    from lbhash.codes import load_codes_file
    from lbhash.evaluate import evaluate_codes, format_metrics

    out = check_output_file(out or codes_file.with_name("metrics.json"), "--out")
    data = load_codes_file(codes_file)
    real = None
    if asymmetric is not None:
        if "query_real" not in data:
            raise InputError(f"{codes_file}: --asymmetric needs the queries' real-valued outputs (key query_real), "
                             f"which this file does not hold (keys: {', '.join(data)})")
        real = data["query_real"]
        if asymmetric == "tanh" and real.dtype.kind in "iuf":  # other dtypes: refused by evaluate_codes
            real = np.tanh(real.astype(np.float64))
    metrics = evaluate_codes(
        data["query_codes"], data["db_codes"], data["query_labels"], data["db_labels"],
        bits=data["bits"], topk=parse_topk(topk), ks=parse_int_list(ks, "--ks"),
        radius=radius, knn=knn, percentile=percentile, tie_average=tie_averaged, query_real=real)
    write_json(out, metrics)
    click.echo(format_metrics(metrics))
    click.echo(f"wrote {out}")
