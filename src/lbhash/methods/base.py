"""The method interface, its shared work, and the registry (docs/methods.md).

A method is a loss module with one signature, `loss(u, labels, index) -> LossOutput` (u the hash
layer's raw output (B, bits), labels multi-hot (B, C), index the samples' positions in the
training set, for memory banks). `HashLoss.forward` does the shared checks and calls the method's
`compute_loss`, which holds only its formula. Everything else a method brings (constants,
recipes, recommended _D options, `lbhash_mode`) lives on its class, beside the formula.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from lbhash.errors import InputError


class LossOutput(NamedTuple):
    total: torch.Tensor
    parts: dict[str, torch.Tensor]


def loss_output(parts: dict[str, torch.Tensor]) -> LossOutput:
    return LossOutput(sum(parts.values()), parts)


# The paper's recipe for every method, "Adam with default configuration", lr 1e-3, batch 64, 100
# epochs, lr x0.1 every 10 epochs (its App. G), no held-out share, an evaluation every 10 epochs;
# a method's recipes are partial: what they change in it (lbhash.methods.options.method_defaults).
PAPER_RECIPE = {"epochs": 100, "batch_size": 64, "optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0, "lr_step": 10,
                "lr_gamma": 0.1, "schedule": "step", "warmup_epochs": 0, "validation": 0.0, "eval_every": 10}
# The recommended profile's recipe: the paper's with a constant learning rate, keeping the epoch of best validation mAP
# (10% of each class held out, evaluated every 5 epochs). The paper's x0.1 every 10 epochs leaves 1e-5 at epoch 20
# whatever the budget; a constant rate uses every epoch of 10, 30 or 100, and beat it on validation, but its last epoch
# can be far from its best (docs/methods.md, "Defaults that train"; docs/results/methods.md, "Which epoch a run keeps").
RECOMMENDED_RECIPE = {"lr_step": 0, "validation": 0.1, "eval_every": 5}
# The DeepHash-pytorch benchmark's RMSprop recipe, shared by most of its methods.
BENCHMARK_RMSPROP = {"optimizer": "rmsprop", "lr": 1e-5, "weight_decay": 1e-5, "lr_step": 0, "epochs": 150,
                     "batch_size": 128}
# The _D objective as the paper's text reads (lbhash.methods.lower_bound has the options).
PAPER_LBHASH = {"lbhash_weight": 1.0, "lbhash_reduction": "sum", "surrogate_flips": 0,
                "block_assignment": "contiguous", "multilabel_target": "average",
                "multilabel_theta": "sum", "surrogate_weight_decay": 0.0}
# Constructor parameters every method takes; the others are the method's constants.
COMMON_PARAMETERS = ("self", "bits", "num_classes", "num_train", "centers", "multi_label", "tie_center")


class HashLoss(nn.Module):
    """Base class of the hashing methods; subclasses implement `compute_loss`. Class attributes say what a
    method needs, so that training and the _D wrapper check inputs at the edge, not deep inside a loss."""

    name: ClassVar[str] = ""
    display_name: ClassVar[str] = ""           # as papers print it, e.g. "HashNet"
    description: ClassVar[str] = ""
    center_part: ClassVar[str | None] = None   # the part that _D's "replace" mode drops
    needs_index: ClassVar[bool] = False        # keeps per-sample state (a memory bank)
    single_label_only: ClassVar[bool] = False
    uses_centers: ClassVar[bool] = False       # needs class centers (lbhash.centers)
    majority_targets: ClassVar[bool] = False   # a multi-label item's target: its centers' bitwise majority
    needs_labels: ClassVar[bool] = True        # False: unsupervised, trains on unlabelled items
    needs_features: ClassVar[bool] = False     # its loss reads the head's inputs: compute_loss(..., features=)
    closed_form: ClassVar[bool] = False        # fitted in one pass (`fit_projection`), no gradient steps
    lbhash_mode: ClassVar[str] = "add"         # how the _D objective combines with the loss
    recipe: ClassVar[dict] = {}                     # partial recipes: what they change in PAPER_RECIPE
    benchmark_recipe: ClassVar[dict] = BENCHMARK_RMSPROP
    recommended_recipe: ClassVar[dict] = RECOMMENDED_RECIPE
    recommended_lbhash: ClassVar[dict] = {}         # overrides of PAPER_LBHASH
    recommended_constants: ClassVar[dict] = {}      # the recommended profile's constants where they differ
    defaults_source: ClassVar[str] = ""             # where a method's own defaults come from (`lbhash methods`)
    # (probe epochs, tuning epochs) of the fine-tuning recipe where the shared ones (lbhash.train.resolve's
    # FINETUNE_*) leave this method's head short: a slow rate needs a longer probe (docs/models.md)
    finetune_epochs: ClassVar[tuple[int, int] | None] = None

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None,
                 centers: torch.Tensor | None = None, multi_label: bool = False):
        super().__init__()
        self.bits, self.num_classes, self.num_train = bits, num_classes, num_train
        self.multi_label = multi_label
        if self.needs_index and not num_train:
            raise InputError(f"method {self.name} keeps a memory bank of every training item and "
                             "needs the training-set size (num_train)")

    def forward(self, u: torch.Tensor, labels: torch.Tensor, index: torch.Tensor | None,
                features: torch.Tensor | None = None) -> LossOutput:
        """`features`: the batch's hash-head inputs (B, d), for methods that `needs_features`."""
        self._check_shapes(u, labels)
        if self.needs_index:
            index = self._check_index(index, len(u))
        extra = {"features": self._check_features(features, len(u))} if self.needs_features else {}
        # Losses run in full precision even under mixed-precision training.
        with torch.autocast(u.device.type, enabled=False):
            u = u if u.dtype == torch.float64 else u.float()
            return loss_output(self.compute_loss(u, labels, index, **extra))

    def compute_loss(self, u: torch.Tensor, labels: torch.Tensor,
                     index: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The method's formula: named, weighted loss parts of u (float32 or float64), and of `features` if needed."""
        raise NotImplementedError

    def _check_shapes(self, u: torch.Tensor, labels: torch.Tensor) -> None:
        if u.dim() != 2 or u.shape[1] != self.bits:
            raise InputError(f"method {self.name}: u must have shape (batch, {self.bits}), got {tuple(u.shape)}")
        if tuple(labels.shape) != (len(u), self.num_classes):
            raise InputError(f"method {self.name}: labels must have shape ({len(u)}, {self.num_classes}), "
                             f"got {tuple(labels.shape)}")

    def _check_index(self, index: torch.Tensor | None, batch: int) -> torch.Tensor:
        """The batch's stable training-set positions, required by memory-bank methods."""
        if index is None:
            raise InputError(f"method {self.name} keeps a memory bank of every training item and needs "
                             "each sample's stable index in the training set; this data gives none")
        if index.shape != (batch,):
            raise InputError(f"method {self.name}: index must have shape ({batch},), got {tuple(index.shape)}")
        # negative indices would silently wrap around; one sync per step is cheap next to the loss
        if batch and bool(((index < 0) | (index >= self.num_train)).any()):
            raise InputError(f"method {self.name}: index values must lie in [0, {self.num_train}), got "
                             f"min {int(index.min())}, max {int(index.max())}")
        return index

    def _check_features(self, features: torch.Tensor | None, batch: int) -> torch.Tensor:
        if features is None:
            raise InputError(f"method {self.name} learns from the hash head's input features; none were given")
        if features.dim() != 2 or len(features) != batch:
            raise InputError(f"method {self.name}: features must have shape ({batch}, d), got {tuple(features.shape)}")
        return features

    def on_epoch_start(self, epoch: int) -> None:
        """Called before each epoch (0-based), e.g. for continuation schedules."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called after each epoch's last step (0-based), e.g. for per-epoch discrete updates."""

    def classify(self, codes: torch.Tensor) -> torch.Tensor | None:
        """Class scores from +/-1 codes for methods with a classifier branch, else None."""
        return None

    def fit_projection(self, x, labels, seed: int):
        """Closed-form methods only: the linear map of the (normalised) training features x
        (n, d) float32 and multi-hot labels (n, C) -> a lbhash.methods.closed_form.ClosedFormFit."""
        raise NotImplementedError(f"method {self.name} is trained by gradient steps, not in closed form")

    @classmethod
    def constants(cls) -> dict[str, Any]:
        """The method's constants and their defaults: its constructor's own keyword arguments."""
        params = inspect.signature(cls.__init__).parameters
        return {k: p.default for k, p in params.items()
                if k not in COMMON_PARAMETERS and p.default is not inspect.Parameter.empty}


_REGISTRY: dict[str, type[HashLoss]] = {}


def register_method(cls: type[HashLoss]) -> type[HashLoss]:
    """Class decorator: make a method available by its `name`."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"method name {cls.name!r} is empty or already registered")
    _REGISTRY[cls.name] = cls
    return cls


def method_class(name: str) -> type[HashLoss]:
    key = name.lower() if isinstance(name, str) else name
    if key not in _REGISTRY:
        raise InputError(f"unknown method {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key]


def available_methods() -> list[str]:
    return sorted(_REGISTRY)


def create_method(name: str, bits: int, num_classes: int, num_train: int | None = None,
                  centers: torch.Tensor | None = None, multi_label: bool = False,
                  tie_center: torch.Tensor | None = None, **constants) -> HashLoss:
    """Build a registered method; `constants` override its defaults (e.g. CSQ's quantization).

    Parameters
    ----------
    name : str
        A registered method (`lbhash.methods.available_methods()`), e.g. "csq", "dch".
    bits, num_classes : int
        Code length and number of classes.
    num_train : int, optional
        Training items; methods with a memory bank (`needs_index`) need it.
    centers : torch.Tensor, optional
        (num_classes, bits) +/-1 class centers, for methods that use them (CSQ).
    multi_label : bool
        Whether an item may hold several labels.
    tie_center : torch.Tensor, optional
        For a method with majority targets (CSQ): the center whose bits break their ties
        (`lbhash.methods.csq.tie_center`); None: +1.
    **constants
        The method's constants, overriding its published defaults.

    Returns
    -------
    HashLoss
        A module called as `loss(u, labels, index) -> LossOutput(total, parts)`.

    Examples
    --------
    >>> import torch
    >>> from lbhash.methods import create_method
    >>> loss = create_method("dch", bits=16, num_classes=3)
    >>> u = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    >>> labels = torch.eye(3)[[0, 0, 1, 2]]
    >>> out = loss(u, labels, None)
    >>> sorted(out.parts), bool(torch.isfinite(out.total))
    (['pairwise', 'quantization'], True)
    """
    cls = method_class(name)
    unknown = sorted(set(constants) - set(cls.constants()))
    if unknown:
        raise InputError(f"method {cls.name}: unexpected keyword argument {unknown[0]!r} "
                         f"(its constants: {', '.join(cls.constants()) or 'none'})")
    ties = {"tie_center": tie_center} if cls.majority_targets else {}
    return cls(bits=bits, num_classes=num_classes, num_train=num_train, centers=centers,
               multi_label=multi_label, **ties, **constants)
