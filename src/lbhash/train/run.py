"""A training run end to end: build, train, encode, and write the run directory.

Run directory: config.yaml (resolved), split.npz, log.jsonl (one line per epoch),
checkpoint.pt (every epoch, atomic) and codes.npz (the format `lbhash evaluate` reads).
Metrics (metrics.json) are added by the evaluation layer (`lbhash.evaluate.runs`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import yaml

from lbhash._io import atomic_path
from lbhash.codes import save_codes_file
from lbhash.data import load_split, save_split
from lbhash.train.config import TrainConfig, build_config
from lbhash.train.experiment import build_experiment
from lbhash.train.loop import (CHECKPOINT, LOG, Monitor, Trainer, leave_process_group, process_rank,
                              read_log)

CONFIG, SPLIT, CODES = "config.yaml", "split.npz", "codes.npz"
logger = logging.getLogger("lbhash")


def load_run_config(run_dir: str | Path) -> TrainConfig:
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise ValueError(f"{run_dir}: not a run directory (no {CONFIG})")
    return build_config(yaml.safe_load(path.read_text()))


def train(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
          monitor: Monitor | None = None, on_epoch_end: Callable[[int], None] | None = None,
          progress: bool | None = None) -> Path | None:
    """Train into `out` (or continue the run there with resume=True); return `out`, or None
    in the other processes of a multi-process run (only rank 0 writes).

    A finished run (codes.npz written) is left as it is.
    """
    out = Path(out)
    first = process_rank() == 0  # other ranks start after rank 0 has created the directory
    if resume:
        if not (out / CONFIG).is_file():
            raise ValueError(f"{out}: nothing to resume (no {CONFIG})")
        if (out / CODES).is_file():
            return out
        cfg = build_config(load_run_config(out).to_dict(), {"progress": progress})
        exp = build_experiment(cfg, load_split(out / SPLIT))
    else:
        if cfg is None:
            raise ValueError("no configuration given")
        cfg = build_config(cfg.to_dict(), {"progress": progress})
        if first and (out / CONFIG).exists():
            raise ValueError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
        exp = build_experiment(cfg)  # every check happens before the directory exists
    if exp.skipped_images and first:
        logger.warning("skipped %d unreadable image(s) (--skip-bad-images)", exp.skipped_images)
    trainer = Trainer(exp, out, monitor, on_epoch_end)
    if trainer.fabric.is_global_zero and not resume:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / CONFIG) as tmp:
            tmp.write_text(yaml.safe_dump(exp.cfg.to_dict(), sort_keys=False))
        save_split(out / SPLIT, exp.split)
    trainer.fabric.barrier()
    if resume and (out / CHECKPOINT).is_file():
        trainer.load_checkpoint()
    trainer.fit()
    write_codes(trainer)
    leave_process_group(trainer.fabric)
    return out if trainer.fabric.is_global_zero else None


def write_codes(trainer: Trainer) -> None:
    """Encode query and database with the trained model into codes.npz."""
    exp, out = trainer.exp, trainer.run_dir
    split, ds = exp.split, exp.dataset
    if trainer.fabric.is_global_zero:
        start = time.perf_counter()
        q = trainer.encode(split.query, progress=True)
        db = trainer.encode(split.database, progress=True)
        seconds = time.perf_counter() - start
        ql, dl = ds.labels[split.query], ds.labels[split.database]
        extra = {}
        scores = classifier_scores(trainer, q)
        if scores is not None:  # methods with a classifier branch (GreedyHash, DSDH)
            extra["query_scores"] = scores
        save_codes_file(out / CODES, q, db, stored_labels(ds.multi_label, ql),
                        stored_labels(ds.multi_label, dl), query_index=split.query,
                        db_index=split.database, topk=-1 if exp.topk is None else exp.topk,
                        encode_seconds=seconds, **extra)
    trainer.fabric.barrier()


@torch.no_grad()
def classifier_scores(trainer: Trainer, codes: np.ndarray) -> np.ndarray | None:
    """Class scores of the method's own classifier for +/-1 codes, or None without one."""
    objective = trainer.learner.objective
    objective.eval()
    scores = objective.classify(torch.as_tensor(codes, dtype=torch.float32, device=trainer.fabric.device))
    return None if scores is None else scores.float().cpu().numpy()


def stored_labels(multi_label: bool, labels: np.ndarray) -> np.ndarray:
    """Class ids for single-label data, multi-hot rows otherwise."""
    return labels.astype(np.uint8) if multi_label else labels.argmax(1).astype(np.int64)


__all__ = ["train", "load_run_config", "CONFIG", "SPLIT", "CODES", "LOG", "CHECKPOINT", "read_log"]
