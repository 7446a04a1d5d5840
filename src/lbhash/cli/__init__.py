"""The `lbhash` command line. Commands import their heavy dependencies lazily."""

from __future__ import annotations

import logging
import warnings

import click

from lbhash import __version__
from lbhash.cli.centers import centers
from lbhash.cli.common import LbhashGroup
from lbhash.cli.demo import demo
from lbhash.cli.encode import encode
from lbhash.cli.evaluate import evaluate
from lbhash.cli.index import index
from lbhash.cli.methods import methods
from lbhash.cli.report import report
from lbhash.cli.reproduce import reproduce
from lbhash.cli.search import search
from lbhash.cli.serve import serve
from lbhash.cli.toy import toy_mvb
from lbhash.cli.train import train
from lbhash.errors import LbhashWarning


@click.group(name="lbhash", cls=LbhashGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lbhash")
def main() -> None:
    """Learn, evaluate and search binary hash codes (lower-bound objective, NeurIPS 2022)."""
    logger = logging.getLogger("lbhash")
    if not any(isinstance(h, _EchoHandler) for h in logger.handlers):
        logger.addHandler(_EchoHandler())
        logger.setLevel(logging.INFO)
    if not isinstance(warnings.showwarning, _ShowWarning):
        warnings.showwarning = _ShowWarning(warnings.showwarning)


class _ShowWarning:
    """lbhash's own warnings (LbhashWarning) as one line each, `warning: ...`, on the current
    stderr; every other warning as Python shows it. Filters still decide what is shown."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, LbhashWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            self.previous(message, category, filename, lineno, file, line)


class _EchoHandler(logging.Handler):
    """Library notices as one line each on the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(record.getMessage(), err=True)


for command in (train, encode, evaluate, index, search, serve, methods, reproduce, report, centers, toy_mvb,
                demo):
    main.add_command(command)
