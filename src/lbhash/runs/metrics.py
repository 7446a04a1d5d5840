"""Metrics of codes: codes files' (`evaluate_files`: `lbhash evaluate`), a class-center set's (`make_centers`: `lbhash centers`). Its
imports load no torch: those two commands need no model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash import _io
from lbhash.codes_file import load_codes_file, only_part, part
from lbhash.errors import InputError


@dataclass(frozen=True)
class CodesFiles:
    """The codes `lbhash evaluate` reads: those of `queries` and of `database` (`one_file`: the two
    parts of one codes file, which both name), their labels from the files or from `query_labels` and
    `database_labels` (.npy files); `bits`: the codes' length where the files cannot tell it."""

    queries: Path
    database: Path
    one_file: bool
    query_labels: Path | None = None
    database_labels: Path | None = None
    bits: int | None = None


def evaluate_files(files: CodesFiles, topk: int | str | None = None, asymmetric: str | None = None,
                   out: Path | None = None, overwrite: bool = False, **settings) -> list[str]:
    """The lines `lbhash evaluate` prints of the query codes of `files` against their database codes,
    the metrics also written to `out`; `topk` 'all', R or None (the files' R); `asymmetric` ('raw',
    'tanh') also ranks by the queries' real outputs; `settings`: of `evaluate_codes`."""
    from lbhash.evaluate import evaluate_codes, format_metrics

    if out is not None:
        _io.check_new_output_file(out, "--out", overwrite)
    queries, database = files.queries, files.database
    q = _side(queries, "query", files.query_labels, "--query-labels", files.bits, files.one_file)
    db = _side(database, "db", files.database_labels, "--database-labels", files.bits, files.one_file)
    if q["bits"] != db["bits"]:
        raise InputError(f"{queries} holds {q['bits']}-bit codes but {database} holds {db['bits']}-bit codes")
    r, where = _resolve_topk(topk, q, db)
    real = None
    if asymmetric is not None:
        if q["real"] is None:
            raise InputError(f"{queries}: --asymmetric needs the queries' real-valued outputs (the query part's "
                             "`real`: lbhash encode --real, or a run's codes.npz)")
        real = q["real"]
        if asymmetric == "tanh" and real.dtype.kind in "iuf":  # other dtypes: refused by evaluate_codes
            real = np.tanh(real.astype(np.float64))
    metrics = evaluate_codes(q["codes"], db["codes"], q["labels"], db["labels"], bits=q["bits"], topk=r,
                             query_real=real, **settings)
    lines = [f"R = {'all' if r is None else r} ({where})", format_metrics(metrics)]
    if out is not None:
        _io.write_json(out, metrics)
        lines.append(f"wrote {out}")
    return lines


def _side(path: Path, name: str, labels_path: Path | None, option: str, bits: int | None, both: bool) -> dict:
    """One side (queries or database) of an evaluation: its codes, labels, real outputs and R."""
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


def _resolve_topk(topk: int | str | None, q: dict, db: dict) -> tuple[int | None, str]:
    if topk is not None:
        return (None if topk == "all" else topk), "--topk"
    recorded = {s["path"]: s["topk"] for s in (q, db) if s["has_topk"]}
    values = set(recorded.values())
    if len(values) > 1:
        listed = ", ".join(f"{p}: {v or 'all'}" for p, v in recorded.items())
        raise InputError(f"the files record different R ({listed}); choose one with --topk")
    if not values:
        return None, "no R recorded: the whole database"
    return values.pop(), f"recorded in {', '.join(map(str, dict.fromkeys(recorded)))}"


def make_centers(bits: int, classes: int, kind: str, seed: int, out: Path | None = None, cache: bool = True,
                 canonical: bool = False) -> list[str]:
    """A class-center set (`select_centers`), written to `out` as a (C, bits) int8 +/-1 .npy where given;
    the lines `lbhash centers` prints: the kind used, its distances and the Plotkin bound."""
    from lbhash.centers import center_report, select_centers

    if out is not None:
        _io.check_output_file(out, "--out")
    codes, made_by = select_centers(bits, classes, kind, seed, cache=cache, canonical=canonical)
    report = center_report(codes, made_by)
    lines = [f"kind: {made_by} (chosen by auto)" if kind == "auto" else f"kind: {made_by}",
             f"bits: {report.bits}, classes: {report.classes}", f"min pairwise distance: {report.min_distance}",
             f"mean pairwise distance: {report.mean_distance:.3f}",
             f"Plotkin bound on the min distance: {report.plotkin_bound}"]
    if out is not None:
        with _io.atomic_path(out) as tmp, open(tmp, "wb") as fh:  # np.save on a name would add .npy
            np.save(fh, codes)
        lines.append(f"wrote {out}")
    return lines
