"""The run directory as the training core's store: each finished epoch's line in log.jsonl
and its checkpoint.pt (atomic), best.pt for `select: best-val`, the run's TensorBoard event
files, and resuming a trainer from its checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lbhash._io import temporary_name
from lbhash.errors import InputError
from lbhash.train.loop import Trainer
from lbhash.train.optim import load_scheduler_state
from lbhash.runs.rundir import BEST, CHECKPOINT, LOG, truncate_log, verify_zip


class RunStore:
    """The files a trainer writes into run directory `run_dir` while it trains."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.best_path = self.run_dir / BEST

    def loggers(self, cfg) -> list:
        """Fabric loggers of the run: TensorBoard event files in RUN_DIR/tensorboard when asked."""
        if cfg.logger != "tensorboard":
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
            load_scheduler_state(sched, sd, trainer.cfg)
        if "selection" in rest:
            trainer.selection.load_state_dict(rest["selection"])
        trainer.start_epoch = int(rest["epoch"])
        if trainer.fabric.is_global_zero:
            trainer.history = truncate_log(self.run_dir / LOG, trainer.start_epoch)
