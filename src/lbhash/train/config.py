"""Training configuration: defaults <- YAML config file <- command-line flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lbhash.methods.defaults import method_defaults


@dataclass
class TrainConfig:
    """Everything a run needs. None means "the method's (or the data set's) default"."""

    data: str = "digits"
    protocol: str | None = None         # default: the data set's own ("digits", "given", ...)
    method: str = "csq"
    defaults: str = "paper"              # method defaults profile: paper | benchmark
    lbhash: bool = False                 # train the method's _D variant
    bits: int = 64
    seed: int = 0
    epochs: int | None = None
    batch_size: int | None = None
    optimizer: str | None = None         # adam | sgd | rmsprop
    lr: float | None = None              # eta_2, the hash model's learning rate
    weight_decay: float | None = None
    lr_step: int | None = None           # decay every lr_step epochs (0: never)
    lr_gamma: float | None = None
    method_options: dict = field(default_factory=dict)   # the method's constants
    centers: str = "auto"                # center generator (lbhash.centers)
    lbhash_weight: float = 1.0           # lambda of L_theta
    lbhash_mode: str | None = None       # add | replace (default: the method's)
    surrogate_lr: float = 1e-3           # eta_1
    block_size: int = 8
    surrogate_hidden: int = 256
    surrogate_dropout: float = 0.5
    theta_dropout: bool = True           # dropout active in the L_theta pass
    hidden: list | None = None           # hash head widths (default: [1024] for features, [] for images)
    head_dropout: float = 0.0
    backbone: str | None = None          # images: a registered backbone (lbhash.models)
    pretrained: str | None = None        # backbone weights: a local file, or "torchvision" (hub cache)
    freeze_backbone: bool = False        # train only the hash layers
    image_size: int | None = None        # default: the backbone's
    transform: str | None = None         # imagenet | cifar | cifar-augment (default: the backbone's)
    num_workers: int = 0                 # DataLoader workers for image data
    skip_bad_images: bool = False        # drop unreadable images (counted) instead of stopping
    normalize: str = "zscore"            # zscore | none (feature standardisation)
    eval_every: int = 10                 # evaluate every N epochs (0: only at the end)
    topk: Any = None                     # R of mAP@R: int, "all", or None (protocol default)
    accelerator: str = "cpu"
    devices: int = 1
    precision: str = "32-true"
    progress: bool = True

    def resolved(self) -> "TrainConfig":
        """Fill method defaults and check every value (one-line ValueError naming it)."""
        d = method_defaults(self.method, self.defaults)
        cfg = dataclasses.replace(self, method=self.method.lower(),
                                  method_options={**d.constants, **(self.method_options or {})})
        for name in ("epochs", "batch_size", "optimizer", "lr", "weight_decay", "lr_step",
                     "lr_gamma", "lbhash_mode"):
            if getattr(cfg, name) is None:
                setattr(cfg, name, getattr(d, name))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        for name in ("bits", "epochs", "batch_size", "block_size", "surrogate_hidden", "devices"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "surrogate_lr"):
            if not _positive_number(getattr(self, name)):
                raise ValueError(f"{name} must be a positive number, got {getattr(self, name)!r}")
        if not isinstance(self.lr_step, int) or self.lr_step < 0:
            raise ValueError(f"lr_step must be a non-negative integer, got {self.lr_step!r}")
        if not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise ValueError(f"eval_every must be a non-negative integer, got {self.eval_every!r}")
        if self.optimizer not in ("adam", "sgd", "rmsprop"):
            raise ValueError(f"optimizer must be adam, sgd or rmsprop, got {self.optimizer!r}")
        if self.lbhash_mode not in ("add", "replace"):
            raise ValueError(f"lbhash_mode must be 'add' or 'replace', got {self.lbhash_mode!r}")
        if self.normalize not in ("zscore", "none"):
            raise ValueError(f"normalize must be 'zscore' or 'none', got {self.normalize!r}")
        if self.hidden is not None and (not isinstance(self.hidden, (list, tuple)) or any(
                not isinstance(h, int) or isinstance(h, bool) or h < 1 for h in self.hidden)):
            raise ValueError(f"hidden must be a list of positive integers, got {self.hidden!r}")
        for name in ("num_workers",):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.image_size is not None and (not isinstance(self.image_size, int) or self.image_size < 8):
            raise ValueError(f"image_size must be an integer >= 8, got {self.image_size!r}")
        if self.lbhash and self.bits % self.block_size:
            raise ValueError(f"bits={self.bits} is not divisible by the block size {self.block_size}")
        if self.topk is not None and self.topk != "all" and (
                not isinstance(self.topk, int) or isinstance(self.topk, bool) or self.topk < 1):
            raise ValueError(f"topk must be a positive integer or 'all', got {self.topk!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def variant(self) -> str:
        """The method's display name: e.g. CSQ or CSQ_D."""
        return self.method + ("_D" if self.lbhash else "")


FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config; keys may use '-' or '_'. Unknown keys are an error."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such config file")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a config file must be a mapping of option: value")
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise ValueError(f"{path}: unknown option {key!r}")
        out[name] = value
    return out


def build_config(file_values: dict[str, Any] | None = None,
                 flag_values: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, overridden by the config file, overridden by explicit flags."""
    values = {**(file_values or {}), **{k: v for k, v in (flag_values or {}).items() if v is not None}}
    unknown = set(values) - FIELDS
    if unknown:
        raise ValueError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return TrainConfig(**values)


def _positive_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
