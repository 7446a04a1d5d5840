"""A training run end to end: build, train, encode, evaluate, and write the run directory.

`train` is the one way in, for `lbhash train`, the Python API (HashEncoder) and `reproduce`.
Run directory: config.yaml (resolved), split.npz, data.json (what was loaded), input.json (the
input contract: the raw form of the training inputs, lbhash.data.input_form), log.jsonl (one
line per epoch), checkpoint.pt (every epoch, atomic), codes.npz (the format `lbhash evaluate`
reads) and metrics.json; a run without queries (protocol all-train) or with `test: false` has
no codes.npz, and its metrics.json holds only the run summary.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from lbhash._io import write_json
from lbhash.codes_file import load_codes_file, save_codes_file
from lbhash.data import HashDataset, load_split, save_split
from lbhash.data.input_form import form_of
from lbhash.errors import InputError
from lbhash.evaluate import classifier_accuracy, evaluate_codes, map_label
from lbhash.methods import method_class
from lbhash.train.builder import build_experiment
from lbhash.train.closed_form import fit_closed_form
from lbhash.train.config import TrainConfig, profile_line
from lbhash.train.encoder import encode
from lbhash.train.summary import (DATA_SUMMARY, bars_on_terminal, data_summary, describe_data, epoch_lines,
                                  notices_to_stderr, result_line)
from lbhash.train.loop import NonFiniteError, Trainer, check_logger, leave_process_group, process_rank, read_log
from lbhash.train.optim import check_extension
from lbhash.train.rundir import (CHECKPOINT, CODES, CODES_SEEN, CONFIG, INPUT_FORM, LOG, MANIFEST, METRICS, SPLIT,
                                 check_accelerator, check_not_failed, load_run_config, mark_failed,
                                 read_metrics, reopen_run, run_lock, save_run_config, verify_files,
                                 verify_finished_run, write_manifest)

logger = logging.getLogger("lbhash")


def train(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
          on_epoch_end: Callable[[int], None] | None = None, progress: bool | None = None,
          dataset: HashDataset | None = None, epochs: int | None = None) -> dict[str, Any]:
    """Train into `out` (or continue the run there with resume=True) and return its metrics;
    {} in the other processes of a multi-process run (only rank 0 writes).

    A finished run (its manifest written) is verified against its manifest, left as it is,
    and its metrics returned. With resume=True, `epochs` trains the run, finished or not,
    further to that many epochs in all, from its checkpoint (see `check_extension` for the
    schedule); config.yaml records the new total. `dataset` trains on a data set in memory
    instead of loading `cfg.data`. It says what it does on the "lbhash"
    logger: the data it loaded, progress (bars on a terminal, else one line per epoch) and a
    summary at the end; where logging is not configured, those lines go to stderr (silence them
    with logging.getLogger("lbhash").setLevel(logging.WARNING)).
    """
    finished = resume and epochs is None and (Path(out) / MANIFEST).is_file()  # nothing to train: no summary
    with notices_to_stderr():
        metrics = _train(cfg, out, resume, on_epoch_end, progress, dataset, epochs)
        if metrics and "run" in metrics and not finished:
            logger.info(result_line(metrics, Path(out)))
        return metrics


def _train(cfg: TrainConfig | None, out: str | Path, resume: bool, on_epoch_end, progress: bool | None,
           dataset: HashDataset | None, epochs: int | None) -> dict[str, Any]:
    out = Path(out)
    first = process_rank() == 0  # only rank 0 locks and writes; the others follow it
    if resume:
        if not (out / CONFIG).is_file():
            raise InputError(f"{out}: nothing to resume (no {CONFIG})")
    elif cfg is None:
        raise InputError("no configuration given")
    elif epochs is not None:
        raise InputError("epochs= trains a run further: it needs resume=True (set cfg.epochs for a new run)")
    with run_lock(out, enabled=first):
        if resume:
            check_not_failed(out)
            if (out / MANIFEST).is_file():  # finished: every file must still be what it wrote
                verify_finished_run(out)
                if epochs is None:
                    return _nothing_to_do(out, load_run_config(out)) if first else {}
            else:
                verify_files(out, (CONFIG, SPLIT, CHECKPOINT))
                if epochs is None and (out / CODES).is_file():  # stopped after its codes were written
                    return _finish(out) if first else {}
            cfg = load_run_config(out)
            if epochs is not None:  # checked before the run changes
                check_extension(cfg, epochs, str(out))
                cfg = cfg.replace(epochs=epochs)  # closed-form methods refuse any but 1
        elif first and (out / CONFIG).exists():
            raise InputError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
        if progress is not None:
            cfg = cfg.replace(progress=progress)
        check_accelerator(cfg.accelerator)
        check_logger(cfg.logger)
        # every check happens before the run writes anything
        exp = build_experiment(cfg, load_split(out / SPLIT) if resume else None, dataset)
        if exp.skipped_images and first:
            logger.warning("skipped %d unreadable image(s) (--skip-bad-images)", exp.skipped_images)
        summary = data_summary(exp)
        saved_cfg = exp.cfg
        if exp.cfg.progress and not bars_on_terminal(True):  # a log file: one line per epoch, no bars
            exp.cfg = exp.cfg.replace(progress=False)
            if first:
                on_epoch_end = epoch_lines(out / LOG, exp.cfg.variant, exp.cfg.epochs, on_epoch_end,
                                           map_label(exp.topk, len(exp.split.database)))
        trainer = Trainer(exp, out, on_epoch_end)
        if trainer.fabric.is_global_zero and not (out / CONFIG).exists():
            save_split(out / SPLIT, exp.split)
            write_json(out / DATA_SUMMARY, summary)
            write_json(out / INPUT_FORM, form_of(exp.dataset, exp.cfg.normalize, exp.cfg.image_size).to_dict())
            save_run_config(out, saved_cfg)  # last: its presence marks a run
        trainer.fabric.barrier()
        trainer.resume_state()
        if epochs is not None:
            _reopen(out, trainer)
        if first:  # every check has passed: what the run trains on
            logger.info(profile_line(saved_cfg))
            logger.info(describe_data(summary))
        try:
            return _train_and_finish(trainer, exp)
        except (InputError, NonFiniteError) as err:
            # deterministic: the same run would fail again, so --resume says why instead of retrying;
            # anything else (a kill, a full disk, the caller's callback) leaves a run --resume continues
            if trainer.fabric.is_global_zero:
                mark_failed(out, str(err))
            raise


def _train_and_finish(trainer: Trainer, exp) -> dict[str, Any]:
    if method_class(exp.cfg.method).closed_form:  # baselines: one fit, no epochs left
        fit_closed_form(trainer)
    trainer.fit()
    trainer.restore_selected()
    if trainer.fabric.is_global_zero and exp.cfg.test:
        write_codes(trainer)
    trainer.fabric.barrier()
    for run_logger in trainer.fabric.loggers:
        run_logger.finalize("success")
    leave_process_group(trainer.fabric)
    return _finish(trainer.run_dir) if trainer.fabric.is_global_zero else {}


def _nothing_to_do(out: Path, cfg: TrainConfig) -> dict[str, Any]:
    """The metrics of a finished run, with a line saying that it was left as it is."""
    metrics = read_metrics(out)
    trained = metrics.get("run", {}).get("epochs_trained", cfg.epochs)
    early = f" (stopped early: patience {cfg.patience})" if trained < cfg.epochs else ""
    logger.info("%s: already finished at epoch %d%s; nothing to do (--epochs N trains it further)",
                out, trained, early)
    return metrics


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


def _finish(out: Path) -> dict[str, Any]:
    """metrics.json, then the manifest of every file, written last."""
    metrics = evaluate_run(out)
    write_manifest(out)
    return metrics


def write_codes(trainer: Trainer) -> None:
    """Encode query and database with the trained model into codes.npz (none without queries);
    under unseen:K, first the seen-class query and database into codes_seen.npz."""
    split = trainer.exp.split
    if len(split.seen_query) and len(split.seen_database):
        # the classifier knows the training classes only: its accuracy is a seen-class number
        _write_codes_file(trainer, trainer.run_dir / CODES_SEEN, split.seen_query, split.seen_database, True)
    if len(split.query) and len(split.database):  # written last: it marks the codes as done
        _write_codes_file(trainer, trainer.run_dir / CODES, split.query, split.database,
                          not len(split.unseen_classes))


def _write_codes_file(trainer: Trainer, path: Path, query: np.ndarray, database: np.ndarray,
                      with_scores: bool) -> None:
    exp, ds = trainer.exp, trainer.exp.dataset
    start = time.perf_counter()
    # in float32 whatever the training precision: the codes every later path (the CPU, the
    # service, HashEncoder) reproduces bit for bit; bf16 flips about 1% of items by a bit or two
    model, device, progress = trainer.learner.model, trainer.fabric.device, trainer.cfg.progress
    q = encode(model, ds, query, trainer.options, device, progress=progress)
    db = encode(model, ds, database, trainer.options, device, progress=progress)
    seconds = time.perf_counter() - start
    ql, dl = ds.labels[query], ds.labels[database]
    extra = {"query_real": query_outputs(trainer, query)}  # for asymmetric ranking
    scores = classifier_scores(trainer, q) if with_scores else None
    if scores is not None:  # methods with a classifier branch (GreedyHash, DSDH)
        extra["query_scores"] = scores
    # unseen:K parts hold some classes only: multi-hot rows keep the data set's class columns
    multi_hot = ds.multi_label or bool(len(exp.split.unseen_classes))
    for name, items in (("query", query), ("db", database)):
        sources = ds.item_sources(items)
        if sources is not None:
            extra[f"{name}_sources"] = sources
    save_codes_file(path, q, db, stored_labels(multi_hot, ql), stored_labels(multi_hot, dl), query_ids=query,
                    db_ids=database, topk=exp.topk, encode_seconds=seconds, **extra)


def query_outputs(trainer: Trainer, query: np.ndarray) -> np.ndarray:
    """The hash head's real outputs u (float32) of the queries, in float32 without autocast:
    `evaluate_codes(query_real=...)` ranks the database codes by their inner product with u."""
    return encode(trainer.learner.model, trainer.exp.dataset, query, trainer.options, trainer.fabric.device,
                  real=True)


@torch.no_grad()
def classifier_scores(trainer: Trainer, codes: np.ndarray) -> np.ndarray | None:
    """Class scores of the method's own classifier for +/-1 codes, or None without one."""
    objective = trainer.learner.objective
    objective.eval()
    scores = objective.classify(torch.as_tensor(codes, dtype=torch.float32, device=trainer.fabric.device))
    if scores is None:
        return None
    scores = scores.float().cpu().numpy()
    columns = trainer.learner.label_columns
    if columns is None:
        return scores
    # unseen:K: scores over the training classes, placed in their columns; held-out ones never win
    lowest = np.finfo(np.float32).min  # finite: scores files hold no inf
    full = np.full((len(scores), trainer.exp.dataset.num_classes), lowest, dtype=np.float32)
    full[:, columns.cpu().numpy()] = scores
    return full


