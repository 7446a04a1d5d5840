"""Everything a run is built from: data, split, centers, model and objective.

All of it is built and checked before a run directory is created, so that bad input never
leaves a half-written run behind. Feature files train a hash head; image data sets train a
backbone (lbhash.models) followed by a hash head.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lbhash.centers import generate_centers
from lbhash.data import Split, load_data, make_split
from lbhash.methods import HashLoss, LowerBoundObjective, create_method, method_class
from lbhash.models import HashModel, create_feature_model
from lbhash.surrogate import BlockSurrogate
from lbhash.train.batches import ArrayBatches, LoaderBatches
from lbhash.train.config import TrainConfig
from lbhash.train.encode import encode_array, encode_dataset

DEFAULT_PROTOCOL = {"digits": "digits", "cifar10": "cifar10"}
DEFAULT_IMAGE_BACKBONE = "resnet20"


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


@dataclass
class Experiment:
    cfg: TrainConfig
    dataset: object          # ArrayDataset (features) or ImageDataset
    split: Split
    topk: int | None
    learner: Learner
    skipped_images: int = 0

    @property
    def model(self) -> HashModel:
        return self.learner.model

    @property
    def images(self) -> bool:
        return hasattr(self.dataset, "torch_dataset")

    def train_batches(self, device, rank: int = 0, world_size: int = 1, channels_last: bool = False):
        ds, idx, cfg = self.dataset, self.split.train, self.cfg
        if not self.images:
            return ArrayBatches(ds.x[idx], ds.labels[idx], cfg.batch_size, device, rank, world_size)
        return LoaderBatches(ds.torch_dataset(idx, image_transform(cfg, train=True)), cfg.batch_size,
                             device, cfg.num_workers, rank, world_size, channels_last)

    def encode(self, model: nn.Module, index: np.ndarray, device="cpu", autocast=contextlib.nullcontext,
               channels_last: bool = False, progress: bool = False) -> np.ndarray:
        return encode_items(self.cfg, self.dataset, model, index, device, autocast, channels_last, progress)


def image_transform(cfg: TrainConfig, train: bool):
    from lbhash.data.transforms import build_transforms

    return build_transforms(cfg.transform, cfg.image_size, train=train)


def encode_items(cfg: TrainConfig, dataset, model: nn.Module, index: np.ndarray, device="cpu",
                 autocast=contextlib.nullcontext, channels_last: bool = False,
                 progress: bool = False) -> np.ndarray:
    """+/-1 codes of the data set's items `index` (the eval transform for images)."""
    if not hasattr(dataset, "torch_dataset"):
        return encode_array(model, dataset.x[index], device=device, autocast=autocast)
    return encode_dataset(model, dataset.torch_dataset(index, image_transform(cfg, train=False)),
                          batch_size=max(cfg.batch_size, 256), device=device,
                          num_workers=cfg.num_workers, autocast=autocast,
                          channels_last=channels_last, progress=progress)


def default_protocol(cfg: TrainConfig, dataset) -> str:
    if cfg.protocol:
        return cfg.protocol
    kind = cfg.data.split(":", 1)[0]
    if kind in DEFAULT_PROTOCOL:
        return DEFAULT_PROTOCOL[kind]
    if getattr(dataset, "parts", None) is not None:
        return "lists"
    if dataset.is_test is not None:
        return "given"
    raise ValueError(f"data {cfg.data!r} has no train/test split of its own: choose --protocol")


