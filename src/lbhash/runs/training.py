"""Training a run directory once lbhash.runs.run_dir has decided there is something to train: `open_run`
builds its trainer (lbhash.train.fit.prepare, the directory as its `RunStore`), then `train_open_run`
trains it; `write_run` writes the same files from an in-memory fit."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from lbhash._io import atomic_path, save_npz, temporary_name, write_json
from lbhash.codes_file import codes_from_arrays
from lbhash.data import HashDataset, Split, load_data, load_split, save_split
from lbhash.data.input_form import InputForm
from lbhash.errors import InputError
from lbhash.runs.metrics import finish_run
from lbhash.runs.rundir import (BEST, CHECKPOINT, CODES, CODES_SEEN, CONFIG, INPUT_FORM, LOG, SPLIT, TrainedRun,
                                load_input_form, load_run_config, mark_failed, reopen_run, run_data_spec,
                                save_run_config, truncate_log, verify_zip, write_log)
from lbhash.train.config import RunConfig, TrainConfig
from lbhash.train.fit import Trained, announce, as_loaded, prepare, train_to_end
from lbhash.train.loop import NonFiniteError, Trainer
from lbhash.train.optim import check_further, load_scheduler_state
from lbhash.train.processes import leave_process_group, process_rank
from lbhash.train.results import Fitted
from lbhash.train.split_codes import split_codes
from lbhash.train.summary import DATA_SUMMARY


@dataclass
class OpenRun:
    """A run ready to train, with what its config.yaml and input.json hold."""
    trainer: Trainer
    config: RunConfig
    input_form: InputForm
    out: Path


def open_run(cfg: TrainConfig, out: Path, resume: bool, epochs: int | None, progress: bool | None,
             dataset: HashDataset | None, on_epoch_end: Callable[[int], None] | None) -> OpenRun:
    """Build the run's experiment and trainer (`lbhash.train.fit.prepare`, with the run
    directory as its store); every check happens before the run writes anything. A new run
    then writes its first files, a resumed one loads its checkpoint, and one trained further
    (`epochs`) is reopened."""
    first = process_rank() == 0
    store = RunStore(out)
    if resume and dataset is None:  # the run's own data, found from any working directory
        dataset = load_data(run_data_spec(out, cfg))
    run = prepare(cfg, load_split(out / SPLIT) if resume else None, dataset, progress, on_epoch_end, store)
    trainer, saved_cfg, form = run.trainer, run.config, run.input_form
    if trainer.fabric.is_global_zero and not (out / CONFIG).exists():
        _write_first_files(out, trainer.exp.split, run.data_summary, form, saved_cfg)
    trainer.fabric.barrier()
    store.resume(trainer)
    if epochs is not None:
        _reopen(out, trainer)
    announce(run)
    if resume and first:  # what the run directory holds (this call's progress= is not written)
        saved_cfg = load_run_config(out)
        form = load_input_form(out, saved_cfg)
    return OpenRun(trainer, saved_cfg, form, out)


def _write_first_files(out: Path, split: Split, summary: dict, form: InputForm, cfg: RunConfig) -> None:
    save_split(out / SPLIT, split)
    write_json(out / DATA_SUMMARY, summary)
    write_json(out / INPUT_FORM, form.to_dict())
    save_run_config(out, cfg)  # last: its presence marks a run


def _reopen(out: Path, trainer: Trainer) -> None:
    """Before a run trains further to cfg.recipe.epochs: check that there is something to train, then
    make it unfinished and record the new total in config.yaml."""
    cfg = trainer.cfg
    check_further(cfg.recipe, cfg.recipe.epochs, trainer.start_epoch, trainer.selection.stopped, str(out))
    if trainer.fabric.is_global_zero:
        reopen_run(out)  # first: a kill from here on leaves a run that --resume continues
        save_run_config(out, load_run_config(out).replace(epochs=cfg.recipe.epochs))
    trainer.fabric.barrier()


class RunStore:
    """The files a trainer writes into run directory `run_dir` while it trains."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)

    def save_best(self, best: dict) -> None:
        """best.pt, atomically (a kill never leaves half of it)."""
        path = self.run_dir / BEST
        tmp = temporary_name(path)
        torch.save(best, tmp)
        os.replace(tmp, path)

    def load_best(self) -> dict | None:
        path = self.run_dir / BEST
        return torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None

    def loggers(self, cfg) -> list:
        """Fabric loggers of the run: TensorBoard event files in RUN_DIR/tensorboard when asked."""
        if cfg.runtime.logger != "tensorboard":
            return []
        from lightning.fabric.loggers import TensorBoardLogger

        return [TensorBoardLogger(root_dir=str(self.run_dir / "tensorboard"), name="", version="")]

    def record(self, trainer: Trainer, epoch: int, record: dict) -> None:
        """The epoch's log line (rank 0), then its checkpoint."""
        if trainer.fabric.is_global_zero:
            with open(self.run_dir / LOG, "a") as fh:
                fh.write(json.dumps(record, allow_nan=False) + "\n")
        path = self.run_dir / CHECKPOINT
        tmp = temporary_name(path)  # unique: only rank 0 writes it, and its lock keeps others out
        trainer.fabric.save(tmp, trainer.state(epoch))
        if trainer.fabric.is_global_zero:
            os.replace(tmp, path)  # atomic: a kill never leaves a broken checkpoint
        trainer.fabric.barrier()

    def resume(self, trainer: Trainer) -> None:
        """Continue from the checkpoint; without one, from the start (dropping any log lines of
        an epoch that had not reached its checkpoint)."""
        path = self.run_dir / CHECKPOINT
        if not path.is_file():
            if trainer.fabric.is_global_zero and (self.run_dir / LOG).exists():
                truncate_log(self.run_dir / LOG, 0)
            return
        verify_zip(path)
        state = {"learner": trainer.learner}
        try:
            rest = trainer.fabric.load(path, state, weights_only=True)
        except Exception as err:  # unsafe content (refused, never run), a foreign file, another model's weights
            raise InputError(f"{path}: not a checkpoint of this run ({type(err).__name__})") from None
        for opt, sd in zip(trainer.optimizers, rest["optimizers"]):
            opt.load_state_dict(sd)
        for sched, sd in zip(trainer.schedulers, rest["schedulers"]):
            load_scheduler_state(sched, sd, trainer.cfg.recipe)
        if "selection" in rest:
            trainer.selection.load_state_dict(rest["selection"])
        trainer.start_epoch = int(rest["epoch"])
        if trainer.fabric.is_global_zero:
            trainer.history = truncate_log(self.run_dir / LOG, trainer.start_epoch)


