"""Resolving a config on its data: `resolve_config` fills every None that has a default, from
the method's class under the `defaults` profile, the data set and the backbone's registered
defaults, and returns the complete config a run saves and reloads. Nothing changes a config
after this.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lbhash.data import MIN_NATIVE_SIDE, Split, carve_validation, make_split
from lbhash.data.unseen import PREFIX as UNSEEN_PREFIX
from lbhash.data.unseen import with_base
from lbhash.errors import InputError
from lbhash.methods import method_class, method_defaults
from lbhash.models import FEATURE_HIDDEN
from lbhash.models import IMAGE_BACKBONE as DEFAULT_IMAGE_BACKBONE
from lbhash.train.config import RunConfig, TrainConfig, make_config

DEFAULT_FEATURE_HIDDEN = list(FEATURE_HIDDEN)
DEFAULT_PROTOCOL = {"digits": "digits", "cifar10": "cifar10"}  # data kind -> protocol
# The fine-tuning recipe of a pretrained backbone that trains, each part its own option
# (docs/models.md, "Fine-tuning": the validation table that chose these): a linear probe on
# the cached features first, then every stage at a tenth of the head's rate with the
# pretrained BatchNorm statistics kept, and a validation mAP after every epoch (with a
# validation split: it is cheap, where a test evaluation encodes the whole database).
FINETUNE_PROBE_EPOCHS = 10
FINETUNE_TUNE_EPOCHS = 8
FINETUNE_LR_SCALE = 0.1
FINETUNE_EVAL_EVERY = 1


def run_protocol(cfg: TrainConfig, dataset) -> str:
    """The protocol a run of `cfg` splits `dataset` by: the config's, else the data set's own (an
    `unseen:K` protocol completed with the data set's own)."""
    protocol = cfg.dataset.protocol or default_protocol(cfg.dataset.data, dataset)
    if protocol.startswith(UNSEEN_PREFIX):  # unseen:K -> unseen:K:<the data set's own>
        protocol = with_base(protocol, default_protocol(cfg.dataset.data, dataset))
    return protocol


def resolve_config(cfg: TrainConfig, dataset, split: Split | None = None) -> RunConfig:
    """The complete config of a run on `dataset` (a lbhash.data.HashDataset): every None that
    has a default is filled, from the method's class, the data set and the backbone's
    registered defaults, and the data set's input kind and width recorded. Nothing changes a
    config after this. A RunConfig (a run resumed) must name the data set's width again.
    `split`: the run's split before its validation items are carved (`make_split` by
    `run_protocol`), which decides whether the profile's validation share can be held out
    (None: drawn here for that)."""
    from lbhash.models import backbone_defaults

    d = method_defaults(cfg.hashing.method, cfg.hashing.defaults)
    values = cfg.to_dict()
    made_for = values.pop("input_dim", None)  # a RunConfig's: its data set's width
    values.pop("input_kind", None)
    values["protocol"] = run_protocol(cfg, dataset)
    if values["validation"] is None:
        values["validation"] = _profile_validation(d.recipe.validation, values["protocol"], cfg.recipe.seed, dataset,
                                                   split)
    for name, value in d.options.items():  # the profile's recipe and _D objective
        if values[name] is None:
            values[name] = value
    if values["select"] is None:  # a validation split is there to choose the epoch a run keeps
        values["select"] = "best-val" if values["validation"] else "last"
    _fill_backbone_recipe(values, cfg, dataset.input_kind)
    values["method_options"] = {**d.constants, **_checked_method_options(cfg.hashing.method, cfg.hashing.method_options)}
    values["input_kind"] = dataset.input_kind
    if dataset.input_kind == "features":
        if cfg.model.backbone is not None:
            raise InputError(f"--backbone {cfg.model.backbone} needs image data; {dataset.name} holds features")
        if made_for is not None and made_for != dataset.input_dim():
            raise InputError(f"{dataset.name} has {dataset.input_dim()} features per item, but the run "
                             f"was made for {made_for}")
        values["input_dim"] = dataset.input_dim()
        default_hidden = [] if method_class(cfg.hashing.method).closed_form else DEFAULT_FEATURE_HIDDEN
        values["hidden"] = list(default_hidden if cfg.model.hidden is None else cfg.model.hidden)
    else:
        backbone = cfg.model.backbone or DEFAULT_IMAGE_BACKBONE
        size, transform = backbone_defaults(backbone)
        # a frozen backbone's head trains on fixed features, as a feature run's does, and takes its hidden layer
        # (validation: docs/results/pretrained-cifar10.md, "A hidden layer on frozen features"); a backbone that
        # trains keeps one Linear
        default_hidden = DEFAULT_FEATURE_HIDDEN if cfg.model.freeze_backbone else []
        values.update(backbone=backbone, hidden=list(default_hidden if cfg.model.hidden is None else cfg.model.hidden),
                      image_size=cfg.dataset.image_size or default_image_size(dataset, size, transform),
                      transform=cfg.dataset.transform or transform, input_dim=None)
    return make_config(values, kind=RunConfig)


def _fill_backbone_recipe(values: dict[str, Any], cfg: TrainConfig, input_kind: str) -> None:
    """The fine-tuning recipe's defaults for a pretrained backbone that trains (FINETUNE_*), the
    neutral values otherwise, and the backbone's precision; refuses options that mean nothing
    for the run (a probe without a backbone that trains, stages of feature data)."""
    from lbhash.cpus import bf16_native

    learns = input_kind == "images" and not cfg.model.freeze_backbone
    tunes = learns and cfg.model.pretrained is not None  # a pretrained backbone that trains: the fine-tuning recipe
    if cfg.recipe.probe_epochs and not learns:
        raise InputError(f"probe_epochs {cfg.recipe.probe_epochs}: the probe epochs come before a backbone trains; "
                         "this run has no image backbone that trains (features, or --freeze-backbone)")
    if cfg.model.train_stages and not learns:
        raise InputError(f"train_stages {cfg.model.train_stages}: this run has no image backbone that trains")
    own = method_class(cfg.hashing.method).finetune_epochs
    own_probe, own_tune = own or (FINETUNE_PROBE_EPOCHS, FINETUNE_TUNE_EPOCHS)
    probe = cfg.recipe.probe_epochs if cfg.recipe.probe_epochs is not None else own_probe if tunes else 0
    values["probe_epochs"] = probe
    if probe and cfg.runtime.devices > 1:
        raise InputError(f"probe_epochs {probe}: the probe epochs train on one process; with --devices "
                         f"{cfg.runtime.devices} give --probe-epochs 0 (or train the probe first: --freeze-backbone)")
    if tunes and cfg.recipe.epochs is None:
        values["epochs"] = probe + own_tune
    if tunes and cfg.recipe.eval_every is None and values["validation"]:  # test evaluations would encode the database
        values["eval_every"] = FINETUNE_EVAL_EVERY
    if probe and probe >= values["epochs"]:
        raise InputError(f"probe_epochs {probe} must be fewer than epochs ({values['epochs']}): the backbone "
                         "trains after the probe (--freeze-backbone trains the head alone)")
    values["backbone_lr_scale"] = (cfg.recipe.backbone_lr_scale if cfg.recipe.backbone_lr_scale is not None
                                   else FINETUNE_LR_SCALE if tunes else 1.0)
    values["freeze_bn"] = cfg.model.freeze_bn if cfg.model.freeze_bn is not None else tunes
    values["train_stages"] = cfg.model.train_stages or 0
    if cfg.model.backbone_precision == "auto":
        native = bf16_native("cuda" if cfg.runtime.accelerator in ("gpu", "cuda") else "cpu")
        values["backbone_precision"] = "bf16" if input_kind == "images" and cfg.model.pretrained and native else "fp32"


def _profile_validation(share: float, protocol: str, seed: int, dataset, split: Split | None) -> float:
    """The profile's validation share where the split (`split`, else drawn) can give one: labelled
    training items, and a class (or, multi-label, a tenth) to spare; else 0 (a run on a handful of
    items keeps its last epoch rather than fail on an option nobody asked for)."""
    if not share:
        return 0.0
    try:
        split = make_split(dataset, protocol, seed) if split is None else split
        if not dataset.labels[split.train].any(1).all():
            return 0.0  # items without a label: nothing to measure a validation mAP with
        carve_validation(split, dataset.labels, share, seed)
    except InputError:
        return 0.0  # the builder, which draws the same split, names a bad protocol
    return share


def default_image_size(dataset, backbone_size: int, preset: str) -> int:
    """The backbone's input side, except that for small-image backbones square images from
    MIN_NATIVE_SIDE up to it keep their own side (28x28 digits train at 28: upscaling them to
    32 would cost 30% more). ImageNet networks (preset imagenet) always get their own side:
    they downsample 32x, and their weights learned objects at that scale (CIFAR-10's 32 px
    pooled by EfficientNet-Lite0 at 32 give mAP 0.28 where 224 gives 0.8)."""
    if preset == "imagenet":
        return backbone_size
    side = dataset.native_side()
    return side if side is not None and MIN_NATIVE_SIDE <= side < backbone_size else backbone_size


def default_protocol(data: str, dataset) -> str:
    kind = data.split(":", 1)[0]
    if kind in DEFAULT_PROTOCOL:
        return DEFAULT_PROTOCOL[kind]
    if dataset.parts is not None:
        return "lists"
    if dataset.is_test is not None:
        return "given"
    raise InputError(f"data {data!r} has no train/test split of its own; choose a protocol: "
                     f"{suggest_protocols(dataset)} (docs/data.md#split-protocols)")


def suggest_protocols(dataset) -> str:
    """The protocols that suit a data set without a split of its own, with their exact flags:
    all-train for a folder of one's own photos (every item trains and is indexed), and a split
    that holds queries out to measure mAP, sized to this data's smallest class."""
    everything = "`--protocol all-train` trains on every item and indexes them all (no evaluation)"
    labels = np.asarray(dataset.labels, bool)
    if labels.ndim != 2 or not labels.shape[1] or not len(labels):
        return everything
    if dataset.multi_label:
        queries = max(1, min(1000, len(labels) // 10))
        if len(labels) - queries < 1:
            return everything
        return (f"{everything}, or `--protocol random:{len(labels) - queries},{queries}` holds {queries} random items "
                "out as queries to measure mAP (the rest train and are the database)")
    counts = labels.sum(0)
    smallest = int(counts[counts > 0].min())
    if smallest < 2:
        return everything
    queries = max(1, min(100, smallest // 5))
    train = min(500, smallest - queries)
    return (f"{everything}, or `--protocol per-class:{train},{queries},+train` holds {queries} queries per class "
            f"out to measure mAP (the smallest class has {smallest} items; the rest are the database)")


def _checked_method_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """Known constant names, each with a value of its default's type."""
    known = method_class(method).constants()
    for name, value in options.items():
        if name not in known:
            raise InputError(f"method {method}: unexpected keyword argument {name!r} "
                             f"(its constants: {', '.join(known) or 'none'})")
        default = known[name]
        ok = (isinstance(value, bool) if isinstance(default, bool)
              else isinstance(value, int) and not isinstance(value, bool) if isinstance(default, int)
              else isinstance(value, (int, float)) and not isinstance(value, bool) if isinstance(default, float)
              else isinstance(value, type(default)))
        if not ok:
            raise InputError(f"method option {name} of {method} must be a {type(default).__name__}, got {value!r}")
    return dict(options)
