"""Runs trained once per test session and shared: a test that only reads a run takes the bank's
copy (`runs.path(NAME)`), a test that changes one takes its own copy (`runs.copy(NAME, dest)`).
The `runs` fixture (conftest.py) is the bank; what each name trains is in RECIPES. Under
pytest-xdist the workers share one bank: the first to need a run trains it, under a file lock,
and the others wait for it instead of training it again."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from pathlib import Path
from typing import Callable

# the small digits runs of the fast suite: 16 bits, one hidden layer, Hadamard centers
DIGITS = dict(data="digits", bits=16, hidden=[64], centers="hadamard", progress=False)


def _finished(**changes):
    def build(path):
        from lbhash.runs import RunDirectory
        from lbhash.train import TrainConfig

        RunDirectory(path).train(TrainConfig(**{**DIGITS, **changes}))
    return build


def _closed_form(method, **values):
    def build(path):
        from lbhash.runs import RunDirectory
        from lbhash.train import TrainConfig

        RunDirectory(path).train(TrainConfig(data="digits", method=method, bits=16, progress=False, **values))
    return build


def _finished_with_cuts(**changes):
    """A finished run that left copies of itself after each epoch (helpers.copies_at): what a
    kill after that epoch leaves, for the cut-at-N runs, without training them again."""
    def build(path):
        from helpers import copies_at
        from lbhash.runs import RunDirectory
        from lbhash.train import TrainConfig

        cuts = _cuts_of(path)
        shutil.rmtree(cuts, ignore_errors=True)  # of a build that failed half-way
        cfg = TrainConfig(**{**DIGITS, **changes})
        RunDirectory(path).train(cfg, on_epoch_end=copies_at({e: (path, cuts / f"cut-at-{e}") for e in range(1, cfg.recipe.epochs)}))
    return build


def _cuts_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.cuts")


def _cut(finished, epoch):
    def build(path):
        done = built_once(path.with_name(finished), RECIPES[finished])
        shutil.copytree(_cuts_of(done) / f"cut-at-{epoch}", path)
    return build


def _reproduced(experiment):
    def build(path):
        from click.testing import CliRunner

        from lbhash.cli import main

        if experiment in ADOPTED:  # a cell of the same values as another experiment's run: the runner adopts it
            source, run, cell = ADOPTED[experiment]
            made = built_once(path.with_name(f"reproduce-{source}"), RECIPES[f"reproduce-{source}"])
            shutil.copytree(made / "runs" / source / run, path / "runs" / experiment / cell)
            (path / "runs" / experiment / cell / "cell.json").unlink()  # as a run made by hand
        with contextlib.ExitStack() as stack:
            if experiment == "timing":
                stack.enter_context(_scripted_epoch_times())
            result = CliRunner().invoke(main, ["reproduce", experiment, *REPRODUCED[experiment], "--out", str(path)])
        assert result.exit_code == 0, result.output
    return build


# the seconds per epoch the bank's "reproduce-timing" reports for each variant (its first epoch, a
# warm-up the median leaves out, at 9 s); the measurement itself: make test-slow
# (tests/reproduce/test_reproduce.py::test_timing_measures_every_variants_epochs)
SCRIPTED_SECONDS = {"bce": 2.0, "cauchy": 2.5, "ours": 3.0}


@contextlib.contextmanager
def _scripted_epoch_times():
    """`lbhash reproduce timing` with SCRIPTED_SECONDS in place of timed epochs: the experiments
    are built (their steps per epoch are real), none is trained."""
    import lbhash.train.fit as timing
    from lbhash.data.base import EpochShard
    from lbhash.train.builder import build_experiment

    def scripted(configs, epochs):
        times = {}
        for label, cfg in configs.items():
            exp = build_experiment(cfg.replace(epochs=epochs, lr_step=0, progress=False))
            steps = len(exp.dataset.train_batches(exp.split.train, EpochShard(exp.cfg.recipe.batch_size)))  # as the loop counts them
            times[label] = timing.EpochTimes([9.0] + [SCRIPTED_SECONDS[label]] * (epochs - 1), steps)
        return times
    real, timing.epoch_times = timing.epoch_times, scripted
    try:
        yield
    finally:
        timing.epoch_times = real


TINY = ["--set", "hidden=[32]", "--set", "lr_step=0"]
# `lbhash reproduce EXPERIMENT` at tiny size, each in its own output directory: the bank's run
# "reproduce-EXPERIMENT" (tests/reproduce/test_report_experiments.py gives the Setup row each one reports)
REPRODUCED = {
    # CSQ and CSQ_D, the test mAP after epoch 1 too (what bound's cell asks for)
    "grid": ["--data", "digits", "--methods", "csq", "--bits", "16", "--seeds", "0", "--epochs", "2",
             "--set", "centers=hadamard", "--set", "eval_every=1", *TINY],
    "bound": ["--data", "digits", "--bits", "16", "--epochs", "2", "--set", "centers=hadamard", *TINY],
    # its seconds scripted (SCRIPTED_SECONDS): nothing trains
    "timing": ["--data", "digits", "--bits", "16", "--epochs", "2", "--set", "centers=hadamard", *TINY],
    "centers": ["--data", "digits", "--kinds", "hadamard,random", "--bits", "16", "--seeds", "0", "--epochs", "2",
                *TINY],
    "toy": ["--bits", "8"],
    # LSH, CSQ and CSQ_D at two seeds, on the default protocol with its 3 held-out classes
    "baselines": ["--data", "digits", "--methods", "lsh,csq", "--bits", "16", "--seeds", "0,1", "--set", "epochs=1"],
    # one seed and one setting: the spread over seeds (tests/reproduce/test_studies.py, test_report.py) and
    # the comparison of two settings (test_studies.py) are rendered from tables those tests write
    "study": ["--study", "tiny", "--data", "digits", "--methods", "csq", "--settings", "base", "--bits", "16",
              "--seeds", "0", "--set", "epochs=2", "--set", "centers=hadamard", *TINY],
}

# experiment -> (experiment, its run, the cell): bound's cell and centers' Hadamard cell have the values
# of the grid's CSQ_D run (eval_every aside, which a run without a validation share does not hash)
ADOPTED = {"bound": ("grid", "csq_D-16bits-seed0", "csq_D-16bits-seed0"),
           "centers": ("grid", "csq_D-16bits-seed0", "hadamard-16bits-seed0")}

RECIPES = {
    # CSQ, 2 epochs; lr 1e-3 warmed up for 1 epoch, then x0.1 every 2 epochs (a schedule resume continues)
    "csq": _finished(epochs=2, lr=1e-3, warmup_epochs=1, lr_step=2, lr_gamma=0.1, eval_every=0),
    "csq-4": _finished(epochs=4, lr=1e-3, warmup_epochs=1, lr_step=2, lr_gamma=0.1, eval_every=0),  # 4 epochs
    # CSQ_D, 3 epochs, validated every epoch (the recommended profile's share of 0.1, best.pt kept): the
    # bank's finished _D run, and what the cut runs finish as
    "csq_D-3": _finished_with_cuts(epochs=3, lbhash=True, eval_every=1),
    "cut-at-1": _cut("csq_D-3", 1),  # "csq_D-3" as a kill after epoch 1 leaves it
    "cut-at-2": _cut("csq_D-3", 2),  # ... after epoch 2
    "itq": _closed_form("itq", seed=3),  # ITQ at 16 bits, seed 3: `lbhash train --data digits --method itq ...`
    **{f"reproduce-{experiment}": _reproduced(experiment) for experiment in REPRODUCED},
}


def built_once(where: Path, build: Callable[[Path], object]) -> Path:
    """build(where) unless a finished build is there; one process at a time builds (a lock file
    beside it), and a build that failed half-way is removed and made again."""
    done = where.with_name(f".{where.name}.done")
    if not done.exists():
        where.parent.mkdir(parents=True, exist_ok=True)
        with _locked(where.with_name(f".{where.name}.lock")):
            if not done.exists():
                if where.exists():
                    shutil.rmtree(where)
                build(where)
                done.touch()
    return where


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as handle:  # the test's own timeout bounds the wait
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RunBank:
    def __init__(self, root: Path):
        self.root = root

    def path(self, name: str) -> Path:
        """The bank's run NAME, trained on first use: read it, never change it."""
        return built_once(self.root / name, RECIPES[name])

    def copy(self, name: str, dest: Path) -> Path:
        """A copy of run NAME at dest, for a test that changes it."""
        shutil.copytree(self.path(name), dest)
        return dest
