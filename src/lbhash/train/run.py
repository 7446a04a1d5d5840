"""A run directory over the in-memory training core (lbhash.train.fit): open it, train,
encode, evaluate, finish; and `write_run`, the same files from an in-memory fit.

`train` is the one way to train into a run directory, for `lbhash train`, `reproduce` and
`HashEncoder.fit(..., run_dir=...)`; `train_run` is the same and also returns what it trained
(`TrainedRun`). Two steps, under the run's lock: `open_run` decides between a new run and a
resumed one, checks everything (the core's `prepare`, with the directory as its store), and
writes a new run's first files; `_train_open_run` trains, writes the codes and the results,
and marks a run failed where it failed for good.

Run directory: config.yaml (resolved), split.npz, data.json (what was loaded), input.json (the
input contract: the raw form of the training inputs, lbhash.data.input_form), log.jsonl (one
line per epoch), checkpoint.pt (every epoch, atomic), codes.npz (the format `lbhash evaluate`
reads) and metrics.json; a run without queries (protocol all-train) or with `test: false` has
no codes.npz, and its metrics.json holds only the run summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from lbhash._io import atomic_path, write_json
from lbhash.data import HashDataset, Split, load_split, save_split
from lbhash.data.input_form import InputForm
from lbhash.errors import InputError
from lbhash.train.config import RunConfig, TrainConfig
from lbhash.train.fit import Trained, announce, as_loaded, prepare, train_to_end
from lbhash.train.loop import NonFiniteError, Trainer
from lbhash.train.optim import check_extension
from lbhash.train.processes import leave_process_group, process_rank
from lbhash.train.run_codes import save_split_codes, write_codes
from lbhash.train.run_metrics import finish_run
from lbhash.train.run_store import RunStore
from lbhash.train.rundir import (BEST, CHECKPOINT, CODES, CONFIG, INPUT_FORM, LOG, MANIFEST, SPLIT, Fitted,
                                 check_not_failed, load_input_form, load_run_config, mark_failed, read_metrics,
                                 reopen_run, run_lock, save_run_config, verify_files, verify_finished_run,
                                 write_log)
from lbhash.train.summary import DATA_SUMMARY, notices_to_stderr, result_line

logger = logging.getLogger("lbhash")


@dataclass
class TrainedRun:
    """What `train_run` gives its caller: the run's metrics (metrics.json), and what this call
    trained: the fitted model (None when the run had nothing left to train) and the query part
    of codes.npz (`query_codes`, `query_labels`, `bits`; None without queries)."""
    metrics: dict[str, Any]
    fitted: Fitted | None = None
    query_codes: dict | None = None


@dataclass
class OpenRun:
    """A run ready to train: its trainer, its config (as config.yaml holds it), its input
    contract (input.json) and its directory."""
    trainer: Trainer
    config: RunConfig
    input_form: InputForm
    out: Path


def train(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
          on_epoch_end: Callable[[int], None] | None = None, progress: bool | None = None,
          dataset: HashDataset | None = None, epochs: int | None = None) -> dict[str, Any]:
    """Train into `out` (or continue the run there with resume=True) and return its metrics;
    {} in the other processes of a multi-process run (only rank 0 writes).

    A finished run (its manifest written) is verified against its manifest, left as it is,
    and its metrics returned. With resume=True, `epochs` trains the run, finished or not,
    further to that many epochs in all, from its checkpoint (see `check_extension` for the
    schedule); config.yaml records the new total. `dataset` trains on a data set in memory
    instead of loading `cfg.data`. `on_epoch_end(epoch)` is called after each epoch's
    checkpoint. It says what it does on the "lbhash"
    logger: the data it loaded, progress (bars on a terminal, else one line per epoch) and a
    summary at the end; where logging is not configured, those lines go to stderr (silence them
    with logging.getLogger("lbhash").setLevel(logging.WARNING)).
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
        run = open_run(cfg, out, resume, epochs, progress, dataset, on_epoch_end)
        return _train_open_run(run)


