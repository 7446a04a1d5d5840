"""The learned instance code's head, trained in memory (docs/search.md, "The learned instance code").

A small network on the backbone's embedding, x = unit(embedding) - mean, h = relu(x W1 + b1),
code = sign(h W2 + b2), trained so that a photo and its edited copies (lbhash.data.edits.random_edit)
get the same code and other photos far codes. The objective is a multi-positive contrastive loss
(SupCon, Khosla et al. 2020; SimCLR's NT-Xent with every view of a photo a positive) on the codes, as
CIBHash (Qiu et al. 2021) and SSCD (Pizzi et al. 2022) train copy-detection codes and descriptors:
each batch holds B photos, each as the index keeps it (its item embedding, lbhash.data.views) and as
two of its edited copies, the way queries come; the loss is taken on the tanh outputs scaled to unit
length and on their signs through a straight-through estimator, so that the Hamming distance itself
is trained, plus a small quantisation term pulling the outputs to +/-1.

`fit_instance_head` returns plain arrays (lbhash.instance.InstanceTransform applies them with numpy).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lbhash.errors import InputError

logger = logging.getLogger("lbhash")


@dataclass(frozen=True)
class HeadOptions:
    """The head's width and its training (chosen on validation photos: docs/search.md)."""

    hidden: int = 1024
    steps: int = 600
    batch: int = 256          # photos a step (each with its item form and two copies)
    lr: float = 1e-3
    weight_decay: float = 1e-4
    temperature: float = 0.2
    quantisation: float = 0.1


class _Head(torch.nn.Module):
    """relu(x W1 + b1) W2 + x S + b: a hidden layer beside a linear path (S starts as the ITQ projection)."""

    def __init__(self, d: int, hidden: int, bits: int, skip: np.ndarray):
        super().__init__()
        self.hidden, self.out = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, bits)
        self.skip = torch.nn.Parameter(torch.from_numpy(skip.astype(np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x))) + x @ self.skip


def fit_instance_head(items: np.ndarray, views: np.ndarray, owners: np.ndarray, bits: int,
                      options: HeadOptions = HeadOptions(), seed: int = 0, start: np.ndarray | None = None) -> dict:
    """Train the head on `items` (n, d), the photos' item embeddings, and `views` (m, d), embeddings of
    edited copies, `owners` (m,) the photo (row of `items`) each copy is of; every photo needs two
    copies at least. Returns float64 arrays `mean` (d,), `hidden` (d, h), `hidden_bias` (h,),
    `projection` (h, bits), `bias` (bits,)."""
    items, views = np.asarray(items, np.float64), np.asarray(views, np.float64)
    owners = np.asarray(owners, np.int64)
    n, d = items.shape
    if views.ndim != 2 or views.shape[1] != d or len(owners) != len(views) or n < 2:
        raise InputError(f"an instance head trains on 2 or more items and their copies of the same width, got items "
                         f"{items.shape}, copies {views.shape}, owners {owners.shape}")
    counts = np.bincount(owners, minlength=n)
    if counts.min() < 2 or owners.max() >= n:
        raise InputError("an instance head needs two edited copies of every item at least")
    mean = _unit(items).mean(axis=0)
    gen = torch.Generator().manual_seed(int(seed))
    x_items = torch.from_numpy((_unit(items) - mean).astype(np.float32))
    if start is None:  # a random projection
        start = np.random.default_rng(seed).standard_normal((d, bits))
    # scaled so that the items' outputs have unit spread: tanh then starts near the signs
        start = start / max(float((x_items.numpy() @ start).std()), 1e-12)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(int(seed))
        net = _Head(d, options.hidden, bits, start)
        torch.nn.init.zeros_(net.out.weight)  # the hidden path starts silent: the first codes are `start`'s
    x_views = torch.from_numpy((_unit(views) - mean).astype(np.float32))
    # each photo's copies as a padded table: row p holds the rows of x_views that are copies of p
    order = np.argsort(owners, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    table = torch.from_numpy(order.astype(np.int64))
    first_copy, n_copies = torch.from_numpy(starts.astype(np.int64)), torch.from_numpy(counts.astype(np.int64))
    opt = torch.optim.AdamW(net.parameters(), lr=options.lr, weight_decay=options.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, options.steps)
    batch = min(options.batch, n)
    started, last = time.perf_counter(), time.perf_counter()
    for step in range(options.steps):
        photos = torch.randperm(n, generator=gen)[:batch]
        first = (torch.rand(batch, generator=gen, dtype=torch.float64) * n_copies[photos]).long()
        # a second copy, never the first: shifted by 1 .. count - 1
        shift = 1 + (torch.rand(batch, generator=gen, dtype=torch.float64) * (n_copies[photos] - 1)).long()
        pick = [first_copy[photos] + first, first_copy[photos] + (first + shift) % n_copies[photos]]
        x = torch.cat([x_items[photos], x_views[table[pick[0]]], x_views[table[pick[1]]]])
        who = torch.arange(batch).repeat(3)
        u = torch.tanh(net(x))
        signs = u + (torch.sign(u) - u).detach()  # straight through: the codes' own distances are trained
        loss = _supcon(F.normalize(u, dim=1), who, options.temperature) + \
            _supcon(signs / np.sqrt(bits), who, options.temperature) + options.quantisation * ((u.abs() - 1) ** 2).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"the instance head's loss is {loss.item()} at step {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            logger.info("instance head: step %d of %d, loss %.3f (%.0f s)", step + 1, options.steps, loss.item(),
                        last - started)
    arrays = {"hidden": net.hidden.weight.T, "hidden_bias": net.hidden.bias, "projection": net.out.weight.T,
              "bias": net.out.bias, "skip": net.skip}
    return {"mean": mean, **{k: v.detach().numpy().astype(np.float64) for k, v in arrays.items()}}


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


def _supcon(z: torch.Tensor, who: torch.Tensor, temperature: float) -> torch.Tensor:
    """The multi-positive contrastive loss of rows `z` (unit length), rows with the same `who` positives."""
    sim = z @ z.T / temperature
    eye = torch.eye(len(z), dtype=torch.bool)
    sim = sim.masked_fill(eye, -torch.inf)
    positive = (who[:, None] == who[None, :]) & ~eye
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    return -(log_prob.masked_fill(~positive, 0).sum(dim=1) / positive.sum(dim=1)).mean()
