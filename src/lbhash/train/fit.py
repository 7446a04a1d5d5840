"""The one training driver: `fit` trains a model and its objective on a data set and returns what it
trained (`Trained`). It writes no file itself: given a `RunStore` (a run directory,
lbhash.runs.run_files.DirectoryStore) it starts or resumes the run there, hands it each epoch and, at the
end, what it trained. `RunDirectory.train` and `.resume` (`lbhash train`, `reproduce`) and `HashEncoder.fit`
all call it."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np
import torch

from lbhash.codes_file import codes_from_arrays
from lbhash.data import HashDataset, Split
from lbhash.errors import InputError
from lbhash.evaluate import map_label
from lbhash.methods import method_class
from lbhash.models import HashModel
from lbhash.train.builder import build_experiment
from lbhash.train.closed_form import fit_closed_form
from lbhash.train.config import TrainConfig, backbone_line, profile_line
from lbhash.train.loop import EpochStore, NonFiniteError, Trainer, check_logger
from lbhash.train.processes import check_accelerator, leave_process_group, process_rank
from lbhash.train.results import Fitted, run_metrics
from lbhash.train.split_codes import split_codes
from lbhash.train.summary import (LINE_EVERY_S, data_summary, describe_data, epoch_lines, notices_to_stderr,
                                  result_line, step_lines)

logger = logging.getLogger("lbhash")


@dataclass
class Trained:
    """What `fit` trained: the fitted model, its metrics.json's metrics, the arrays of its codes files
    (`split_codes`' parts), and what the other files of a run directory hold. `checkpoint` and `best`
    (best.pt's, None unless `select: best-val`) are kept for a fit without a store, which
    `DirectoryStore.write` turns into a run directory later; with a store they are on its disk (None)."""
    fitted: Fitted
    metrics: dict[str, Any]
    codes: dict[str, dict[str, np.ndarray]]
    split: Split
    data_summary: dict
    checkpoint: dict | None
    best: dict | None


class RunStore(EpochStore, Protocol):
    """Where `fit` keeps a run (a run directory): each epoch (`EpochStore`), and around them the run's
    start and end. Only rank 0 writes; every process calls `begin`."""

    run_dir: Path

    def begin(self, trainer: Trainer) -> None:
        """A new run's first files, or a resumed run's checkpoint loaded into `trainer`, whose
        `run_config` and `input_form` become those the store holds."""
        ...

    def finish(self, trained: Trained) -> None:
        """The finished run's codes, metrics and manifest, from the arrays in hand (rank 0)."""
        ...

    def failed(self, reason: str) -> None:
        """Mark the run as failed for a reason that would fail it again (rank 0)."""
        ...


def prepare(cfg: TrainConfig, split: Split | None, dataset: HashDataset | None, progress: bool | None,
            on_epoch_end: Callable[[int], None] | None, store: EpochStore | None = None) -> Trainer:
    """Check the run's options, build its experiment (on `split`, or a new one) and its
    trainer, writing nothing. `progress` overrides cfg.progress (it is not saved); where stderr
    is not a terminal, progress is one line per epoch instead of bars."""
    first = process_rank() == 0
    if progress is not None:
        cfg = cfg.replace(progress=progress)
    check_accelerator(cfg.runtime.accelerator)
    check_logger(cfg.runtime.logger, store)
    exp = build_experiment(cfg, split, dataset)
    if exp.skipped_images and first:
        logger.warning("skipped %d unreadable image(s) (--skip-bad-images)", exp.skipped_images)
    summary, saved_cfg = data_summary(exp), exp.cfg
    lines = steps = None
    terminal = on_a_terminal()
    if exp.cfg.runtime.progress and first:
        # on a terminal the bar is erased as its epoch ends, so every epoch leaves its line; in a log
        # (no bars: their redraws would fill it) a line for the first, last and evaluated epochs, at
        # least every LINE_EVERY_S between them, and a step line inside an epoch every STEP_EVERY_S
        lines = epoch_lines(exp.cfg.variant, exp.cfg.recipe.epochs, map_label(exp.topk, len(exp.split.database)),
                            every_s=0.0 if terminal else LINE_EVERY_S)
        steps = None if terminal else step_lines(exp.cfg.variant, exp.cfg.recipe.epochs)
    if exp.cfg.runtime.progress and not terminal:
        exp.cfg = exp.cfg.replace(progress=False)

    def at_epoch_end(epoch: int, record: dict) -> None:  # the epoch's line (where there are no bars), then the caller's
        if lines is not None:
            lines(epoch, record)
        if on_epoch_end is not None:
            on_epoch_end(epoch)

    trainer = Trainer(exp, store, at_epoch_end, run_config=saved_cfg, data_summary=summary)
    trainer.on_step = steps
    return trainer


def on_a_terminal() -> bool:
    """Whether progress goes to a terminal (bars) or to a log (lines)."""
    return sys.stderr.isatty()


def announce(trainer: Trainer) -> None:
    """What the run trains on, once every check has passed (rank 0)."""
    if process_rank() == 0:
        logger.info(profile_line(trainer.run_config))
        logger.info(describe_data(trainer.data_summary))
        backbone = backbone_line(trainer.run_config)
        if backbone:
            logger.info(backbone)


def train_to_end(trainer: Trainer) -> None:
    """Train what is left: a closed-form method's one fit, else the epochs; then load the
    weights of the epoch `select` keeps."""
    if method_class(trainer.cfg.hashing.method).closed_form:  # baselines: one fit, no epochs left
        fit_closed_form(trainer)
    trainer.fit()
    best = trainer.selection.best() if trainer.recipe.select == "best-val" else None
    if best is not None:
        trainer.learner.model.load_state_dict(best["model"])


def fit(cfg: TrainConfig, dataset: HashDataset | None = None, split: Split | None = None,
        store: RunStore | None = None, progress: bool | None = None,
        on_epoch_end: Callable[[int], None] | None = None) -> Trained | None:
    """Train `cfg` on `dataset` (default: load cfg.dataset.data) and `split` (default: drawn by the
    config), in memory, or into `store` (which may resume what it holds), and return what it trained;
    None in the other processes of a multi-process run (only a store trains on several devices). It
    reports on the "lbhash" logger (stderr where logging is not configured)."""
    if cfg.runtime.devices > 1 and store is None:
        raise InputError(f"devices={cfg.runtime.devices}: an in-memory fit trains in one process; `lbhash train "
                         "--devices N` trains a run directory on several")
    with notices_to_stderr():
        trainer = prepare(cfg, split, dataset, progress, on_epoch_end, store)
        if store is not None:
            store.begin(trainer)
        announce(trainer)
        try:
            trained = _train_and_encode(trainer, keep_state=store is None)
            if trained is not None and store is not None:
                store.finish(trained)
        except (InputError, NonFiniteError) as err:
            # deterministic: the same run would fail again, so --resume says why instead of retrying;
            # anything else (a kill, a full disk, the caller's callback) leaves a run --resume continues
            if store is not None and trainer.fabric.is_global_zero:
                store.failed(str(err))
            raise
        if trained is not None:
            logger.info(result_line(trained.metrics, None if store is None else store.run_dir))
    return trained


def _train_and_encode(trainer: Trainer, keep_state: bool) -> Trained | None:
    """Train what is left, encode the split (rank 0) and measure it; None in the other processes.
    `keep_state`: keep the last checkpoint's and the best epoch's state in memory."""
    from lightning_fabric.utilities.apply_func import move_data_to_device  # Lightning loads with the first fit

    train_to_end(trainer)
    first = trainer.fabric.is_global_zero
    codes = split_codes(trainer) if first and trainer.cfg.recipe.test else {}
    trainer.fabric.barrier()
    for run_logger in trainer.fabric.loggers:
        run_logger.finalize("success")
    leave_process_group(trainer.fabric)
    if not first:
        return None
    read = {part: codes_from_arrays(arrays, f"{part} codes") for part, arrays in codes.items()}
    metrics = run_metrics(trainer.run_config, trainer.history, trainer.exp.split, read.get("all"), read.get("seen"))
    checkpoint = best = None
    if keep_state:
        epoch = trainer.history[-1]["epoch"] if trainer.history else 0
        checkpoint = move_data_to_device({**trainer.state(epoch), "learner": trainer.learner.state_dict()}, "cpu")
        best = trainer.selection.best() if trainer.cfg.recipe.select == "best-val" else None
    fitted = Fitted(as_loaded(trainer.learner.model), trainer.run_config, trainer.input_form, trainer.history)
    return Trained(fitted, metrics, codes, trainer.exp.split, trainer.data_summary, checkpoint, best)


def as_loaded(model: HashModel) -> HashModel:
    """The trained model as `load_run_model` would build it from the run: on the CPU, with
    float32 weights, in eval mode (so that it encodes as a loaded run does, bit for bit), and
    without the last step's gradients."""
    model.zero_grad(set_to_none=True)
    return model.to("cpu", torch.float32).eval()


# --- training time per epoch of several configurations, their epochs alternating so that all see the
# same machine state; nothing is written (`lbhash reproduce timing`, benchmarks/bench_overhead.py)


class EpochTimes(NamedTuple):
    seconds: list[float]      # per epoch, in order
    steps_per_epoch: int

    def median(self, skip_first: bool = True) -> float:
        """Median seconds per epoch; the first epoch (warm-up) is left out when there are others."""
        values = self.seconds[1:] if skip_first and len(self.seconds) > 1 else self.seconds
        return float(np.median(values))


def epoch_times(configs: dict[str, TrainConfig], epochs: int) -> dict[str, EpochTimes]:
    """Seconds of each of `epochs` epochs for every labelled configuration (learning-rate
    schedules off, no evaluation, no checkpoints)."""
    trainers = {label: Trainer(build_experiment(cfg.replace(epochs=epochs, lr_step=0, progress=False)))
                for label, cfg in configs.items()}  # in memory: nothing written
    seconds: dict[str, list[float]] = {label: [] for label in trainers}
    for epoch in range(1, epochs + 1):
        for label, trainer in trainers.items():
            seconds[label].append(trainer.train_epoch(epoch)["seconds"])
    return {label: EpochTimes(seconds[label], len(trainers[label].batches)) for label in trainers}
