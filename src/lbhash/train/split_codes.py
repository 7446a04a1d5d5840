"""The codes a trained model gives its split's query and database, in memory: the arrays of the
run's codes files (`lbhash.codes_file.codes_arrays`), which an in-memory fit evaluates and a run
directory writes (codes.npz, and codes_seen.npz under unseen:K).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from lbhash.codes import to_signs
from lbhash.codes_file import codes_arrays, stored_labels
from lbhash.train.forward import ForwardPass, embed, encode
from lbhash.train.loop import Trainer


def split_codes(trainer: Trainer) -> dict[str, dict[str, np.ndarray]]:
    """Codes-file arrays of the query and database ("all"; none without queries) and, under
    unseen:K, of the seen-class query and database ("seen")."""
    split, files = trainer.exp.split, {}
    if len(split.seen_query) and len(split.seen_database):
        # the classifier knows the training classes only: its accuracy is a seen-class number
        files["seen"] = _codes_file(trainer, split.seen_query, split.seen_database, True)
    if len(split.query) and len(split.database):
        files["all"] = _codes_file(trainer, split.query, split.database, not len(split.unseen_classes))
    return files


def _codes_file(trainer: Trainer, query: np.ndarray, database: np.ndarray, with_scores: bool) -> dict:
    """The arrays of a codes file of query and database items (`codes_arrays`)."""
    exp, ds = trainer.exp, trainer.exp.dataset
    start = time.perf_counter()
    # in float32 whatever the training precision: the codes every later path (the CPU, the
    # service, HashEncoder) reproduces bit for bit; bf16 flips about 1% of items by a bit or two
    model, device, progress = trainer.learner.model, trainer.fabric.device, trainer.cfg.runtime.progress
    # one pass over the queries: their real outputs (for asymmetric ranking) and, as their signs, their codes
    how = ForwardPass(device, progress=progress)
    real = embed(model, ds, query, trainer.options, how)
    q = to_signs(torch.from_numpy(real)).numpy()  # the tensor rule, as `encode` applies it
    db = encode(model, ds, database, trainer.options, how)
    seconds = time.perf_counter() - start
    ql, dl = ds.labels[query], ds.labels[database]
    extra = {"query_real": real}
    scores = classifier_scores(trainer, q) if with_scores else None
    if scores is not None:  # methods with a classifier branch (GreedyHash, DSDH)
        extra["query_scores"] = scores
    # unseen:K parts hold some classes only: multi-hot rows keep the data set's class columns
    multi_hot = ds.multi_label or bool(len(exp.split.unseen_classes))
    for name, items in (("query", query), ("db", database)):
        sources = ds.item_sources(items)
        if sources is not None:
            extra[f"{name}_sources"] = sources
    parts = {"query": {"codes": q, "labels": stored_labels(multi_hot, ql), "ids": query},
             "db": {"codes": db, "labels": stored_labels(multi_hot, dl), "ids": database}}
    return codes_arrays(None, parts, exp.topk, encode_seconds=seconds, **extra)


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

