"""The `lbhash` command line. Each command's module is imported only when that command runs, so
commands that need no model (`--help`, `search --codes`, `index`, `evaluate`) never import torch."""

from __future__ import annotations

import atexit
import gc
import logging
import warnings

import click

from lbhash import __version__
from lbhash.cli.common import LazyGroup
from lbhash.errors import LbhashWarning


# name -> (module under lbhash.cli, function, the line `lbhash --help` shows); a test checks that
# each line is the start of its command's own help
COMMANDS = {
    "train": ("train", "train", "Train a hash model and write a run directory; --lbhash adds the paper's objective (Alg 1)."),
    "encode": ("encode", "encode", "Encode data with the model of RUN_DIR into a codes file (docs/evaluation.md#codes-files)."),
    "export": ("serve", "export", "Export the model of RUN_DIR as ONNX, to encode queries without torch."),
    "evaluate": ("evaluate", "evaluate", "Evaluate codes and print every metric."),
    "index": ("index", "index", "Build and change search indexes over packed codes."),
    "search": ("search", "search", "Search INDEX_DIR; print each query's ids, distances and labels."),
    "duplicates": ("copies", "duplicates", "Find the groups of copies in PATH, an index or a folder of photos: largest groups first."),
    "evaluate-copies": ("copies", "evaluate_copies", "Edit indexed photos, search the copies, report how often the original comes first."),
    "serve": ("serve", "serve", "Serve INDEX_DIR over HTTP: a search page at /, API docs at /docs."),
    "methods": ("train", "methods", "List the hashing methods, their training defaults, _D objective options and constants."),
    "reproduce": ("reproduce", "reproduce", "Run EXPERIMENT (grid, timing, centers, toy, bound, study, baselines) and write its tables into --out."),
    "report": ("reproduce", "report", "Write a markdown report with PNG figures from the result tables in DIRECTORY."),
    "centers": ("reproduce", "centers", "Generate C class centers of BITS bits with a large minimum Hamming distance."),
    "toy-mvb": ("reproduce", "toy_mvb", "Estimate a random multivariate Bernoulli with the block surrogate P_pi."),
    "demo": ("train", "demo", "Train CSQ and CSQ_D on the bundled digits data set and compare them."),
}


@click.group(name="lbhash", cls=LazyGroup, commands_table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lbhash")
def main() -> None:
    """Learn, evaluate and search binary hash codes (lower-bound objective, NeurIPS 2022)."""
    logger = logging.getLogger("lbhash")
    if not any(isinstance(h, _EchoHandler) for h in logger.handlers):
        logger.addHandler(_EchoHandler())
        logger.setLevel(logging.INFO)
    if not isinstance(warnings.showwarning, _ShowWarning):
        warnings.showwarning = _ShowWarning(warnings.showwarning)
    _collect_less()


def _collect_less() -> None:
    """Fewer collections of the cyclic garbage collector, which a command's imports (torch, pydantic,
    FAISS) make slow and useless: they leave some 300,000 long-lived objects. While the command runs,
    the first threshold is 100,000 instead of 700 (about 400 collections that find no garbage become 2).
    At exit everything still alive is frozen, so the interpreter's last collection does not scan it:
    0.5 s of a 2 s `lbhash encode` (docs/results/benchmarks.md#start-up); no finalizer is promised there."""
    threshold = gc.get_threshold()
    gc.set_threshold(100_000, *threshold[1:])
    click.get_current_context().call_on_close(lambda: gc.set_threshold(*threshold))
    atexit.unregister(gc.freeze)  # registered once per process, however many commands it runs
    atexit.register(gc.freeze)


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
