"""`lbhash train`: flags override the --config file, which overrides the defaults; `lbhash methods`,
the registered methods with their defaults under a profile; `lbhash demo`, the main job on the embedded
default data set (scikit-learn's digits)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from lbhash.checks import parse_int_list
from lbhash.cli.common import parse_topk
from lbhash.cli.options import SectionedCommand, config_options, config_sections
from lbhash.errors import InputError
from lbhash.runs.train_options import methods_markdown, methods_text, option_schema, parse_yaml


def parse_method_options(values: tuple[str, ...]) -> dict:
    """NAME=VALUE pairs; values are read as YAML scalars, so numbers and booleans keep their type."""
    out = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--method-option must look like NAME=VALUE, got {item!r}")
        out[key.strip()] = parse_yaml(raw, f"--method-option {item}")
    return out


# --help: the run's own options first, then one section per option set of TrainConfig
HELP_SECTIONS = lambda: [("Run", ["config_file", "out", "resume", "quiet", "help"]),  # noqa: E731
                         *config_sections({"method_option": "method_options", "hidden": "hidden", "topk": "topk"})]


@click.command(cls=SectionedCommand, sections=HELP_SECTIONS)
@click.option("--config", "config_file", type=click.Path(path_type=Path),
              help="YAML file of options (keys as below, '-' or '_'); flags override it.")
@config_options
@click.option("--method-option", "method_option", multiple=True, metavar="NAME=VALUE",
              help="A method constant, e.g. quantization=1e-4 (repeatable). [default: the method's]")
@click.option("--hidden", help="Hash head hidden widths, comma-separated; 'none': no hidden layer (one Linear "
                               "layer). [default: 1024 for features and frozen backbones, none for backbones that "
                               "train and baselines]")
@click.option("--topk", help="R of mAP@R: a positive integer or 'all' (printed as mAP@all whenever R covers the "
                             "whole database). [default: the protocol's]")
@click.option("--out", type=click.Path(path_type=Path),
              help="Run directory. [default: runs/<method>[_D]-<bits>bits-seed<seed>]")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint, with its saved "
                                             "config; with --epochs N (the one option it takes), train it, "
                                             "finished or not, further to N epochs in all.")
@click.option("--quiet", is_flag=True, help="No data line, progress or epoch lines: only warnings, errors and "
                                            "the results.")
def train(config_file, out, resume, quiet, method_option, hidden, topk, **flags) -> None:
    """Train a hash model and write a run directory; --lbhash adds the paper's objective (Alg 1).

    The run directory holds config.yaml, split.npz, data.json, log.jsonl, checkpoint.pt, codes.npz and
    metrics.json. A line on stderr says what data was loaded; progress shows bars on a terminal, and one
    line per epoch elsewhere (a log file).

    --out R --resume continues an interrupted run; on a finished run it prints the saved metrics and says
    there is nothing to do. --out R --resume --epochs N trains R further to N epochs in all (the step
    schedule continues its steps; a cosine run is refused, its curve being fixed by its epochs).
    """
    logger = logging.getLogger("lbhash")
    level = logger.level
    if quiet:
        if flags["progress"]:
            raise InputError("--quiet shows no progress; drop --progress")
        flags["progress"] = False
        logger.setLevel(logging.WARNING)
    try:
        _train(config_file, out, resume, method_option, hidden, topk, flags)
    finally:
        logger.setLevel(level)


def _train(config_file, out, resume, method_option, hidden, topk, flags) -> None:
    from lbhash.runs.run_dir import train_from_options  # the run directory's stack: only to train

    progress = flags.pop("progress")
    if resume:
        if out is None:
            raise InputError("--resume needs --out, the run directory to continue")
        epochs = flags.pop("epochs")  # the one option --resume takes: train the run further
        given = [k for k, v in flags.items() if v is not None] + (["--config"] if config_file else [])
        if given or method_option or hidden is not None or topk:
            raise InputError("--resume continues a run with its saved config; drop the other options "
                             "(--epochs N alone trains it further)")
        lines = train_from_options(out, resume=True, epochs=epochs, progress=progress)
    else:
        flags["method_options"] = parse_method_options(method_option) or None
        flags["hidden"] = None if hidden is None else _hidden_widths(hidden)
        flags["topk"] = ("all" if parse_topk(topk) is None else parse_topk(topk)) if topk else None
        flags["progress"] = progress
        lines = train_from_options(out, config_file, flags)
    for line in lines:
        click.echo(line)


def _hidden_widths(text: str) -> list[int]:
    """--hidden's widths; 'none' or an empty value is no hidden layer (before, an empty value quietly
    meant the default, 1024 for features)."""
    return [] if text.strip().lower() == "none" else parse_int_list(text, "--hidden", allow_empty=True)


PROFILE = option_schema()["defaults"]  # the profiles are the choices of the `defaults` option


@click.command()
@click.option("--defaults", "profile", type=click.Choice(PROFILE.choices), default=PROFILE.default,
              show_default=True, help="Which defaults profile to show.")
@click.option("--markdown", is_flag=True, help="Print the defaults as a markdown table.")
def methods(profile: str, markdown: bool) -> None:
    """List the hashing methods, their training defaults, _D objective options and constants."""
    click.echo(methods_markdown(profile) if markdown else methods_text(profile))


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True,
              help="Directory for the runs (the demo replaces its own earlier runs there).")
@click.option("--bits", default="16,32,64", show_default=True, help="Code lengths, comma-separated.")
@click.option("--epochs", default=50, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
def demo(out: Path, bits: str, epochs: int, seed: int) -> None:
    """Train CSQ and CSQ_D on the bundled digits data set and compare them.

    Digits (1,797 8x8 images as 64 features, 10 classes), protocol `digits`: per class 100
    training and 30 query images, database = all but the queries, and 10 of each class's
    training images held out to choose the epoch kept (they stay in the database). Prints
    mAP@all, the lower-bound ratio of the database codes and the training time per epoch.

    Both train with CSQ's recommended recipe (`lbhash methods`), as `lbhash train` does.
    """
    from lbhash.runs.demo import demo_lines

    for line in demo_lines(out, parse_int_list(bits, "--bits"), epochs, seed):
        click.echo(line)
