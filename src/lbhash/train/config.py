"""The training configuration: one typed model shared by the CLI, config files and Python (docs/training.md).

`TrainConfig` holds one field per option set, each declared beside the part that reads it. A flat
key (`TrainConfig(method="csq")`, `lr: 0.01`, `--set lr=0.01`) goes to the one set that owns it
and is read through it (`cfg.recipe.lr`; `cfg.value("lr")` by the flat key); a set may also be given whole. Every value is validated where it enters, in
one line naming the option. `None` means "the method's or the data's default", filled in by
`lbhash.train.resolve.resolve_config` into a `RunConfig`: the complete config a run saves.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from lbhash.centers import CenterOptions
from lbhash.data import DataOptions
from lbhash.errors import InputError
from lbhash.methods import method_class, method_defaults
from lbhash.methods.lower_bound import ObjectiveOptions
from lbhash.methods.neighbourhood import NeighbourhoodOptions
from lbhash.methods.options import MethodOptions, RecipeOptions
from lbhash.models import ModelOptions
from lbhash.options import Options, option
from lbhash.surrogate import SurrogateOptions

PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")


class RuntimeOptions(Options):
    """Where and how the training runs: accelerator, processes, precision, progress and logging."""

    logger: Literal["none", "tensorboard"] = option(
        "none", "Also log the per-epoch records to TensorBoard (needs the tensorboard extra).",
        "one of none, tensorboard")
    accelerator: Literal["cpu", "gpu", "cuda", "auto"] = option("cpu", "cpu or gpu.", "one of cpu, gpu, cuda, auto")
    devices: int = option(1, "Processes (devices) to train on.", "a positive integer", ge=1)
    precision: Literal[PRECISIONS] = option("32-true", "Lightning precision, e.g. 32-true, bf16-mixed.",
                                            f"one of {', '.join(PRECISIONS)}")
    progress: bool = option(True, "Show a progress bar.", "true or false")


class TrainConfig(Options):
    """Everything a user chooses for a run, one option set per part (in the order config.yaml
    lists their options). None means "the method's (or the data set's) default"."""

    dataset: DataOptions = Field(default_factory=DataOptions)
    hashing: MethodOptions = Field(default_factory=MethodOptions)
    recipe: RecipeOptions = Field(default_factory=RecipeOptions)
    class_centers: CenterOptions = Field(default_factory=CenterOptions)
    neighbourhood: NeighbourhoodOptions = Field(default_factory=NeighbourhoodOptions)
    objective: ObjectiveOptions = Field(default_factory=ObjectiveOptions)
    surrogate: SurrogateOptions = Field(default_factory=SurrogateOptions)
    model: ModelOptions = Field(default_factory=ModelOptions)
    runtime: RuntimeOptions = Field(default_factory=RuntimeOptions)

    @model_validator(mode="before")
    @classmethod
    def _route(cls, values: Any) -> Any:
        """Flat keys to their sets (a set given whole, as a mapping or an Options, first), each
        set built and checked in the order of SETS; then unknown keys, naming the known ones."""
        if not isinstance(values, dict):
            return values
        nested: dict[str, dict] = {key: {} for key in SETS}
        out, unknown = {}, []
        for key, value in values.items():
            if key in SETS:
                if not isinstance(value, (dict, Options)):
                    raise InputError(f"{key} must be a mapping of its options, got {value!r}")
                nested[key] = {**(value.model_dump() if isinstance(value, Options) else value), **nested[key]}
            elif key in OWNERS:
                nested[OWNERS[key]][key] = value
            elif key in cls.model_fields:
                out[key] = value  # a RunConfig's input_kind and input_dim
            else:
                unknown.append(key)
        for key, set_class in SETS.items():
            out[key] = set_class(**nested[key])
        if unknown:
            known = [*FIELDS, *(k for k in cls.model_fields if k not in SETS)]
            raise InputError(f"unknown option {unknown[0]!r} (known: {', '.join(known)})")
        return out

    def value(self, name: str) -> Any:
        """An option by its flat key (config.yaml's, `--set`'s): `cfg.value("lr")` is `cfg.recipe.lr`.
        In code, read an option through its set (`cfg.recipe.lr`): a config answers no flat attribute."""
        if name not in OWNERS:
            raise KeyError(f"unknown option {name!r}")
        return getattr(getattr(self, OWNERS[name]), name)

    @model_validator(mode="after")
    def _consistent(self):
        hashing, recipe = self.hashing, self.recipe
        if hashing.lbhash and hashing.bits % self.surrogate.block_size:
            raise InputError(f"bits={hashing.bits} is not divisible by the block size {self.surrogate.block_size}")
        if (recipe.select == "best-val" or recipe.patience) and recipe.validation == 0:
            raise InputError("select best-val and patience need a validation split (validation > 0: a held-out share)")
        if method_class(hashing.method).closed_form:
            _check_closed_form(self)
        return self

    @property
    def variant(self) -> str:
        """The method's display name: e.g. csq or csq_D."""
        return self.hashing.method + ("_D" if self.hashing.lbhash else "")

    def to_dict(self) -> dict[str, Any]:
        """Every option flat, in the order of SETS (what config.yaml holds), then a RunConfig's own."""
        return {k: v for key, value in self.model_dump().items()
                for k, v in (value.items() if key in SETS else [(key, value)])}

    def replace(self, **values) -> "TrainConfig":
        """A validated copy with `values` (flat keys) changed (of the same class)."""
        return make_config({**self.to_dict(), **values}, kind=type(self))


