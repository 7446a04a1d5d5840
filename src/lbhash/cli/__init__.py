"""The `lbhash` command line. Commands import their heavy dependencies lazily."""

from __future__ import annotations

import click

from lbhash import __version__
from lbhash.cli.common import LbhashGroup
from lbhash.cli.demo import demo
from lbhash.cli.evaluate import evaluate


@click.group(cls=LbhashGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lbhash")
def main() -> None:
    """Learn, evaluate and search binary hash codes (lower-bound objective, NeurIPS 2022)."""


main.add_command(evaluate)
main.add_command(demo)