# --- training it ------------------------------------------------------------------------------

def train_open_run(run: OpenRun) -> TrainedRun | None:
    trainer = run.trainer
    try:
        train_to_end(trainer)
        query_codes = write_codes(trainer, run.out) if trainer.fabric.is_global_zero and trainer.cfg.recipe.test else None
        trainer.fabric.barrier()
        for run_logger in trainer.fabric.loggers:
            run_logger.finalize("success")
        leave_process_group(trainer.fabric)
        if not trainer.fabric.is_global_zero:
            return None
        metrics = finish_run(run.out)
        fitted = Fitted(as_loaded(trainer.learner.model), run.config, run.input_form, trainer.history)
        return TrainedRun(metrics, fitted, query_codes)
    except (InputError, NonFiniteError) as err:
        # deterministic: the same run would fail again, so --resume says why instead of retrying;
        # anything else (a kill, a full disk, the caller's callback) leaves a run --resume continues
        if trainer.fabric.is_global_zero:
            mark_failed(run.out, str(err))
        raise


# --- a run directory from an in-memory fit ----------------------------------------------------

def write_run(out: Path, trained: Trained) -> dict[str, Any]:
    """Write what `lbhash.train.fit.fit` trained as a finished run directory `out` (a new, empty
    directory): the files `lbhash train` writes, from memory. Returns its metrics.json."""
    fitted = trained.fitted
    _write_first_files(out, trained.split, trained.data_summary, fitted.input_form, fitted.config)
    write_log(out / LOG, fitted.history)
    for name, content in ((CHECKPOINT, trained.checkpoint), (BEST, trained.best)):
        if content is not None:
            with atomic_path(out / name) as tmp:
                torch.save(content, tmp)
    save_split_codes(out, trained.codes)
    return finish_run(out)


def write_codes(trainer: Trainer, run_dir: Path) -> dict | None:
    """Encode query and database with the trained model (`split_codes`) into codes.npz (none
    without queries); under unseen:K, first the seen-class parts into codes_seen.npz. Returns
    codes.npz as `load_codes_file` reads it, or None without queries."""
    files = split_codes(trainer)
    save_split_codes(run_dir, files)
    return codes_from_arrays(files["all"], str(run_dir / CODES)) if "all" in files else None


def save_split_codes(run_dir: Path, files: dict[str, dict[str, np.ndarray]]) -> None:
    """`split_codes`' arrays as codes_seen.npz, then codes.npz (last: it marks the codes as done)."""
    for part, name in (("seen", CODES_SEEN), ("all", CODES)):
        if part in files:
            save_npz(run_dir / name, **files[part])
