"""A training run end to end: build, train, encode, evaluate, write the run directory.

Run directory: config.yaml (resolved), split.npz, log.jsonl (one line per epoch),
checkpoint.pt (every epoch, atomic), codes.npz (the format `lbhash evaluate` reads) and
metrics.json.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from lbhash._io import atomic_path, write_json
from lbhash.codes import save_codes_file
from lbhash.data import load_split, save_split
from lbhash.evaluate import evaluate_codes
from lbhash.train.config import TrainConfig, build_config
from lbhash.train.experiment import build_experiment
from lbhash.train.loop import CHECKPOINT, LOG, Trainer, read_log

CONFIG, SPLIT, CODES, METRICS = "config.yaml", "split.npz", "codes.npz", "metrics.json"


def train(cfg: TrainConfig | None, out: str | Path, resume: bool = False,
          on_epoch_end: Callable[[int], None] | None = None, progress: bool | None = None) -> dict[str, Any]:
    """Train into `out` (or continue the run there with resume=True); return the metrics."""
    out = Path(out)
    if resume:
        if not (out / CONFIG).is_file():
            raise ValueError(f"{out}: nothing to resume (no {CONFIG})")
        saved = yaml.safe_load((out / CONFIG).read_text())
        cfg = build_config(saved, {"progress": progress})
        if (out / METRICS).is_file():
            return _read_metrics(out)
        exp = build_experiment(cfg, load_split(out / SPLIT))
    else:
        if cfg is None:
            raise ValueError("no configuration given")
        if progress is not None:
            cfg = build_config(cfg.to_dict(), {"progress": progress})
        if (out / CONFIG).exists():
            raise ValueError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")
        exp = build_experiment(cfg)  # every check happens before the directory exists
    trainer = Trainer(exp, out, on_epoch_end)
    if trainer.fabric.is_global_zero and not resume:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / CONFIG) as tmp:
            tmp.write_text(yaml.safe_dump(exp.cfg.to_dict(), sort_keys=False))
        save_split(out / SPLIT, exp.split)
    trainer.fabric.barrier()
    if resume and (out / CHECKPOINT).is_file():
        trainer.load_checkpoint()
    log = trainer.fit()
    return finish(trainer, log)


def finish(trainer: Trainer, log: list[dict]) -> dict[str, Any]:
    """Encode query and database, write codes.npz and metrics.json."""
    exp, out = trainer.exp, trainer.run_dir
    split, ds = exp.split, exp.dataset
    start = time.perf_counter()
    q, db = trainer.encode(split.query), trainer.encode(split.database)
    encode_seconds = time.perf_counter() - start
    if not trainer.fabric.is_global_zero:
        return {}
    ql, dl = ds.labels[split.query], ds.labels[split.database]
    metrics = evaluate_codes(q, db, ql, dl, topk=exp.topk)
    cfg = exp.cfg
    seconds = [r["seconds"] for r in log]
    metrics["run"] = {
        "variant": cfg.variant, "method": cfg.method, "lbhash": cfg.lbhash, "bits": cfg.bits,
        "data": cfg.data, "protocol": split.protocol, "seed": cfg.seed, "epochs": cfg.epochs,
        "n_train": int(len(split.train)),
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else None,
        "encode_seconds": encode_seconds,
    }
    save_codes_file(out / CODES, q, db, _stored_labels(ds, ql), _stored_labels(ds, dl),
                    query_index=split.query, db_index=split.database)
    write_json(out / METRICS, metrics)
    return metrics


def _stored_labels(ds, labels: np.ndarray) -> np.ndarray:
    """Class ids for single-label data, multi-hot rows otherwise."""
    if ds.multi_label:
        return labels.astype(np.uint8)
    return labels.argmax(1).astype(np.int64)


def _read_metrics(out: Path) -> dict[str, Any]:
    import json

    return json.loads((out / METRICS).read_text())


__all__ = ["train", "CONFIG", "SPLIT", "CODES", "METRICS", "LOG", "CHECKPOINT", "read_log"]