def stored_labels(multi_label: bool, labels: np.ndarray) -> np.ndarray:
    """Class ids for single-label data, multi-hot rows otherwise."""
    return labels.astype(np.uint8) if multi_label else labels.argmax(1).astype(np.int64)


def selection_summary(cfg: TrainConfig, log: list[dict]) -> dict[str, Any]:
    """Which epoch the run kept, how many it trained, and the validation mAP of the kept one."""
    trained = log[-1]["epoch"] if log else 0
    validated = [(r["epoch"], r["eval"]["val_map"]) for r in log if "val_map" in r.get("eval", {})]
    if not validated:
        return {"select": cfg.select, "epochs_trained": trained, "selected_epoch": trained}
    best = max(validated, key=lambda e: (e[1], -e[0]))  # the first epoch reaching the best mAP
    kept = best if cfg.select == "best-val" else validated[-1]
    return {"select": cfg.select, "epochs_trained": trained,
            "selected_epoch": kept[0] if cfg.select == "best-val" else trained,
            "validation_map": kept[1]}


def _codes_metrics(codes: dict) -> dict[str, Any]:
    metrics = evaluate_codes(codes["query_codes"], codes["db_codes"], codes["query_labels"],
                             codes["db_labels"], bits=codes["bits"], topk=codes["topk"], tie_average=True,
                             query_real=codes.get("query_real"))
    if "query_scores" in codes:  # the method's own classifier, beside the kNN accuracy
        metrics["classifier_accuracy"] = classifier_accuracy(codes["query_scores"], codes["query_labels"])
    return metrics