def build_experiment(cfg: TrainConfig, split: Split | None = None) -> Experiment:
    """Load data, draw (or reuse) the split and build the model and objective, seeded."""
    cfg = cfg.resolved()
    dataset = load_data(cfg.data)
    images = hasattr(dataset, "torch_dataset")
    if split is None:
        split = make_split(dataset, default_protocol(cfg, dataset), cfg.seed)
    split.check(len(dataset), dataset.name)
    cfg = dataclasses.replace(cfg, protocol=split.protocol)  # the saved config names it
    cls = method_class(cfg.method)
    if cls.single_label_only and dataset.multi_label:
        raise ValueError(f"method {cfg.method} is single-label only, but {dataset.name} is multi-label")
    unlabelled = np.flatnonzero(dataset.labels[split.train].sum(1) == 0)
    if len(unlabelled) and (cfg.lbhash or cls.uses_centers):
        raise ValueError(f"training item {int(split.train[unlabelled[0]])} of {dataset.name} has no label "
                         f"(an all-zero label row); {cfg.variant} needs a class for every training item")
    skipped = 0
    if images:
        split, skipped = _check_images(dataset, split, cfg.skip_bad_images)
    elif not np.isfinite(dataset.x).all():
        row = int(np.flatnonzero(~np.isfinite(dataset.x).all(1))[0])
        raise ValueError(f"{dataset.name}: features contain NaN or inf at row {row}")
    torch.manual_seed(cfg.seed)
    bits, classes = cfg.bits, dataset.num_classes
    centers = None
    if cfg.lbhash or cls.uses_centers:
        centers = torch.from_numpy(generate_centers(bits, classes, kind=cfg.centers, seed=cfg.seed))
    if images:
        cfg, model = _image_model(cfg)
    else:
        cfg = dataclasses.replace(cfg, hidden=[1024] if cfg.hidden is None else list(cfg.hidden))
        model = _feature_model(cfg, dataset, split)
    base = create_method(cfg.method, bits, classes, num_train=len(split.train), centers=centers,
                         multi_label=dataset.multi_label, **cfg.method_options)
    objective: HashLoss | LowerBoundObjective = base
    if cfg.lbhash:
        surrogate = BlockSurrogate(bits, cfg.block_size, cfg.surrogate_hidden, cfg.surrogate_dropout)
        objective = LowerBoundObjective(base, centers, surrogate, weight=cfg.lbhash_weight,
                                        mode=cfg.lbhash_mode, theta_dropout=cfg.theta_dropout)
    topk = _resolve_topk(cfg.topk, split)
    return Experiment(cfg, dataset, split, topk, Learner(model, objective), skipped)


def _feature_model(cfg: TrainConfig, dataset, split: Split) -> HashModel:
    if cfg.backbone is not None:
        raise ValueError(f"--backbone {cfg.backbone} needs image data; {dataset.name} holds features")
    mean = std = None
    if cfg.normalize == "zscore":
        train_x = torch.from_numpy(np.ascontiguousarray(dataset.x[split.train], dtype=np.float32))
        mean, std = train_x.mean(0), train_x.std(0)
    return create_feature_model(dataset.x.shape[1], cfg.bits, cfg.hidden, cfg.head_dropout, mean, std)


def _image_model(cfg: TrainConfig) -> tuple[TrainConfig, HashModel]:
    """Backbone -> hash head; fills the backbone, head, image size and transform defaults."""
    from lbhash.models import create_image_model

    backbone = cfg.backbone or DEFAULT_IMAGE_BACKBONE
    hidden = [] if cfg.hidden is None else list(cfg.hidden)
    model = create_image_model(backbone, cfg.bits, hidden=hidden, pretrained=cfg.pretrained,
                               freeze_backbone=cfg.freeze_backbone, dropout=cfg.head_dropout)
    net = model.backbone
    cfg = dataclasses.replace(cfg, backbone=backbone, hidden=hidden,
                              image_size=cfg.image_size or net.default_image_size,
                              transform=cfg.transform or net.transform_preset)
    return cfg, model


def _check_images(dataset, split: Split, skip_bad: bool) -> tuple[Split, int]:
    """Every image the run uses must decode; with skip_bad, unreadable ones leave the split."""
    from lbhash.data import check_images

    used = np.unique(np.concatenate([split.train, split.query, split.database]))
    good, bad = check_images(dataset, used, skip_bad=skip_bad)
    if not bad:
        return split, 0
    keep = np.isin(np.arange(len(dataset)), good)
    return dataclasses.replace(split, train=split.train[keep[split.train]],
                               query=split.query[keep[split.query]],
                               database=split.database[keep[split.database]]), int(bad)


def _resolve_topk(topk, split: Split) -> int | None:
    if topk == "all":
        return None
    return topk if topk is not None else split.topk
