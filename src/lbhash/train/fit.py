"""The training core, in memory: `fit` trains a model and its objective on a data set and
returns what it trained (`Trained`), writing no file.

`prepare` builds the experiment and trainer and `train_to_end` trains it; the run directory
(lbhash.runs.run_dir) is a layer on top that passes a store to `prepare`. `HashEncoder.fit` uses `fit`.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from lbhash.codes_file import codes_from_arrays
from lbhash.data import HashDataset, Split
from lbhash.data.input_form import InputForm, form_of
from lbhash.errors import InputError
from lbhash.evaluate import map_label
from lbhash.methods import method_class
from lbhash.models import HashModel
from lbhash.train.builder import build_experiment
from lbhash.train.closed_form import fit_closed_form
from lbhash.train.config import RunConfig, TrainConfig, backbone_line, profile_line
from lbhash.train.loop import EpochStore, Trainer, check_logger
from lbhash.train.processes import check_accelerator, leave_process_group, process_rank
from lbhash.train.results import Fitted, run_metrics
from lbhash.train.split_codes import split_codes
from lbhash.train.summary import (LINE_EVERY_S, data_summary, describe_data, epoch_lines, notices_to_stderr,
                                  result_line, step_lines)

logger = logging.getLogger("lbhash")


@dataclass
class Prepared:
    """A run ready to train, with what its config.yaml, input.json and data.json hold."""
    trainer: Trainer
    config: RunConfig
    input_form: InputForm
    data_summary: dict


@dataclass
class Trained:
    """What `fit` trained, in memory: the fitted model, its metrics.json's metrics, and what the
    other files of a run directory would hold (lbhash.runs.training.write_run writes them; `best`:
    best.pt's, None unless `select: best-val`)."""
    fitted: Fitted
    metrics: dict[str, Any]
    codes: dict[str, dict[str, np.ndarray]]
    split: Split
    data_summary: dict
    checkpoint: dict
    best: dict | None


def prepare(cfg: TrainConfig, split: Split | None, dataset: HashDataset | None, progress: bool | None,
            on_epoch_end: Callable[[int], None] | None, store: EpochStore | None = None) -> Prepared:
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

    trainer = Trainer(exp, store, at_epoch_end)
    trainer.on_step = steps
    return Prepared(trainer, saved_cfg, form_of(exp.dataset, exp.cfg.dataset.normalize, exp.cfg.dataset.image_size), summary)


def on_a_terminal() -> bool:
    """Whether progress goes to a terminal (bars) or to a log (lines)."""
    return sys.stderr.isatty()


def announce(run: Prepared) -> None:
    """What the run trains on, once every check has passed (rank 0)."""
    if process_rank() == 0:
        logger.info(profile_line(run.config))
        logger.info(describe_data(run.data_summary))
        backbone = backbone_line(run.config)
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


def fit(cfg: TrainConfig, dataset: HashDataset | None = None, progress: bool | None = None,
        on_epoch_end: Callable[[int], None] | None = None) -> Trained:
    """Train `cfg` on `dataset` (default: load cfg.dataset.data) in memory, on one device, and return
    what it trained. It reports on the "lbhash" logger as `RunDirectory.train` (lbhash.runs) does."""
    from lightning.fabric.utilities.apply_func import move_data_to_device  # Lightning loads with the first fit

    if cfg.runtime.devices > 1:
        raise InputError(f"devices={cfg.runtime.devices}: an in-memory fit trains in one process; `lbhash train "
                         "--devices N` trains a run directory on several")
    with notices_to_stderr():
        run = prepare(cfg, None, dataset, progress, on_epoch_end)
        trainer = run.trainer
        announce(run)
        train_to_end(trainer)
        codes = split_codes(trainer) if trainer.cfg.recipe.test else {}
        leave_process_group(trainer.fabric)
        read = {part: codes_from_arrays(arrays, f"{part} codes") for part, arrays in codes.items()}
        metrics = run_metrics(run.config, trainer.history, trainer.exp.split, read.get("all"), read.get("seen"))
        model = as_loaded(trainer.learner.model)
        epoch = trainer.history[-1]["epoch"] if trainer.history else 0
        checkpoint = move_data_to_device({**trainer.state(epoch), "learner": trainer.learner.state_dict()}, "cpu")
        best = trainer.selection.best() if trainer.cfg.recipe.select == "best-val" else None
        logger.info(result_line(metrics))
    fitted = Fitted(model, run.config, run.input_form, trainer.history)
    return Trained(fitted, metrics, codes, trainer.exp.split, run.data_summary, checkpoint, best)


def as_loaded(model: HashModel) -> HashModel:
    """The trained model as `load_run_model` would build it from the run: on the CPU, with
    float32 weights, in eval mode (so that it encodes as a loaded run does, bit for bit), and
    without the last step's gradients."""
    model.zero_grad(set_to_none=True)
    return model.to("cpu", torch.float32).eval()
