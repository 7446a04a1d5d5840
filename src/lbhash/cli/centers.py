"""`lbhash centers`: build a class-center set and report its distances."""

from __future__ import annotations

from pathlib import Path

import click
from lbhash.errors import InputError

KINDS_HELP = "auto, hadamard, bch, reed_solomon or random"


def _parse_int(value: str, name: str) -> int:
    # Parsed here rather than by click so that bad values give the one-line `error:` form.
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{name} must be an integer, got {value!r}") from None


@click.command()
@click.option("--bits", required=True, metavar="INTEGER", help="Code length in bits (at most 4096).")
@click.option("--classes", required=True, metavar="INTEGER", help="Number of classes C (codewords).")
@click.option("--kind", default="auto", show_default=True, metavar="KIND",
              help=f"Generator: {KINDS_HELP}; auto takes the best by min distance.")
@click.option("--seed", default="0", show_default=True, metavar="INTEGER",
              help="Seed of random draws (random) or of the relabelling of the other kinds.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Write the (C, bits) int8 +/-1 array here as .npy.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the on-disk cache.")
@click.option("--canonical", is_flag=True, help="The generator's canonical set, not a seeded relabelling of it.")
def centers(bits: str, classes: str, kind: str, seed: str, out: Path | None, no_cache: bool, canonical: bool) -> None:
    """Generate C class centers of BITS bits with a large minimum Hamming distance.

    Prints the kind used, the min and mean pairwise distance and the Plotkin bound
    floor(bits*C / (2*(C-1))), which no set of C codewords can exceed.
    """
    import numpy as np

    from lbhash._io import atomic_path, check_output_file
    from lbhash.centers import center_report, select_centers

    if out is not None:
        check_output_file(out, "--out")
    codes, made_by = select_centers(_parse_int(bits, "--bits"), _parse_int(classes, "--classes"),
                                    kind, _parse_int(seed, "--seed"), cache=not no_cache, canonical=canonical)
    report = center_report(codes, made_by)
    chosen = f"{made_by} (chosen by auto)" if kind == "auto" else made_by
    click.echo(f"kind: {chosen}")
    click.echo(f"bits: {report.bits}, classes: {report.classes}")
    click.echo(f"min pairwise distance: {report.min_distance}")
    click.echo(f"mean pairwise distance: {report.mean_distance:.3f}")
    click.echo(f"Plotkin bound on the min distance: {report.plotkin_bound}")
    if out is not None:
        with atomic_path(out) as tmp, open(tmp, "wb") as fh:  # np.save on a name would add .npy
            np.save(fh, codes)
        click.echo(f"wrote {out}")
