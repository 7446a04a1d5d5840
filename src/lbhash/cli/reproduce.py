"""`lbhash reproduce EXPERIMENT`: run one of the paper's experiments into a results directory; `lbhash
report`: the markdown report of a reproduction directory, from its tables alone; `lbhash centers` and
`lbhash toy-mvb`: the class centers and the surrogate's toy on their own."""

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


@click.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where to write the report [default: report.md in DIRECTORY]; figures go "
                   "to a 'figures' folder beside it.")
@click.option("--bits", type=int, default=None,
              help="Bit length of the curves, convergence and t-SNE sections "
                   "[default: the largest in grid.csv].")
@click.option("--tsne-pairs", default=1, show_default=True, type=click.IntRange(min=0),
              help="How many base/_D pairs of codes_sample.npz to embed with t-SNE.")
@click.option("--tsne-points", default=5000, show_default=True, type=click.IntRange(min=10),
              help="At most this many codes per t-SNE embedding (a seeded subsample).")
def report(directory: Path, out: Path | None, bits: int | None, tsne_pairs: int, tsne_points: int) -> None:
    """Write a markdown report with PNG figures from the result tables in DIRECTORY.

    DIRECTORY holds meta.json and the tables of any mix of `lbhash reproduce` experiments:
    grid.csv, curves.csv, epochs.csv, codes_sample.npz (grid), timing.csv, centers.csv,
    bound.csv, toy.json and toy_probs.npz (toy), study.csv and study_epochs.csv (study),
    baselines.csv (baselines). Each present table gets its section; the others are left out.
    Nothing is retrained.
    """
    from lbhash._io import check_output_file
    from lbhash.reproduce.report import write_report

    check_output_file(out if out is not None else directory / "report.md", "--out")
    path = write_report(directory, out=out, bits=bits, tsne_pairs=tsne_pairs, tsne_points=tsne_points)
    click.echo(str(path))


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
    from lbhash.runs.metrics import make_centers

    click.echo("\n".join(make_centers(_parse_int(bits, "--bits"), _parse_int(classes, "--classes"), kind,
                                       _parse_int(seed, "--seed"), out, cache=not no_cache, canonical=canonical)))


INPUTS_NOTE = (
    "Inputs: each training/evaluation sample is a code b in {-1,+1}^bits drawn from the true "
    "joint (softmax of N(0,1) logits over all 2^bits codes); the surrogate sees l = b + sigma*eps, "
    "eps ~ N(0,1) (sigma = --noise; 0 = clean inputs) and is trained with L_pi against bin(l). "
    "Its estimate is the mean over N fresh samples of the product of its block softmaxes "
    "(dropout off). Caveat: bin(l) is a deterministic function of l, so a well-trained surrogate "
    "decodes the sign pattern and its mean over N samples is close to the histogram of those N "
    "samples. That histogram is the sampling floor: infinite while codes with real mass are "
    "unseen, about (K-1)/(2N) once all K codes are seen. The paper's 0.008 from N = 100 samples "
    "of K = 256 codes is below this floor, and below even the floor for N = 10,000 (about 0.013)."
)


@click.command("toy-mvb")
@click.option("--bits", default="both", show_default=True, help="8, 16 (two blocks of 8) or both.")
@click.option("--train-samples", default=10_000, show_default=True, type=int,
              help="Samples the surrogate is trained on.")
@click.option("--eval-samples", default="100,10000,100000", show_default=True,
              help="Numbers N of fresh evaluation samples, comma-separated (one column each).")
@click.option("--noise", default=0.1, show_default=True, type=float,
              help="Std of the Gaussian noise added to the +/-1 codes (0 = clean inputs).")
@click.option("--epochs", default=20, show_default=True, type=int,
              help="Training epochs (Adam, lr 1e-3).")
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/toy-mvb"), show_default=True,
              help="Directory for toy_mvb.json and the bar plots.")
def toy_mvb(bits: str, train_samples: int, eval_samples: str, noise: float, epochs: int,
            batch_size: int, seed: int, out: Path) -> None:
    """Estimate a random multivariate Bernoulli with the block surrogate P_pi.

    Prints KL(real || estimate) for the surrogate, the naive product of marginals and the
    empirical histogram (the sampling floor) for every N, writes toy_mvb.json and one PNG per
    bit length into --out.
    """
    import time

    from lbhash._io import write_json
    from lbhash.reproduce.toy import ToyConfig, format_table, paper_comparison, plot_toy, run_toy

    # Validate every setting before any training starts
    choices = {"8": [8], "16": [16], "both": [8, 16]}
    if bits.lower() not in choices:
        raise InputError(f"--bits must be 8, 16 or both, got {bits!r}")
    configs = [ToyConfig(bits=b, train_samples=train_samples,
                         eval_samples=tuple(parse_int_list(eval_samples, "--eval-samples")),
                         noise=noise, epochs=epochs, batch_size=batch_size, seed=seed)
               for b in choices[bits.lower()]]
    click.echo(INPUTS_NOTE)
    record = {}
    for cfg in configs:
        start = time.perf_counter()
        result = run_toy(cfg)
        png = out / f"toy_mvb_{cfg.bits}bit.png"
        plot_toy(result, png)
        record[str(cfg.bits)] = {**result.to_dict(), "seconds": time.perf_counter() - start, "plot": png.name}
        click.echo("")
        click.echo(format_table(result))
        for line in paper_comparison(result):
            click.echo(f"  {line}")
        click.echo(f"  ({record[str(cfg.bits)]['seconds']:.1f} s; training {result.train['seconds']:.1f} s, "
                   f"last-epoch pattern accuracy {result.train['final_epoch_pattern_accuracy']:.4f}; "
                   f"plot {png})")
    write_json(out / "toy_mvb.json", record)
    click.echo(f"\nwrote {out / 'toy_mvb.json'}")
