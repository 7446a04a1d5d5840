"""The codes of a run: codes.npz at the end of training (`write_codes`), and the codes of any
data with a finished run's model (`encode_run`, `lbhash encode`, `save_encoded`).

Both encode with the one encoder (lbhash.train.encoder) and store labels the same way
(`stored_labels`), so that a run's own items encode to the codes its codes.npz holds.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import torch

from lbhash.codes import pack, to_signs
from lbhash.codes_file import save_codes_file, write_codes as write_codes_file
from lbhash.data import load_data, load_split
from lbhash.data.feature_cache import with_frozen_features
from lbhash.data.input_form import conform_dataset
from lbhash.errors import InputError
from lbhash.train.builder import evaluation_topk, input_options
from lbhash.train.encoder import encode, encode_sharded
from lbhash.train.loop import Trainer
from lbhash.train.processes import check_accelerator, leave_process_group, make_fabric
from lbhash.train.rundir import CODES, CODES_SEEN, PARTS, SPLIT, load_input_form, load_run_model


# --- at the end of training -------------------------------------------------------------------

def write_codes(trainer: Trainer) -> dict | None:
    """Encode query and database with the trained model into codes.npz (none without queries);
    under unseen:K, first the seen-class query and database into codes_seen.npz. Returns the
    query part of codes.npz as `load_codes_file` names it (`query_codes`, `query_labels`,
    `bits`), or None without queries."""
    split = trainer.exp.split
    if len(split.seen_query) and len(split.seen_database):
        # the classifier knows the training classes only: its accuracy is a seen-class number
        _write_codes_file(trainer, trainer.run_dir / CODES_SEEN, split.seen_query, split.seen_database, True)
    if not (len(split.query) and len(split.database)):
        return None
    # written last: it marks the codes as done
    return _write_codes_file(trainer, trainer.run_dir / CODES, split.query, split.database,
                             not len(split.unseen_classes))


def _write_codes_file(trainer: Trainer, path: Path, query: np.ndarray, database: np.ndarray,
                      with_scores: bool) -> dict:
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
    query_labels = stored_labels(multi_hot, ql)
    save_codes_file(path, q, db, query_labels, stored_labels(multi_hot, dl), query_ids=query,
                    db_ids=database, topk=exp.topk, encode_seconds=seconds, **extra)
    return {"query_codes": q, "query_labels": query_labels, "bits": trainer.cfg.bits}


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


# --- with a finished run ----------------------------------------------------------------------

def encode_run(run_dir: str | Path, data: str | None = None, part: str = "all",
               accelerator: str = "cpu", precision: str = "32-true", devices: int = 1,
               progress: bool = True, real: bool = False) -> dict[str, np.ndarray] | None:
    """Codes of a data set (default: the run's own) with a trained run's model.

    `part` selects the run's train/query/database items and needs the run's own data. Other
    data goes through the run's input contract (lbhash.data.input_form) and needs no labels.
    Returns the fields of a codes-file part (lbhash.codes_file): packed `codes`, `ids` (item
    positions), `labels` (None without), `sources` (None for feature rows) and, with real=True,
    `real` (float32 (n, bits), whose signs are the codes); plus `bits` and `topk`, the R of the
    run's protocol. On a GPU the model runs in float32 by default, as training made the run's
    codes, or under autocast in `precision` ("bf16-mixed", "16-mixed"): faster, but about 1% of
    items then differ from the run's codes by a bit or two.
    With devices > 1 the items are shared out over that many processes (Lightning Fabric, or
    torchrun's); rank 0 returns everything, the other ranks None.
    """
    run_dir = Path(run_dir)
    if part not in PARTS:
        raise InputError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if accelerator not in ("cpu", "gpu"):
        raise InputError(f"accelerator must be cpu or gpu, got {accelerator!r}")
    check_accelerator(accelerator)
    model, cfg = load_run_model(run_dir)
    form = load_input_form(run_dir, cfg)
    own = data is None or data == cfg.data
    if part != "all" and not own:
        raise InputError(f"--part {part} selects items of the run's split, so it needs the run's own data "
                         f"({cfg.data}), not {data}")
    split = load_split(run_dir / SPLIT)
    dataset = conform_dataset(form, load_data(cfg.data if own else data, labels_required=False),
                              cfg.data if own else data)
    index = np.arange(len(dataset)) if part == "all" else getattr(split, part)
    fabric = make_fabric(accelerator, devices, "32-true")
    model.to(fabric.device)  # image models keep their channels-last layout
    if cfg.input_kind == "images" and cfg.freeze_backbone:  # the cached features, computed once
        dataset = with_frozen_features(dataset, model.backbone, index, input_options(cfg), fabric.device,
                                       progress and fabric.is_global_zero)
    out = encode_sharded(fabric, model, dataset, index, input_options(cfg),
                         _autocast(fabric.device, precision), progress, real=real)
    leave_process_group(fabric)
    if out is None:
        return None
    if out.shape[1] != cfg.bits:
        raise InputError(f"the model gives {out.shape[1]} bits but the run has {cfg.bits}")
    codes = to_signs(out) if real else out  # one forward pass: the codes are the signs
    labelled = dataset.num_classes > 0
    return {"codes": pack(codes), "bits": cfg.bits, "ids": np.asarray(index, np.int64),
            "labels": stored_labels(dataset.multi_label, dataset.labels[index]) if labelled else None,
            "sources": dataset.item_sources(index), "real": out if real else None,
            "topk": evaluation_topk(cfg, split)}


def save_encoded(path: str | Path, encoded: dict) -> None:
    """Write `encode_run`'s result as a codes file of one part."""
    fields = {k: v for k, v in encoded.items() if k not in ("bits", "topk")}
    write_codes_file(path, encoded["bits"], {"items": fields}, topk=encoded["topk"])


def _autocast(device: torch.device, precision: str):
    """Mixed precision on a GPU (bf16 by default); the CPU always computes in float32."""
    if device.type == "cuda" and "bf16" in precision:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cuda" and precision.startswith("16"):
        return lambda: torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext

