"""Train into a run directory (`train`, `train_run`): decide between a new run, a resumed one
and one with nothing left to train, then hand the run to lbhash.runs.training.

`train` is the one way to train into a run directory (`lbhash train`, `reproduce`,
`HashEncoder.fit(..., run_dir=...)`). A finished run returns its metrics without importing the
training stack, so `--resume` on it starts fast. The run directory's files: docs/training.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from lbhash.data import HashDataset
from lbhash.errors import InputError
from lbhash.train.config import RunConfig, TrainConfig
from lbhash.train.optim import check_extension, check_further
from lbhash.train.processes import process_rank
from lbhash.runs.rundir import (CHECKPOINT, CODES, CONFIG, MANIFEST, SPLIT, TrainedRun, check_not_failed,
                                 load_run_config, read_metrics, run_lock, verify_files, verify_finished_run)
from lbhash.train.summary import notices_to_stderr, result_line

logger = logging.getLogger("lbhash")


def train(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
          on_epoch_end: Callable[[int], None] | None = None, progress: bool | None = None,
          dataset: HashDataset | None = None, epochs: int | None = None) -> dict[str, Any]:
    """Train into `out` (or continue the run there with resume=True) and return its metrics;
    {} in the other processes of a multi-process run (only rank 0 writes).

    A finished run is verified against its manifest and left as it is. With resume=True, `epochs`
    trains the run further to that many epochs in all (`check_extension`). `dataset` trains on a
    data set in memory instead of loading `cfg.data`; `on_epoch_end(epoch)` is called after each
    epoch's checkpoint. Progress goes to the "lbhash" logger (stderr where logging is not configured).
    """
    result = train_run(cfg, out, resume, on_epoch_end, progress, dataset, epochs)
    return {} if result is None else result.metrics


def train_run(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
              on_epoch_end: Callable[[int], None] | None = None, progress: bool | None = None,
              dataset: HashDataset | None = None, epochs: int | None = None) -> TrainedRun | None:
    """`train`, returning what it trained (`TrainedRun`); None in the other processes."""
    out = Path(out)
    finished = resume and epochs is None and (out / MANIFEST).is_file()  # nothing to train: no summary
    with notices_to_stderr():
        result = _train(cfg, out, resume, on_epoch_end, progress, dataset, epochs)
        if result is not None and "run" in result.metrics and not finished:
            logger.info(result_line(result.metrics, out))
        return result


def _train(cfg: TrainConfig | None, out: Path, resume: bool, on_epoch_end, progress: bool | None,
           dataset: HashDataset | None, epochs: int | None) -> TrainedRun | None:
    first = process_rank() == 0  # only rank 0 locks and writes; the others follow it
    _check_request(cfg, out, resume, epochs)
    with run_lock(out, enabled=first):
        if resume:
            check_not_failed(out)
            if _nothing_left(out, epochs):
                return _left_as_it_is(out) if first else None
            cfg = _resumed_config(out, epochs)
        elif first and (out / CONFIG).exists():
            raise InputError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
        # the training stack (the loop, the metrics' numba kernels) is imported only to train
        from lbhash.runs.training import open_run, train_open_run

        return train_open_run(open_run(cfg, out, resume, epochs, progress, dataset, on_epoch_end))


def _check_request(cfg: TrainConfig | None, out: Path, resume: bool, epochs: int | None) -> None:
    if resume:
        if not (out / CONFIG).is_file():
            raise InputError(f"{out}: nothing to resume (no {CONFIG})")
    elif cfg is None:
        raise InputError("no configuration given")
    elif epochs is not None:
        raise InputError("epochs= trains a run further: it needs resume=True (set cfg.epochs for a new run)")


# --- a run to resume ----------------------------------------------------------------------------

def _nothing_left(out: Path, epochs: int | None) -> bool:
    """Verify the files of a run to resume; True when it has nothing left to train: it is
    finished, or it stopped after its codes were written (and `epochs` asks for no more)."""
    if (out / MANIFEST).is_file():  # finished: every file must still be what it wrote
        verify_finished_run(out)
        return epochs is None
    verify_files(out, (CONFIG, SPLIT, CHECKPOINT))
    return epochs is None and (out / CODES).is_file()


def _left_as_it_is(out: Path) -> TrainedRun:
    """A finished run's metrics, with a line saying that it was left as it is; a run that
    stopped after its codes gets its metrics and manifest."""
    if not (out / MANIFEST).is_file():
        from lbhash.runs.metrics import finish_run  # evaluates the codes: the metrics' numba kernels

        return TrainedRun(finish_run(out))
    cfg, metrics = load_run_config(out), read_metrics(out)
    trained = metrics.get("run", {}).get("epochs_trained", cfg.epochs)
    early = f" (stopped early: patience {cfg.patience})" if trained < cfg.epochs else ""
    logger.info("%s: already finished at epoch %d%s; nothing to do (--epochs N trains it further)",
                out, trained, early)
    return TrainedRun(metrics)


def _resumed_config(out: Path, epochs: int | None) -> RunConfig:
    cfg = load_run_config(out)
    if epochs is not None:  # checked before the run changes, and before a model is built
        check_extension(cfg, epochs, str(out))
        saved_epochs, cfg = cfg.epochs, cfg.replace(epochs=epochs)  # closed-form methods refuse any but 1
        if (out / MANIFEST).is_file():  # finished and verified: its metrics say what it trained
            trained = read_metrics(out).get("run", {}).get("epochs_trained", saved_epochs)
            check_further(cfg, epochs, trained, trained < saved_epochs, str(out))
    return cfg
