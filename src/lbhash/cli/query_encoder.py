"""The model that encodes queries for `lbhash search` and `lbhash serve`: a trained run
(`--run`, its torch model) or an export (`--encoder`, ONNX Runtime and numpy, no torch)."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.errors import InputError


def encoder_options(func):
    func = click.option("--encoder", "export_path", type=click.Path(path_type=Path),
                        help="An export (lbhash export) whose ONNX model encodes the feature or image queries, "
                             "without torch: the export directory, or a run directory holding one (RUN_DIR/export).")(func)
    return click.option("--run", "run_dir", type=click.Path(path_type=Path),
                        help="Trained run whose model encodes the feature or image queries.")(func)


def model_source(run_dir: Path | None, export_path: Path | None) -> Path | None:
    """The run or export given (at most one of them)."""
    if run_dir is not None and export_path is not None:
        raise InputError("give at most one of --run and --encoder (an export of the run)")
    return run_dir if run_dir is not None else export_path


def check_model(metadata: dict | None, run_dir: Path | None, export_path: Path | None, index_dir, force: bool) -> None:
    """Refuse a model other than the one that made the index's codes (lbhash.runs.index_inputs)."""
    from lbhash.runs.index_inputs import check_index_model

    source = model_source(run_dir, export_path)
    if source is not None:
        check_index_model(metadata, source, index_dir, force, exported=export_path is not None)


def load_query_encoder(run_dir: Path | None, export_path: Path | None):
    """The encoder (lbhash.encoders.Encoder) of the run or export given; None without either."""
    from lbhash.runs import index_inputs

    if model_source(run_dir, export_path) is None:
        return None
    return index_inputs.load_encoder(run_dir) if run_dir is not None else index_inputs.load_exported(export_path)
