"""`lbhash centers`: build a class-center set and report its distances."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.errors import InputError
from lbhash.runs.metrics import make_centers

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
    click.echo("\n".join(make_centers(_parse_int(bits, "--bits"), _parse_int(classes, "--classes"), kind,
                                       _parse_int(seed, "--seed"), out, cache=not no_cache, canonical=canonical)))
