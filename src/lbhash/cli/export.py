"""`lbhash export`: a run's model as ONNX, for serving without torch (docs/export.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path),
              help="Export directory. [default: RUN_DIR/export, which `--encoder RUN_DIR` finds]")
@click.option("--overwrite", is_flag=True, help="Replace an existing export.")
def export(run_dir: Path, out: Path | None, overwrite: bool) -> None:
    """Export the model of RUN_DIR as ONNX, to encode queries without torch.

    Writes model.onnx (the model, a dynamic batch axis) and export.json (what serving needs:
    the input contract, the image transform, bits and the model's identity).

    `lbhash serve INDEX --encoder EXPORT` and `lbhash search --encoder EXPORT` then encode
    queries with ONNX Runtime and numpy, without torch; the codes equal the run's. Needs the
    'export' extra (pip install 'lbhash[export]')."""
    from lbhash.runs import RunDirectory

    done = RunDirectory(run_dir).export(out, overwrite)
    click.echo(f"exported {run_dir} to {done} (model.onnx, export.json)", err=True)
