"""`lbhash reproduce EXPERIMENT`: run one of the paper's experiments into a results directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import click

from lbhash.checks import parse_int_list
from lbhash.cli.common import StatedDefault
from lbhash.errors import InputError


def default_seeds() -> str:
    """The seeds of each experiment that has several, as `--seeds` states its default: '0..4 for grid, ...'."""
    from lbhash.reproduce.experiments.registry import EXPERIMENTS

    experiments: dict[tuple, list[str]] = {}
    for name, spec in EXPERIMENTS.items():
        if hasattr(spec, "seeds"):
            experiments.setdefault(tuple(spec.seeds), []).append(name)
    shown = lambda seeds: f"{seeds[0]}..{seeds[-1]}" if seeds == tuple(range(seeds[0], seeds[-1] + 1)) \
        else ",".join(map(str, seeds))  # noqa: E731
    return ", ".join(f"{shown(seeds)} for {' and '.join(names)}" for seeds, names in experiments.items())


@click.command()
@click.argument("experiment", type=click.Choice(["grid", "timing", "centers", "toy", "bound", "study",
                                                 "baselines"]))
@click.option("--data", help="Data spec (not needed for toy).")
@click.option("--protocol", help="Split protocol. [default: the data set's]")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Results directory.")
@click.option("--workers", type=int, default=1, show_default=True, help="Parallel training processes.")
@click.option("--methods", help="grid: comma-separated methods; methods beyond the paper's (orthohash, the "
                                "baselines) only when named. [default: the paper's six deep methods; baselines: "
                                "lsh, pca, itq, linear, csq, orthohash]")
@click.option("--bits", help="Comma-separated code lengths. [default: the experiment's]")
@click.option("--seeds", help="Comma-separated seeds.", cls=StatedDefault, stated=default_seeds)
@click.option("--kinds", help="centers: comma-separated generators. [default: all five]")
@click.option("--study", "study_name", help="study: its name (rows of study.csv, runs/NAME/).")
@click.option("--settings", help="study: settings separated by ';', e.g. 'base;paper;lbhash_reduction=mean,"
                                 "lbhash_weight=0.1' (see docs/reproduce.md).")
@click.option("--test", is_flag=True, help="study: also encode and evaluate the queries (final comparisons).")
@click.option("--epochs", type=int, help="Training epochs (timing: epochs measured). [default: the method's]")
@click.option("--held-out", type=int, help="baselines: classes held out of training (unseen:K). "
              "[default: a quarter of the classes, rounded up]")
@click.option("--skip-bad-images", is_flag=True, help="Every run drops unreadable images (counted) instead of stopping "
                                                      "(--set skip_bad_images=true).")
@click.option("--set", "options", multiple=True, metavar="KEY=VALUE",
              help="A training option for every run, e.g. lr_step=0 (repeatable).")
def reproduce(experiment, data, protocol, out, workers, methods, bits, seeds, kinds, study_name, settings,
              test, epochs, held_out, skip_bad_images, options) -> None:
    """Run EXPERIMENT (grid, timing, centers, toy, bound, study, baselines) and write its tables into --out.

    Runs go to OUT/runs/EXPERIMENT/; a rerun skips finished runs and resumes unfinished ones.
    Build the report with `lbhash report OUT`.
    """
    from lbhash._io import check_output_dir
    from lbhash.reproduce.experiments import Context, configure, validate
    from lbhash.reproduce.meta import META_FILE, read_meta, update_meta

    if experiment != "toy" and not data:
        raise InputError(f"experiment {experiment} needs --data")
    if workers < 1:
        raise InputError(f"--workers must be a positive integer, got {workers}")
    spec_values = _spec_values(experiment, _Lists(methods, bits, seeds, kinds, settings), study_name, test, held_out)
    overrides = _overrides(options)
    if skip_bad_images:
        overrides["skip_bad_images"] = True
    if epochs is not None:
        if experiment == "timing":
            spec_values["epochs"] = epochs
        else:
            overrides["epochs"] = epochs
    spec = configure(experiment, **spec_values)
    ctx = Context(data=data or "", out=out, protocol=protocol, workers=workers, overrides=overrides, report=click.echo)
    check_output_dir(out, "--out")
    validate(spec, ctx)  # nothing is created before every option and run config is checked
    if (out / META_FILE).is_file():
        read_meta(out / META_FILE)  # a meta.json this run cannot update fails now, not after training
    made = [p for p in (out, out / "runs") if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    try:
        spec.run(ctx)
    except BaseException:
        _remove_empty(out / "runs", *reversed(made))  # a failed first run leaves no empty folders behind
        raise
    key = f"study:{spec.study}" if experiment == "study" else experiment
    update_meta(out, key, spec, ctx, "lbhash " + " ".join(sys.argv[1:]))
    click.echo(f"{experiment}: tables written to {out}")


class _Lists(NamedTuple):
    """The lists given on the command line, as typed (None: not given): --methods, --bits, --seeds and
    --kinds comma-separated, --settings separated by ';'."""

    methods: str | None
    bits: str | None
    seeds: str | None
    kinds: str | None
    settings: str | None


def _spec_values(experiment, lists: _Lists, study_name, test, held_out) -> dict:
    """The experiment's own options given on the command line, as fields of its spec."""
    methods, bits, seeds, kinds, settings = lists
    for flag, given in (("--methods", methods), ("--kinds", kinds), ("--settings", settings), ("--bits", bits),
                        ("--seeds", seeds)):
        if given is not None and not given.replace(",", "").replace(";", "").strip():
            raise InputError(f"{flag} is empty: leave it out for the experiment's default, or name at least one")
    words = lambda text, sep: tuple(w.strip() for w in text.split(sep) if w.strip())  # noqa: E731
    values = {"methods": methods and words(methods, ","), "bits": bits and tuple(parse_int_list(bits, "--bits")),
              "seeds": seeds and tuple(parse_int_list(seeds, "--seeds")), "kinds": kinds and words(kinds, ","),
              "study": study_name, "settings": settings and words(settings, ";"), "test": test}
    values = {key: value for key, value in values.items() if value}  # the experiment's defaults for the others
    if held_out is not None:
        if experiment != "baselines":
            raise InputError("--held-out applies to the baselines experiment only")
        values["held_out"] = held_out
    return values


def _remove_empty(runs: Path, *made: Path) -> None:
    """Remove the experiments' run folders under `runs` that hold nothing, then `made` (folders
    this command created) when empty."""
    for folder in [*(runs.iterdir() if runs.is_dir() else ()), *made]:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _overrides(options) -> dict:
    """--set KEY=VALUE options: training values for every run."""
    from lbhash.runs.train_options import parse_yaml

    overrides = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set must look like KEY=VALUE, got {item!r}")
        overrides[key.strip().replace("-", "_")] = parse_yaml(value, f"--set {item}")
    return overrides