def evaluate_run(run_dir: str | Path) -> dict[str, Any]:
    """Every metric of a finished run at its protocol's R, plus a summary of the run;
    written to metrics.json in the run directory."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    codes = load_codes_file(run_dir / CODES) if (run_dir / CODES).is_file() else None
    metrics: dict[str, Any] = {} if codes is None else _codes_metrics(codes)
    if (run_dir / CODES_SEEN).is_file():  # unseen:K: the training classes' numbers beside
        metrics["seen"] = _codes_metrics(load_codes_file(run_dir / CODES_SEEN))
    log = read_log(run_dir / LOG)
    split = load_split(run_dir / SPLIT)
    seconds = [r["seconds"] for r in log]
    metrics["run"] = {
        "variant": cfg.variant, "method": cfg.method, "lbhash": cfg.lbhash, "bits": cfg.bits,
        "data": cfg.data, "protocol": cfg.protocol, "seed": cfg.seed, "epochs": cfg.epochs,
        "n_train": len(split.train), "n_validation": len(split.validation),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "encode_seconds": float(codes["encode_seconds"]) if codes is not None and "encode_seconds" in codes
        else None,
        **selection_summary(cfg, log),
    }
    if len(split.unseen_classes):
        metrics["run"]["unseen_classes"] = split.unseen_classes.tolist()
    write_json(run_dir / METRICS, metrics)
    return metrics
