"""The one builder: a run's model and objective, for training and for loading a run.

`build_experiment` loads the data, resolves the config, draws or reuses the split, checks the items
and builds the model and objective, seeded, before any run directory exists, so bad input never
leaves a half-written run. Each part comes from a factory of its own option set (`build_model`,
which a loaded run rebuilds its model with, too).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from lbhash.centers import CenterOptions, generate_centers
from lbhash.data import HashDataset, InputOptions, Split, carve_validation, load_data, make_split
from lbhash.data.base import ForwardPass
from lbhash.data.feature_cache import FrozenFeatures, with_frozen_features
from lbhash.cpus import use_torch_threads
from lbhash.errors import InputError
from lbhash.methods import HashLoss, LowerBoundObjective, available_methods, create_method, loss_output, method_class
from lbhash.methods.csq import tie_center
from lbhash.methods.lower_bound import ObjectiveOptions
from lbhash.methods.neighbourhood import NeighbourhoodOptions, neighbourhood_distillation
from lbhash.methods.options import MethodOptions
from lbhash.models import HashModel, create_feature_model, create_image_model
from lbhash.models import ModelOptions
from lbhash.surrogate import BlockSurrogate, SurrogateOptions
from lbhash.train.config import RunConfig, TrainConfig
from lbhash.train.resolve import resolve_config, run_protocol


class Learner(nn.Module):
    """The hash model and its objective in one module (one unit for Fabric and checkpoints).

    label_columns: the classes the objective knows (protocol unseen:K trains on all but K);
    the label rows of a batch are cut to them before the loss. None: every class.
    neighbourhood: with a weight above 0, the loss gains the part `neighbourhood`, this weight
    times `neighbourhood_distillation` of the head's inputs and u (lbhash.methods.neighbourhood),
    whatever the method and with or without _D, with the set's code similarity (its student).
    """

    def __init__(self, model: HashModel, objective: HashLoss | LowerBoundObjective,
                 label_columns: np.ndarray | None = None, neighbourhood: NeighbourhoodOptions | None = None):
        super().__init__()
        self.model, self.objective, self.neighbourhood = model, objective, neighbourhood or NeighbourhoodOptions()
        columns = None if label_columns is None else torch.as_tensor(label_columns, dtype=torch.long)
        # not persistent: the split (split.npz) records the classes, checkpoints stay as they were
        self.register_buffer("label_columns", columns, persistent=False)

    def objective_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return labels if self.label_columns is None else labels[:, self.label_columns]

    @property
    def lower_bound(self) -> LowerBoundObjective | None:
        return self.objective if isinstance(self.objective, LowerBoundObjective) else None

    def forward(self, x: torch.Tensor, labels: torch.Tensor, index: torch.Tensor):
        """(u, the theta loss, (L_pi, pattern accuracy) or None without the _D objective)."""
        features = self.model.head_inputs(x)
        u = self.model.head(features)
        labels = self.objective_labels(labels)
        features = features.detach()  # a fixed teacher: the features' neighbourhoods
        if self.lower_bound is None:
            out, pi = self.objective(u, labels, index, features), None
        else:
            out, pi = self.lower_bound.losses(u, labels, index, features)
        weight, student = self.neighbourhood.neighbourhood_weight, self.neighbourhood.neighbourhood_student
        if weight:
            with torch.autocast(u.device.type, enabled=False):
                term = neighbourhood_distillation(features.float(), u.float(), student=student)
            out = loss_output({**out.parts, "neighbourhood": weight * term})
        return u, out, pi

    def theta_parameters(self, backbone_lr_scale: float = 1.0) -> list[dict]:
        """The parameter groups of the theta optimizer: the hash head and any parameters of the
        method itself (e.g. a classifier) at the base rate, and the backbone's stages that train
        at `backbone_lr_scale` times it (also while the probe epochs keep them frozen: they get
        no gradient until the backbone trains). One group at scale 1, in the model's order, as
        runs trained before the scale existed (their checkpoints hold one group)."""
        base = self.objective.base if self.lower_bound is not None else self.objective
        backbone = self.model.trainable_backbone_parameters()
        held = {id(p) for p in backbone}
        if backbone_lr_scale == 1:
            return [{"params": [p for p in (*self.model.parameters(), *base.parameters())
                                if p.requires_grad or id(p) in held]}]
        head = [p for p in (*self.model.parameters(), *base.parameters()) if p.requires_grad and id(p) not in held]
        return [{"params": head}] + ([{"params": backbone, "lr_scale": backbone_lr_scale}] if backbone else [])

    def pi_parameters(self) -> list[nn.Parameter]:
        return list(self.lower_bound.surrogate.parameters()) if self.lower_bound is not None else []


@dataclass
class Experiment:
    cfg: RunConfig           # resolved: no default left to fill
    dataset: HashDataset
    split: Split
    topk: int | None         # R of mAP@R (None: the whole database)
    learner: Learner
    skipped_images: int = 0
    # fine-tuning's probe epochs train the head on these cached backbone features (None: no probe)
    probe_dataset: HashDataset | None = None


def input_options(cfg: RunConfig) -> InputOptions:
    """How the run's data set turns items into model inputs. Images are channels-last, as image
    models are (build_model): faster convolutions in oneDNN on the CPU and on GPU tensor cores."""
    data = cfg.dataset
    return InputOptions(data.image_size, data.transform, data.num_workers, cfg.input_kind == "images", data.augment)


# A hash head larger than this (about 1 GB of float32 weights) is refused before it is built.
MAX_HEAD_PARAMETERS = 1 << 28


def check_head_size(model: ModelOptions, bits: int, input_kind: str, input_dim: int | None) -> None:
    """Refuse a feature head above MAX_HEAD_PARAMETERS, before anything is computed for it."""
    widths = [input_dim or 0, *model.hidden, bits]
    size = sum(a * b + b for a, b in zip(widths, widths[1:]))
    if input_kind == "features" and size > MAX_HEAD_PARAMETERS:
        raise InputError(f"a hash head for {input_dim} features with hidden {model.hidden} would have "
                         f"{size:,} parameters (at most {MAX_HEAD_PARAMETERS:,}); reduce the "
                         "feature width or --hidden")


def build_model(model: ModelOptions, bits: int, input_kind: str, input_dim: int | None = None,
                normalization=None, pretrained: bool = True) -> HashModel:
    """The hash model of a resolved config's `model` set, for `bits`-bit codes of the input its data
    set gives (`cfg.input_kind`, `cfg.input_dim`). normalization: (mean, std) of the training features
    for a standardising first layer (None: none). pretrained: load the backbone weights the options
    name (off when a run's own checkpoint will overwrite them)."""
    use_torch_threads()  # every model's work runs in the pool sized here (a busy machine: lbhash.cpus)
    if input_kind == "features":
        check_head_size(model, bits, input_kind, input_dim)
        mean, std = (None, None) if normalization is None else (torch.as_tensor(v) for v in normalization)
        return create_feature_model(input_dim, bits, model.hidden, model.head_dropout, mean, std)
    if input_kind != "images":
        raise InputError(f"config has input_kind {input_kind!r}; resolve it against a data set first")
    built = create_image_model(model if pretrained else model.model_copy(update={"pretrained": None}), bits)
    return built.to(memory_format=torch.channels_last)


def frozen_features(cfg: RunConfig, dataset: HashDataset, model: HashModel, indices) -> FrozenFeatures:
    """The data set with the frozen backbone's features of the items at `indices`, computed once
    (on the run's accelerator when it has one) and cached (lbhash.data.feature_cache)."""
    runtime = cfg.runtime
    gpu = runtime.accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    backbone_device = next(model.backbone.parameters()).device
    model.backbone.to(device)
    try:
        return with_frozen_features(dataset, model.backbone, indices, input_options(cfg),
                                    ForwardPass(device, progress=runtime.progress and sys.stderr.isatty()),
                                    model.bf16_backbone)
    finally:
        model.backbone.to(backbone_device)


def build_centers(options: CenterOptions, bits: int, num_classes: int, seed: int) -> torch.Tensor:
    """The (num_classes, bits) +/-1 class centers of a run (lbhash.centers)."""
    return torch.from_numpy(generate_centers(bits, num_classes, kind=options.centers, seed=seed,
                                             canonical=options.canonical_centers))


def build_method(hashing: MethodOptions, centers: torch.Tensor | None, num_classes: int, num_train: int,
                 multi_label: bool, ties: torch.Tensor | None = None) -> HashLoss:
    """The method of a resolved config's `hashing` set, with its constants; `ties`: the center
    whose bits break the ties of its majority targets, for a method that has them."""
    return create_method(hashing.method, hashing.bits, num_classes, num_train=num_train, centers=centers,
                         multi_label=multi_label, tie_center=ties, **hashing.method_options)


def build_objective(options: ObjectiveOptions, surrogate: SurrogateOptions, base: HashLoss,
                    centers: torch.Tensor, seed: int, ties: torch.Tensor | None = None) -> LowerBoundObjective:
    """The _D objective around `base` (a resolved config's `objective` and `surrogate` sets)."""
    block = BlockSurrogate(base.bits, surrogate.block_size, surrogate.surrogate_hidden, surrogate.surrogate_dropout)
    return LowerBoundObjective(base, centers, block, options, seed=seed,
                               tie_center=ties if options.multilabel_target == "majority" else None)


def _drawn_split(cfg: TrainConfig, dataset: HashDataset) -> tuple[Split | None, InputError | None]:
    """(the run's split before its validation items are carved, None) or, where its protocol refuses the
    data, (None, the error), which the run says after the config's own errors, as it always did."""
    try:
        return make_split(dataset, run_protocol(cfg, dataset), cfg.recipe.seed), None
    except InputError as err:
        return None, err


def build_experiment(cfg: TrainConfig, split: Split | None = None,
                     dataset: HashDataset | None = None) -> Experiment:
    """Load data (unless given), draw the split once (or reuse the one given), resolve the config
    with it, check the items and build the model and objective, seeded."""
    dataset = load_data(cfg.dataset.data) if dataset is None else dataset
    # drawn once: the config's validation share is decided on it, and the run splits by it
    drawn, refused = _drawn_split(cfg, dataset) if split is None else (None, None)
    cfg = resolve_config(cfg, dataset, drawn)
    if refused is not None:
        raise refused
    data, hashing, recipe, model_options = cfg.dataset, cfg.hashing, cfg.recipe, cfg.model
    method, bits, seed, weight = hashing.method, hashing.bits, recipe.seed, cfg.neighbourhood.neighbourhood_weight
    images = cfg.input_kind == "images"
    if split is None:
        split = drawn
        if recipe.validation:
            split = carve_validation(split, dataset.labels, recipe.validation, seed)
    split.check(len(dataset), dataset.name)
    cls = method_class(method)
    if cls.single_label_only and dataset.multi_label:
        raise InputError(f"method {method} is single-label only, but {dataset.name} is multi-label")
    if (cls.needs_features or weight) and images and not model_options.freeze_backbone:
        who = f"method {method}" if cls.needs_features else f"neighbourhood_weight {weight:g}"
        raise InputError(f"{who} keeps the neighbourhoods of fixed input features: train on feature data or "
                         "with --freeze-backbone, not on a backbone that learns")
    if cls.needs_labels and dataset.num_classes == 0:
        free = ", ".join(m for m in available_methods() if not method_class(m).needs_labels)
        raise InputError(f"method {method} learns from labels, but {dataset.name} has none "
                         f"(methods without labels: {free})")
    unlabelled = np.flatnonzero(dataset.labels[split.train].sum(1) == 0)
    if len(unlabelled) and (hashing.lbhash or cls.uses_centers):
        raise InputError(f"training item {int(split.train[unlabelled[0]])} of {dataset.name} has no label "
                         f"(an all-zero label row); {cfg.variant} needs a class for every training item")
    split, skipped = _usable_items(dataset, split, data.skip_bad_images)
    _check_classes(cfg, dataset, split, cls.needs_labels or cls.uses_centers or hashing.lbhash)
    # unseen:K: centers, classifiers and label rows cover the training classes only
    columns = np.setdiff1d(np.arange(dataset.num_classes), split.unseen_classes) if len(split.unseen_classes) else None
    num_classes = dataset.num_classes if columns is None else len(columns)
    torch.manual_seed(seed)
    centers = build_centers(cfg.class_centers, bits, num_classes, seed) if hashing.lbhash or cls.uses_centers else None
    check_head_size(model_options, bits, cfg.input_kind, cfg.input_dim)  # before the statistics copy the rows
    normalization = dataset.normalization(split.train) if data.normalize == "zscore" else None
    model = build_model(model_options, bits, cfg.input_kind, cfg.input_dim, normalization)
    probe_dataset = None
    if images and model_options.freeze_backbone:
        used = np.concatenate([split.train, split.query, split.database, split.validation])
        dataset = frozen_features(cfg, dataset, model, used)
    elif images and recipe.probe_epochs:  # the probe reads what the pretrained backbone sees
        probe_dataset = frozen_features(cfg, dataset, model, np.concatenate([split.train, split.validation]))
    ties = tie_center(bits, seed, cfg.objective.csq_ties)  # CSQ's tie rule (None: ties -> +1)
    objective = build_method(hashing, centers, num_classes, len(split.train), dataset.multi_label, ties)
    if hashing.lbhash:
        objective = build_objective(cfg.objective, cfg.surrogate, objective, centers, seed, ties)
    if cls.closed_form:
        objective.check_fit_inputs(len(split.train), cfg.input_dim)
    learner = Learner(model, objective, columns, cfg.neighbourhood)
    return Experiment(cfg, dataset, split, evaluation_topk(cfg, split), learner, skipped, probe_dataset)


def _check_classes(cfg: RunConfig, dataset: HashDataset, split: Split, learns_classes: bool) -> None:
    """What the split's parts must hold, checked before a run writes anything: a method that
    learns classes needs two of them among the training items; evaluation (mAP and the lower
    bound) needs two among the database items."""
    if not dataset.num_classes:
        return
    parts = [("train", split.train, f"{cfg.variant} learns to tell classes apart: it", "")] if learns_classes else []
    if cfg.recipe.test and len(split.query) and len(split.database):
        parts.append(("database", split.database, "evaluation (mAP, the lower bound)",
                      " (--protocol all-train trains without evaluating)"))
    for part, items, who, hint in parts:
        held = np.flatnonzero(dataset.labels[items].any(0))
        if len(held) < 2:
            raise InputError(f"{dataset.name}: the {part} part of split {cfg.dataset.protocol} holds {len(held)} "
                             f"class(es) with items; {who} needs at least 2{hint}")


def evaluation_topk(cfg: RunConfig, split) -> int | None:
    """The R of mAP@R a run evaluates at: its --topk, else its protocol's (None: all)."""
    topk = cfg.recipe.topk
    return None if topk == "all" else topk if topk is not None else split.topk


def _usable_items(dataset: HashDataset, split: Split, skip_bad: bool) -> tuple[Split, int]:
    """Every item the run uses must be usable; with skip_bad, unreadable images leave the split."""
    used = np.unique(np.concatenate([split.train, split.query, split.database, split.validation]))
    good, bad = dataset.check_items(used, skip_bad=skip_bad)
    if not bad:
        return split, 0
    keep = np.isin(np.arange(len(dataset)), good)
    return replace(split, train=split.train[keep[split.train]], query=split.query[keep[split.query]],
                   database=split.database[keep[split.database]],
                   validation=split.validation[keep[split.validation]]), int(bad)
