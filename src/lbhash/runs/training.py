"""A run directory as the store that `lbhash.train.fit.fit` trains into (`DirectoryStore`): its first
files, each epoch's log line and checkpoint, a resumed run's checkpoint, and at the end its codes,
metrics and manifest from the arrays the fit hands it; `DirectoryStore.write` writes an in-memory fit
as the same files."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import torch

from lbhash._io import atomic_path, save_npz, temporary_name, write_json
from lbhash.data import Split, save_split
from lbhash.data.input_form import InputForm
from lbhash.errors import InputError
from lbhash.runs.metrics import write_finished
from lbhash.runs.rundir import (BEST, CHECKPOINT, CODES, CODES_SEEN, CONFIG, INPUT_FORM, LOG, SPLIT,
                                load_input_form, load_run_config, mark_failed, reopen_run, save_run_config,
                                truncate_log, verify_zip, write_log)
from lbhash.train.config import RunConfig
from lbhash.train.fit import Prepared, Trained
from lbhash.train.loop import Trainer
from lbhash.train.optim import check_further, load_scheduler_state
from lbhash.train.processes import process_rank
from lbhash.train.summary import DATA_SUMMARY


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


class DirectoryStore:
    """Run directory `run_dir` as a `RunStore`: a new run (`resume` False) or one to continue from its
    checkpoint, trained further to `epochs` in all where given (`lbhash train --resume --epochs N`)."""

    def __init__(self, run_dir: Path, resume: bool = False, epochs: int | None = None):
        self.run_dir, self.resumed, self.epochs = Path(run_dir), resume, epochs

    def begin(self, run: Prepared) -> Prepared:
        """Every check has happened before this writes anything: a new run then writes its first files,
        a resumed one loads its checkpoint, and one trained further (`epochs`) is reopened. Returns the
        run with the config and input form of the directory (a resumed run's, as they were written:
        this call's progress= is not)."""
        trainer = run.trainer
        if trainer.fabric.is_global_zero and not (self.run_dir / CONFIG).exists():
            _write_first_files(self.run_dir, trainer.exp.split, run.data_summary, run.input_form, run.config)
        trainer.fabric.barrier()
        self._load_checkpoint(trainer)
        if self.epochs is not None:
            _reopen(self.run_dir, trainer)
        if not (self.resumed and process_rank() == 0):
            return run
        config = load_run_config(self.run_dir)
        return dataclasses.replace(run, config=config, input_form=load_input_form(self.run_dir, config))

    def finish(self, trained: Trained) -> None:
        """codes_seen.npz and codes.npz, then metrics.json and the manifest, from what the fit holds."""
        save_split_codes(self.run_dir, trained.codes)
        write_finished(self.run_dir, trained.metrics)

    def failed(self, reason: str) -> None:
        mark_failed(self.run_dir, reason)

    @staticmethod
    def write(out: Path, trained: Trained) -> None:
        """Write an in-memory fit (`fit` without a store) as a finished run directory `out` (a new,
        empty directory): the files `lbhash train` writes, from memory."""
        fitted = trained.fitted
        _write_first_files(out, trained.split, trained.data_summary, fitted.input_form, fitted.config)
        write_log(out / LOG, fitted.history)
        for name, content in ((CHECKPOINT, trained.checkpoint), (BEST, trained.best)):
            if content is not None:
                with atomic_path(out / name) as tmp:
                    torch.save(content, tmp)
        save_split_codes(out, trained.codes)
        write_finished(out, trained.metrics)

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

    def _load_checkpoint(self, trainer: Trainer) -> None:
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


def save_split_codes(run_dir: Path, files: dict[str, dict[str, np.ndarray]]) -> None:
    """`split_codes`' arrays as codes_seen.npz, then codes.npz (last: it marks the codes as done)."""
    for part, name in (("seen", CODES_SEEN), ("all", CODES)):
        if part in files:
            save_npz(run_dir / name, **files[part])
