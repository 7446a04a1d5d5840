"""Everything a run is built from: data, split, centers, model and objective.

All of it is built and checked before a run directory is created, so that bad input never
leaves a half-written run behind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lbhash.centers import generate_centers
from lbhash.data import ArrayDataset, Split, load_data, make_split
from lbhash.methods import HashLoss, LowerBoundObjective, create_method, method_class
from lbhash.models import HashModel, create_feature_model
from lbhash.surrogate import BlockSurrogate
from lbhash.train.config import TrainConfig

DEFAULT_PROTOCOL = {"digits": "digits"}


@dataclass
class Experiment:
    cfg: TrainConfig
    dataset: ArrayDataset
    split: Split
    topk: int | None
    learner: "Learner"

    @property
    def model(self) -> HashModel:
        return self.learner.model


class Learner(nn.Module):
    """The hash model and its objective in one module (one unit for Fabric and checkpoints)."""

    def __init__(self, model: HashModel, objective: HashLoss | LowerBoundObjective):
        super().__init__()
        self.model, self.objective = model, objective

    @property
    def lower_bound(self) -> LowerBoundObjective | None:
        return self.objective if isinstance(self.objective, LowerBoundObjective) else None

    def forward(self, x: torch.Tensor, labels: torch.Tensor, index: torch.Tensor):
        u = self.model(x)
        out = self.objective(u, labels, index)
        pi = self.lower_bound.loss_pi(u) if self.lower_bound is not None else None
        return u, out, pi

    def theta_parameters(self) -> list[nn.Parameter]:
        """The hash model and any parameters of the method itself (e.g. a classifier)."""
        base = self.objective.base if self.lower_bound is not None else self.objective
        return [p for p in (*self.model.parameters(), *base.parameters()) if p.requires_grad]

    def pi_parameters(self) -> list[nn.Parameter]:
        return list(self.lower_bound.surrogate.parameters()) if self.lower_bound is not None else []


def default_protocol(cfg: TrainConfig, dataset: ArrayDataset) -> str:
    if cfg.protocol:
        return cfg.protocol
    kind = cfg.data.split(":", 1)[0]
    if kind in DEFAULT_PROTOCOL:
        return DEFAULT_PROTOCOL[kind]
    if dataset.is_test is not None:
        return "given"
    raise ValueError(f"data {cfg.data!r} has no train/test split of its own: choose --protocol")


def build_experiment(cfg: TrainConfig, split: Split | None = None) -> Experiment:
    """Load data, draw (or reuse) the split and build the model and objective, seeded."""
    cfg = cfg.resolved()
    dataset = load_data(cfg.data)
    if split is None:
        split = make_split(dataset, default_protocol(cfg, dataset), cfg.seed)
    split.check(len(dataset), dataset.name)
    cfg = dataclasses.replace(cfg, protocol=split.protocol)  # the saved config names it
    cls = method_class(cfg.method)
    labels = dataset.labels
    if cls.single_label_only and dataset.multi_label:
        raise ValueError(f"method {cfg.method} is single-label only, but {dataset.name} is multi-label")
    unlabelled = np.flatnonzero(labels[split.train].sum(1) == 0)
    if len(unlabelled) and (cfg.lbhash or cls.uses_centers):
        raise ValueError(f"training item {int(split.train[unlabelled[0]])} of {dataset.name} has no label "
                         f"(an all-zero label row); {cfg.variant} needs a class for every training item")
    if not np.isfinite(dataset.x).all():
        row = int(np.flatnonzero(~np.isfinite(dataset.x).all(1))[0])
        raise ValueError(f"{dataset.name}: features contain NaN or inf at row {row}")
    topk = _resolve_topk(cfg.topk, split)
    torch.manual_seed(cfg.seed)
    bits, classes = cfg.bits, dataset.num_classes
    centers = None
    if cfg.lbhash or cls.uses_centers:
        centers = torch.from_numpy(generate_centers(bits, classes, kind=cfg.centers, seed=cfg.seed))
    model = _feature_model(cfg, dataset, split)
    base = create_method(cfg.method, bits, classes, num_train=len(split.train), centers=centers,
                         multi_label=dataset.multi_label, **cfg.method_options)
    objective: HashLoss | LowerBoundObjective = base
    if cfg.lbhash:
        surrogate = BlockSurrogate(bits, cfg.block_size, cfg.surrogate_hidden, cfg.surrogate_dropout)
        objective = LowerBoundObjective(base, centers, surrogate, weight=cfg.lbhash_weight,
                                        mode=cfg.lbhash_mode, theta_dropout=cfg.theta_dropout)
    return Experiment(cfg, dataset, split, topk, Learner(model, objective))


def _feature_model(cfg: TrainConfig, dataset: ArrayDataset, split: Split) -> HashModel:
    mean = std = None
    if cfg.normalize == "zscore":
        train_x = torch.from_numpy(np.ascontiguousarray(dataset.x[split.train], dtype=np.float32))
        mean, std = train_x.mean(0), train_x.std(0)
    return create_feature_model(dataset.x.shape[1], cfg.bits, cfg.hidden, cfg.head_dropout, mean, std)


def _resolve_topk(topk, split: Split) -> int | None:
    if topk == "all":
        return None
    return topk if topk is not None else split.topk
