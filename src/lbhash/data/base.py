"""The data set contract that feature and image data sets both implement.

Training, encoding and protocols see only this interface: labels (boolean multi-hot), the data
set's own train/test flags and part lists, class names, subsets, the model input it gives
(`input_kind`), a check of the items a run uses, and the batches for training and encoding.
Whether items are feature vectors or images is decided here, by the data set, once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, NamedTuple

import numpy as np

from lbhash.errors import InputError
from lbhash.labels import as_multihot

INPUT_KINDS = ("features", "images")


class InputOptions(NamedTuple):
    """How image items become model inputs (feature data sets ignore it)."""

    image_size: int | None = None   # side after the transforms
    transform: str | None = None    # transform preset (lbhash.data.transforms)
    num_workers: int = 0            # DataLoader worker processes
    channels_last: bool = False     # image batches in channels-last memory format
    augment: str = "crop-flip"      # training augmentation: crop-flip, flip or none (lbhash.data.augment)


@dataclass(frozen=True)
class EpochShard:
    """One rank's share of every epoch: `rank` of `world_size` ranks takes its part of the seeded order
    (shard_order), in batches of `batch_size` items."""

    batch_size: int
    rank: int = 0
    world_size: int = 1


# here, beside InputOptions, because the data layer runs forward loops too (lbhash.data.feature_cache),
# and it may not import lbhash.train, whose forward loop (lbhash.train.forward) uses it most
@dataclass(frozen=True)
class ForwardPass:
    """How a forward loop runs: on `device`, each batch under `autocast()`, with a progress bar or
    not, in batches of `batch_size` items (None: the data set's own)."""

    device: Any = "cpu"
    autocast: Callable[[], Any] = contextlib.nullcontext
    progress: bool = False
    batch_size: int | None = None


class HashDataset:
    """Items with multi-hot labels, as training and encoding use them. Subclasses set `labels` ((n, C) bool),
    `is_test` ((n,) bool or None: the data set's own split), `name`, `class_names`, and optionally `parts`
    (train/query/database index lists) and `topk` (a default R), and implement the methods below."""

    input_kind: ClassVar[str] = ""   # "features" or "images"
    labels: np.ndarray
    is_test: np.ndarray | None
    name: str
    class_names: list[str] | None
    parts: dict[str, np.ndarray] | None = None
    topk: int | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return int(self.labels.shape[1])

    @property
    def multi_label(self) -> bool:
        """True if any item has a number of labels other than one (none counts too)."""
        return bool((self.labels.sum(axis=1) != 1).any())

    def check_labels(self, n: int | None) -> None:
        """Labels made bool (n, C) multi-hot (n: the items, None: as many as the labels), `is_test` and
        `class_names` checked against them: each data set's __post_init__ calls it."""
        self.labels = as_multihot(self.labels, f"{self.name}: labels")
        n = len(self.labels) if n is None else n
        if len(self.labels) != n:
            raise InputError(f"{self.name}: {len(self.labels)} label rows for {n} items")
        if self.is_test is not None:
            self.is_test = split_flags(self.is_test, n, self.name, "is_test")
        if self.class_names is not None:
            self.class_names = [str(c) for c in self.class_names]
            if len(self.class_names) != self.num_classes:
                raise InputError(f"{self.name}: {len(self.class_names)} class names for {self.num_classes} "
                                 "label columns")

    def subset(self, indices) -> "HashDataset":
        """The items at `indices`, class axis and names kept."""
        raise NotImplementedError

    def item_sources(self, indices) -> np.ndarray | None:
        """Where each item came from (its file, archive member or array row) as strings, or None
        when the item's position in the data set says it all (feature rows)."""
        return None

    def check_items(self, indices, skip_bad: bool = False) -> tuple[np.ndarray, int]:
        """Check that the items at `indices` can be used; (usable indices, count left out)."""
        raise NotImplementedError

    def normalization(self, indices) -> tuple[np.ndarray, np.ndarray] | None:
        """Per-input mean and std over `indices` for a standardising first layer, or None when
        inputs are normalised otherwise (images: by their transform)."""
        return None

    def native_side(self) -> int | None:
        """The side of square images (the default input size rule uses it), None otherwise."""
        return None

    def input_dim(self) -> int | None:
        """Width of a feature vector, None for images."""
        return None

    def train_batches(self, indices, shard: EpochShard, device="cpu", options: InputOptions = InputOptions()):
        """Shuffled training batches (x, labels, position in `indices`), this rank's `shard` of each
        epoch, see lbhash.data.batches."""
        raise NotImplementedError

    def encode_batches(self, indices, options: InputOptions = InputOptions(), device="cpu",
                       progress: bool = False, batch_size: int | None = None) -> Iterator:
        """Model inputs of the items at `indices`, in order, in batches."""
        raise NotImplementedError


def check_indices(dataset: HashDataset, indices) -> np.ndarray:
    """`indices` as int64 positions into `dataset` (None: all items)."""
    if indices is None:
        return np.arange(len(dataset), dtype=np.int64)
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise InputError(f"{dataset.name}: indices must be a 1-D integer array, "
                         f"got shape {idx.shape} dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= len(dataset)):
        raise InputError(f"{dataset.name}: index out of range for {len(dataset)} items")
    return idx


def split_flags(arr, n: int, where, key: str) -> np.ndarray:
    """A train/test flag vector (True = test) of n booleans or 0/1 values."""
    arr = np.asarray(arr)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.ravel()  # MATLAB row or column vector
    if arr.shape != (n,):
        raise InputError(f"{where}: split {key!r} must have shape ({n},), got {arr.shape}")
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind not in "iuf" or not ((arr == 0) | (arr == 1)).all():
        raise InputError(f"{where}: split {key!r} must hold booleans or 0/1 (True = test item)")
    return arr.astype(bool)