def _check_request(cfg: TrainConfig | None, out: Path, resume: bool, epochs: int | None) -> None:
    if resume:
        if not (out / CONFIG).is_file():
            raise InputError(f"{out}: nothing to resume (no {CONFIG})")
    elif cfg is None:
        raise InputError("no configuration given")
    elif epochs is not None:
        raise InputError("epochs= trains a run further: it needs resume=True (set cfg.epochs for a new run)")


# --- opening a run ----------------------------------------------------------------------------

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
        return TrainedRun(finish_run(out))
    cfg, metrics = load_run_config(out), read_metrics(out)
    trained = metrics.get("run", {}).get("epochs_trained", cfg.epochs)
    early = f" (stopped early: patience {cfg.patience})" if trained < cfg.epochs else ""
    logger.info("%s: already finished at epoch %d%s; nothing to do (--epochs N trains it further)",
                out, trained, early)
    return TrainedRun(metrics)


def _resumed_config(out: Path, epochs: int | None) -> RunConfig:
    cfg = load_run_config(out)
    if epochs is not None:  # checked before the run changes
        check_extension(cfg, epochs, str(out))
        cfg = cfg.replace(epochs=epochs)  # closed-form methods refuse any but 1
    return cfg


def open_run(cfg: TrainConfig, out: Path, resume: bool, epochs: int | None, progress: bool | None,
             dataset: HashDataset | None, on_epoch_end: Callable[[int], None] | None) -> OpenRun:
    """Build the run's experiment and trainer (`lbhash.train.fit.prepare`, with the run
    directory as its store); every check happens before the run writes anything. A new run
    then writes its first files, a resumed one loads its checkpoint, and one trained further
    (`epochs`) is reopened."""
    first = process_rank() == 0
    store = RunStore(out)
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
    """Before a run trains further to cfg.epochs: check that there is something to train, then
    make it unfinished and record the new total in config.yaml."""
    trained, cfg = trainer.start_epoch, trainer.cfg
    if trainer.selection.stopped:
        raise InputError(f"--epochs {cfg.epochs}: {out} stopped early at epoch {trained} (patience "
                         f"{cfg.patience}: no better validation mAP); training it further would change nothing")
    if cfg.epochs <= trained:
        raise InputError(f"--epochs {cfg.epochs}: {out} has trained {trained} epoch(s) already; "
                         f"--resume --epochs N trains it further, to N > {trained} epochs in all")
    if trainer.fabric.is_global_zero:
        reopen_run(out)  # first: a kill from here on leaves a run that --resume continues
        save_run_config(out, load_run_config(out).replace(epochs=cfg.epochs))
    trainer.fabric.barrier()


# --- training it ------------------------------------------------------------------------------

def _train_open_run(run: OpenRun) -> TrainedRun | None:
    trainer = run.trainer
    try:
        return _train_and_finish(run)
    except (InputError, NonFiniteError) as err:
        # deterministic: the same run would fail again, so --resume says why instead of retrying;
        # anything else (a kill, a full disk, the caller's callback) leaves a run --resume continues
        if trainer.fabric.is_global_zero:
            mark_failed(run.out, str(err))
        raise


def _train_and_finish(run: OpenRun) -> TrainedRun | None:
    trainer = run.trainer
    train_to_end(trainer)
    query_codes = write_codes(trainer, run.out) if trainer.fabric.is_global_zero and trainer.cfg.test else None
    trainer.fabric.barrier()
    for run_logger in trainer.fabric.loggers:
        run_logger.finalize("success")
    leave_process_group(trainer.fabric)
    if not trainer.fabric.is_global_zero:
        return None
    metrics = finish_run(run.out)
    fitted = Fitted(as_loaded(trainer.learner.model), run.config, run.input_form, trainer.history)
    return TrainedRun(metrics, fitted, query_codes)


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