SETS: dict[str, type[Options]] = {name: f.annotation for name, f in TrainConfig.model_fields.items()}
# each flat key's set: a key in two sets (or named like a set) could not be routed
OWNERS = {name: key for key, cls in SETS.items() for name in cls.model_fields}
assert len(OWNERS) == sum(len(cls.model_fields) for cls in SETS.values()) and not set(OWNERS) & set(SETS), \
    "an option is declared by two option sets, or named like a set"
FIELDS = tuple(OWNERS)  # every option's flat key


class RunConfig(TrainConfig):
    """A resolved config (lbhash.train.resolve.resolve_config): every default filled in, and what
    the data set decided, which a loaded run rebuilds its model from."""

    input_kind: Literal["features", "images"] = option(
        ..., "What the data gives the model (set from the data).", "features or images", cli=False)
    input_dim: int | None = option(None, "Width of the feature vectors (set from the data).",
                                   "a positive integer", cli=False, ge=1)


def _check_closed_form(cfg: TrainConfig) -> None:
    """A closed-form baseline fits one linear map in one pass on one process: the options of
    gradient training that would change what it is are refused, not ignored."""
    name = cfg.hashing.method
    if cfg.hashing.lbhash:
        kind = "an unsupervised baseline" if not method_class(name).needs_labels else "a baseline"
        raise InputError(f"method {name} is {kind} fitted in closed form: it has no gradient loss for "
                         "the _D objective (--lbhash) to join")
    if cfg.neighbourhood.neighbourhood_weight:
        raise InputError(f"method {name} is fitted in closed form: it has no gradient loss for the "
                         "neighbourhood term (neighbourhood_weight) to join")
    if cfg.recipe.epochs not in (None, 1):
        raise InputError(f"method {name} is fitted in closed form in one pass: epochs must be 1, got {cfg.recipe.epochs}")
    if cfg.model.hidden:
        raise InputError(f"method {name} fits a linear map: hidden must be empty, got {cfg.model.hidden}")
    if cfg.runtime.devices != 1:
        raise InputError(f"method {name} is fitted in closed form on one process: devices must be 1, "
                         f"got {cfg.runtime.devices}")


def profile_line(cfg: TrainConfig) -> str:
    """The run's profile and what its recipe (and, for a _D run, its objective) sets otherwise than
    the paper profile does for its method, e.g. `profile recommended: differs from the paper in
    lr_step 0 (paper 10)`."""
    paper, differences = method_defaults(cfg.hashing.method, "paper").options, []
    for name in (n for n in paper if cfg.hashing.lbhash or OWNERS[n] == "recipe"):
        want, have = paper[name], cfg.value(name)
        if have is not None and have != want:
            differences.append(f"{name} {have:g} (paper {want:g})" if isinstance(have, float) and isinstance(want, float)
                               else f"{name} {have} (paper {want})")
    if not differences:
        return f"profile {cfg.hashing.defaults}: the paper's recipe" + (" and _D objective" if cfg.hashing.lbhash else "")
    return f"profile {cfg.hashing.defaults}: differs from the paper in {', '.join(differences)}"


def backbone_line(cfg: "RunConfig") -> str | None:
    """How a resolved image run uses its backbone, e.g. `backbone efficientnet_lite0 (imagenet
    weights), bf16: fine-tuned, 10 probe epochs on cached features, then every stage at 0.1x
    the head's rate, BatchNorm statistics kept`; None for feature runs."""
    if cfg.input_kind != "images":
        return None
    weights = f" ({cfg.model.pretrained} weights)" if cfg.model.pretrained else " (random initialisation)"
    head = f"backbone {cfg.model.backbone}{weights}, {cfg.model.backbone_precision}"
    if cfg.model.freeze_backbone:
        return f"{head}: frozen, its features computed once"
    stages = f"its last {cfg.model.train_stages} stage(s)" if cfg.model.train_stages else "every stage"
    if cfg.model.train_stages and (cfg.dataset.transform == "cifar" or cfg.dataset.augment != "crop-flip"):
        stages += " (the frozen stages' activations computed once)"
    probe = f"{cfg.recipe.probe_epochs} probe epochs on cached features, then " if cfg.recipe.probe_epochs else ""
    rate = f" at {cfg.recipe.backbone_lr_scale:g}x the head's rate" if cfg.recipe.backbone_lr_scale != 1 else ""
    statistics = ", BatchNorm statistics kept" if cfg.model.freeze_bn else ""
    return f"{head}: {'fine-tuned' if cfg.model.pretrained else 'trained'}, {probe}{stages}{rate}{statistics}"


def make_config(values: dict[str, Any], where: str = "", kind: type[TrainConfig] = TrainConfig) -> TrainConfig:
    """kind(**values) (a TrainConfig or a RunConfig), every error one InputError line naming `where`."""
    try:
        return kind(**values)
    except InputError as err:
        raise InputError(f"{where}: {err}" if where else str(err)) from None
