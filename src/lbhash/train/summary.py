"""What a run tells its user: one line on the data it loaded (also kept as data.json in the run
directory) and, where stderr is not a terminal, one line per epoch instead of progress bars,
so that logs stay readable. Both go to the "lbhash" logger at INFO (the CLI prints them;
`lbhash train --quiet` and library use keep them silent)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lbhash.data import absolute_spec, parse_data_spec
from lbhash.evaluate.formatting import RATIO_SCALE, map_label
from lbhash.train.builder import Experiment

DATA_SUMMARY = "data.json"
logger = logging.getLogger("lbhash")


def data_summary(exp: Experiment) -> dict[str, Any]:
    """Data kind, items, classes (and their names, where they are more than the ids), input
    shape, dequantisation and split sizes of a run; with `resolved`, the data spec with absolute
    paths (lbhash.runs.run_files.run_data_spec reads it)."""
    ds, cfg, split = exp.dataset, exp.cfg, exp.split
    out: dict[str, Any] = {"data": cfg.dataset.data, "name": ds.name, "kind": ds.input_kind, "items": len(ds),
                           "classes": ds.num_classes, "multi_label": bool(ds.multi_label)}
    if parse_data_spec(cfg.dataset.data).path is not None:  # the spec as typed is relative to where the run trained
        out["resolved"] = absolute_spec(cfg.dataset.data)
    names = getattr(ds, "class_names", None)
    if names and list(names) != [str(c) for c in range(len(names))]:  # names that say more than the ids
        out["class_names"] = [str(n) for n in names]  # index build records them (lbhash.indexes.origins)
    if ds.input_kind == "features":
        out["feature_dim"] = ds.input_dim()
        out["dequantized"] = bool(getattr(ds, "dequantized", False))
    else:
        images = getattr(ds, "images", ds)  # a frozen backbone's features: the images they came from
        sizes = images.sizes() if hasattr(images, "sizes") else {}
        out["stored_size"] = sizes.get("stored_size")  # [H, W] when every image has it, else None
        out.update({k: v for k, v in sizes.items() if k != "stored_size"})
        out["image_size"] = cfg.dataset.image_size
    out["split"] = {"protocol": split.protocol, "seed": split.seed, **split.sizes()}
    if len(split.validation):  # training items: database items wherever the protocol's database holds train
        out["split"]["validation_in_database"] = int(np.isin(split.validation, split.database).sum())
    if exp.skipped_images:
        out["skipped_images"] = exp.skipped_images
    balance = target_balance(exp)
    if balance is not None:
        out["target_balance"] = balance
    return out


def target_balance(exp: Experiment) -> dict[str, Any] | None:
    """Where a run trains toward majority targets (CSQ, or `multilabel_target: majority`) on
    multi-label data: the share of +1 bits among the targets of its multi-label training items
    and among the class centers, and the tie rule (`csq_ties`: whether a center breaks the ties)."""
    import torch

    from lbhash.methods.csq import majority_targets

    lower_bound = exp.learner.lower_bound
    base = exp.learner.objective if lower_bound is None else lower_bound.base
    if lower_bound is not None and lower_bound.multilabel_target == "majority":
        holder = lower_bound
    elif base.majority_targets:
        holder = base
    else:
        return None
    if not exp.dataset.multi_label:
        return None
    labels = torch.as_tensor(exp.dataset.labels[exp.split.train], dtype=torch.float32)
    labels = exp.learner.objective_labels(labels.to(holder.centers.device))
    multi = labels[labels.sum(1) > 1]
    centers = holder.centers
    targets = majority_targets(centers, multi, holder.tie_center)
    share = (lambda x: round(float((x > 0).float().mean()), 4) if len(x) else None)
    ties = "plus-one" if holder.tie_center is None else "random-center"
    return {"ties": ties, "multi_label_items": len(multi), "targets_plus": share(targets),
            "centers_plus": share(centers)}


def describe_data(summary: dict[str, Any]) -> str:
    """The summary as one line, e.g. `data digits: features, 1797 items, 10 classes, ...`."""
    parts = [summary["kind"], f"{summary['items']} items",
             f"{summary['classes']} classes" + (" (multi-label)" if summary["multi_label"] else "")]
    if summary["kind"] == "features":
        parts.append(f"{summary['feature_dim']} features "
                     + ("(dequantized)" if summary["dequantized"] else "(used as stored)"))
    else:
        stored, first = summary["stored_size"], summary.get("first_size")
        if stored is not None:
            size = f"{stored[0]}x{stored[1]} images"
        elif summary.get("varying"):
            size = "images of varying size"
        else:  # not decoded yet (or never: cache off): only the first image's size is known
            size = "images" + (f", the first {first[0]}x{first[1]}" if first else "")
        parts.append(f"{size} -> {summary['image_size']}x{summary['image_size']} model input")
    split = summary["split"]
    line = f"data {summary['data']}: {', '.join(parts)}; split {split['protocol']}: {split_sizes(split)}"
    balance = summary.get("target_balance")
    if balance and balance["targets_plus"] is not None:
        line += (f"; +1 bits: {balance['targets_plus']:.1%} of the {balance['multi_label_items']} multi-label "
                 f"targets, {balance['centers_plus']:.1%} of the centers (ties: {balance['ties']})")
    return line


def split_sizes(split: dict[str, Any]) -> str:
    """The sizes of a split as data.json keeps them, e.g. `900 train, 100 validation, 300 query,
    1497 database (validation included)`: the validation items are training items held out to
    choose the epoch, and stay in the database wherever the protocol's holds the training items
    (docs/data.md, "Split protocols"); the note is left out where it holds none of them."""
    sizes = ", ".join(f"{split[p]} {p}" for p in ("train", "validation", "query", "database")
                      if p != "validation" or split.get(p))
    held = split.get("validation_in_database", 0)
    if held:
        sizes += " (validation included)" if held == split["validation"] else f" ({held} validation included)"
    return sizes


@contextlib.contextmanager
def notices_to_stderr():
    """While training: where nothing handles the "lbhash" logger's records (library use without
    logging configured), show its INFO lines on stderr, so that a run is never silent."""
    if logger.hasHandlers():
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def result_line(metrics: dict[str, Any], out: Path | None = None) -> str:
    """One line at the end of a run: what it reached and where it is (`out`: its run
    directory; None for a fit in memory)."""
    run = metrics["run"]
    parts = [f"{run['variant']} {run['bits']} bits, {run['epochs_trained']} epochs"]
    if "map" in metrics:
        r = map_label(metrics["topk"], metrics["n_db"])  # as the table below it names R
        parts.append(f"mAP@{r} {metrics['map']:.4f} ({metrics['n_query']} queries, {metrics['n_db']} database items)")
        ratio = metrics["lower_bound"]["ratio"]
        parts.append(f"lower bound {ratio if isinstance(ratio, str) else format(ratio, '.3f')} ({RATIO_SCALE})")
    elif run.get("validation_map") is not None:  # (no query part, as under all-train: the held-out tenth's)
        parts.append(f"validation mAP {run['validation_map']:.4f} (epoch {run.get('selected_epoch')} kept; no query "
                     "part to measure mAP on)")
    if run.get("seconds_per_epoch"):
        parts.append(f"{run['seconds_per_epoch']:.2f} s/epoch")
    return f"done: {', '.join(parts)}" + ("" if out is None else f"; run directory {out}")


LINE_EVERY_S = 10.0  # off a terminal: between two epoch lines that are neither first, last nor evaluated


def epoch_lines(variant: str, epochs: int, map_r: str = "all",
                every_s: float = LINE_EVERY_S, clock=time.monotonic) -> Callable[[int, dict], None]:
    """An `on_epoch_end(epoch, record)` callback printing `VARIANT epoch E/N: loss L, S s` from
    the epoch's log record: for the first and the last epoch, every evaluation epoch (which adds
    `mAP@R X`, R = `map_r` as `lbhash.evaluate.map_label` names it, or `validation mAP@all X`),
    and otherwise once `every_s` seconds have passed since the last line, so that a long run
    shows it is alive and a short one does not fill a log."""
    names = {"map": f"mAP@{map_r}", "val_map": "validation mAP@all"}
    last = -float("inf")

    def report(epoch: int, record: dict) -> None:
        nonlocal last
        evaluated = [key for key in ("map", "val_map") if isinstance(record.get("eval", {}).get(key), float)]
        now = clock()
        if not (epoch in (1, epochs) or evaluated or now - last >= every_s):
            return
        last = now
        extra = "".join(f", {names[key]} {record['eval'][key]:.4f}" for key in evaluated)
        logger.info("%s epoch %d/%d: loss %.4f, %.1f s%s", variant, epoch, epochs,
                    record["loss"].get("total", float("nan")), record["seconds"], extra)

    return report


STEP_EVERY_S = 30.0  # off a terminal: the longest silence inside an epoch (an epoch of images can take minutes)
HEARTBEAT_S = 30.0   # off a terminal: the same while an epoch's evaluation encodes its items


def step_lines(variant: str, epochs: int, every_s: float | None = None,
               clock=time.monotonic) -> Callable[[int, int, int, float], None]:
    """An `on_step(epoch, step, steps, loss)` callback printing `VARIANT epoch E/N: step S/T, loss L so far,
    X s` once `every_s` seconds of the epoch have passed since its start or the last such line, so
    that a log where no bar shows is never silent for longer inside an epoch (`loss`: the epoch's
    mean so far)."""
    every_s = STEP_EVERY_S if every_s is None else every_s
    state = {"epoch": None, "start": 0.0, "last": 0.0}

    def report(epoch: int, step: int, steps: int, loss: float) -> None:
        now = clock()
        if state["epoch"] != epoch:  # the first step of an epoch starts its clock
            state.update(epoch=epoch, start=now, last=now)
        if now - state["last"] < every_s:
            return
        state["last"] = now
        logger.info("%s epoch %d/%d: step %d/%d, loss %.4f so far, %.0f s", variant, epoch, epochs, step, steps,
                    loss, now - state["start"])

    return report


@contextlib.contextmanager
def heartbeat(what: str, every_s: float | None = None, clock=time.monotonic):
    """While the block runs, a line `WHAT, X s` every `every_s` seconds (default HEARTBEAT_S) from a
    timer thread: work that reports nothing itself (an epoch's evaluation encodes the validation and
    training items, a minute for a few thousand images) does not leave a log silent longer."""
    every_s = HEARTBEAT_S if every_s is None else every_s
    done, start = threading.Event(), clock()

    def beat() -> None:
        while not done.wait(every_s):
            logger.info("%s, %.0f s", what, clock() - start)

    thread = threading.Thread(target=beat, name="lbhash-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
