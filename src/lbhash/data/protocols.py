"""Train / query / database splits (paper Sec. 6.1.1; docs/data.md), drawn with an explicit seed and saved with a run.

A protocol is named ("cifar10", "cifar10-1", "cifar10-2", "digits", "given", "lists",
"all-train") or parametrised ("per-class:T,Q", "per-class:T,Q,+train", "random:T,Q", "given:T").
Per-class protocols shuffle each class with the seed and take its first T items for training
and the next Q as queries; "given:T" trains on T seeded items of the data set's own train part
and keeps its test part as the queries and its whole train part as the database.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

import numpy as np

from lbhash import _io
from lbhash.checks import topk_from_file, topk_to_file
from lbhash.data import unseen
from lbhash.labels import as_multihot
from lbhash.errors import InputError

SPLIT_FORMAT = "lbhash-split/1"
# seen_query / seen_database: the unseen protocol's evaluation on the training classes
PARTS = ("train", "query", "database", "validation", "seen_query", "seen_database")


@dataclass(frozen=True)
class ProtocolSpec:
    """A parsed protocol: how many items per class (or in all) go where."""

    name: str
    kind: str                     # "per-class", "given", "lists", "all-train", "random" or "unseen"
    train: int = 0                # per class for "per-class", in all for "random"
    query: int = 0
    include_train: bool = False   # the database holds the training items too
    topk: int | None = None       # default R of mAP@R (None = the whole database)
    held_out: int = 0             # "unseen": classes held out of training
    base: str | None = None       # "unseen": the protocol drawn first (None: the data set's)


_NAMED = {
    # the paper's CIFAR-10 protocol (Sec. 6.1): 5,000 / 1,000 / 54,000, mAP@54,000 (= all)
    "cifar10": ProtocolSpec("cifar10", "per-class", 500, 100, False, 54000),
    # DeepHash-pytorch's CIFAR-10 variants: database includes train (59,000) / the file's own
    # split; that benchmark evaluates every CIFAR-10 variant on the whole database (topK = -1)
    "cifar10-1": ProtocolSpec("cifar10-1", "per-class", 500, 100, True, None),
    "cifar10-2": ProtocolSpec("cifar10-2", "given", topk=None),
    # the embedded default: digits has 174..183 items per class
    "digits": ProtocolSpec("digits", "per-class", 100, 30, True, None),
    "given": ProtocolSpec("given", "given"),
    # the data set's own train/query/database lists (DeepHash list files); R from its preset
    "lists": ProtocolSpec("lists", "lists"),
    # every item trains; no query or database (a model for production, evaluated elsewhere)
    "all-train": ProtocolSpec("all-train", "all-train"),
}
# Where each named protocol comes from, with its R (`lbhash train --help`, docs/data.md).
SOURCES = {
    "cifar10": "the paper's, mAP@54000 = the whole database",
    "cifar10-1": "DeepHash-pytorch's, mAP@all",
    "cifar10-2": "DeepHash-pytorch's, mAP@all",
    "digits": "ours, mAP@all",
    "given": "the file's own split, mAP@all",
    "lists": "the list files, R of their preset",
    "all-train": "no evaluation",
}
PROTOCOLS = tuple(_NAMED)
PARAMETRIC_PROTOCOLS = ("per-class:T,Q", "per-class:T,Q,+train", "random:T,Q", "given:T", "unseen:K[:BASE]")
_PARAMETRIC = re.compile(r"^(per-class|random):(\d+),(\d+)(,\+train)?$")
_GIVEN_SUBSET = re.compile(r"^given:(\d+)$")


@dataclass
class Split:
    """Indices (int64) into a data set for each part of a protocol.

    train and query are sorted ascending; the database is in a seeded random order, because
    rankings break distance ties by database position (see make_split).
    """

    train: np.ndarray
    query: np.ndarray
    database: np.ndarray
    protocol: str
    seed: int
    topk: int | None
    num_items: int | None = None  # size of the data set it was drawn from, when known
    validation: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # held out of train
    seen_query: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # unseen:K only
    seen_database: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unseen_classes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # held-out class ids

    def __post_init__(self) -> None:
        for part in (*PARTS, "unseen_classes"):
            setattr(self, part, np.asarray(getattr(self, part), dtype=np.int64))

    def sizes(self) -> dict[str, int]:
        """Items per part; the seen-class parts only for unseen:K."""
        parts = PARTS if len(self.unseen_classes) else PARTS[:4]
        return {part: len(getattr(self, part)) for part in parts}

    def check(self, num_items: int, name: str = "data set") -> None:
        """Raise if this split does not fit a data set of `num_items` items."""
        if self.num_items is not None and self.num_items != num_items:
            raise InputError(f"split {self.protocol!r} was drawn from {self.num_items} items but {name} has {num_items}")
        for part in PARTS:
            idx = getattr(self, part)
            if idx.size and (idx.min() < 0 or idx.max() >= num_items):
                raise InputError(f"split {self.protocol!r}: {part} index out of range for {name} of {num_items} items")


def parse_protocol(protocol: str) -> ProtocolSpec:
    """Parse a protocol name; one-line ValueError listing the accepted forms."""
    if not isinstance(protocol, str):
        raise InputError(f"protocol must be a string, got {protocol!r}")
    text = protocol.strip()
    if text in _NAMED:
        return _NAMED[text]
    if text.startswith(unseen.PREFIX):
        k, base = unseen.parse_unseen(text)
        return ProtocolSpec(text, "unseen", held_out=k, base=None if base is None else parse_protocol(base).name)
    m = _GIVEN_SUBSET.match(text)
    if m is not None:
        if int(m.group(1)) < 1:
            raise InputError(f"protocol {protocol!r}: the training count must be at least 1")
        return ProtocolSpec(text, "given", train=int(m.group(1)))
    m = _PARAMETRIC.match(text)
    if m is None:
        raise InputError(f"unknown protocol {protocol!r} (named: {', '.join(PROTOCOLS)}; "
                         f"or {', '.join(PARAMETRIC_PROTOCOLS)})")
    kind, train, query, plus = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    if kind == "random" and plus:
        raise InputError(f"protocol {protocol!r}: random: already puts the training items in the database; "
                         "drop ',+train'")
    if train < 1 or query < 1:
        raise InputError(f"protocol {protocol!r}: train and query counts must be at least 1")
    return ProtocolSpec(text, kind, train, query, include_train=bool(plus) or kind == "random")


def make_split(dataset, protocol: str, seed: int) -> Split:
    """The split of `protocol` over `dataset` (anything with `labels`, `is_test`, `name`) drawn by `seed`."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    spec = parse_protocol(protocol)
    name = getattr(dataset, "name", "data set")
    labels = as_multihot(dataset.labels, f"{name}: labels")
    n = len(labels)
    if n == 0:
        raise InputError(f"protocol {spec.name!r}: {name} is empty")
    topk = spec.topk
    if spec.kind == "unseen":
        return _unseen_split(dataset, spec, labels, seed, name)
    if spec.kind == "given":
        train, query, database = _given(dataset, spec, name, seed)
    elif spec.kind == "lists":
        train, query, database = _lists(dataset, spec, name)
        topk = getattr(dataset, "topk", None)
    elif spec.kind == "all-train":
        train, query, database = np.arange(n), np.zeros(0, np.int64), np.zeros(0, np.int64)
    elif spec.kind == "random":
        train, query, database = _random(n, spec, seed, name)
    else:
        train, query, database = _per_class(labels, spec, seed, name, getattr(dataset, "class_names", None))
    # Rankings break distance ties by database position. Files are often sorted by class
    # (CIFAR-10 is), and then ties systematically favour low class ids: on CIFAR-10 features
    # that cost CSQ 1.4 points of mAP@54000 against the tie-averaged value. A seeded random
    # database order keeps results deterministic without that bias.
    database = np.random.default_rng([seed, 1]).permutation(database)
    return Split(train, query, database, spec.name, seed, topk, n)


def _unseen_split(dataset, spec: ProtocolSpec, labels: np.ndarray, seed: int, name: str) -> Split:
    if spec.base is None:  # lbhash.train.resolve_config fills in the data set's own protocol
        if getattr(dataset, "is_test", None) is None:
            raise InputError(f"protocol {spec.name!r}: {name} has no split of its own; name the base "
                             f"protocol, e.g. {spec.name}:per-class:100,20")
        spec = replace(spec, name=f"{spec.name}:given", base="given")
    base = make_split(dataset, spec.base, seed)
    parts = unseen.unseen_parts(labels, base, spec, seed, name, getattr(dataset, "class_names", None))
    return Split(**parts, protocol=spec.name, seed=seed, topk=base.topk, num_items=len(labels))


def _given(dataset, spec: ProtocolSpec, name: str, seed: int):
    is_test = getattr(dataset, "is_test", None)
    if is_test is None:
        raise InputError(f"protocol {spec.name!r} needs the data set's own train/test split, but {name} has none; "
                         "use 'per-class:T,Q' or 'random:T,Q'")
    is_test = np.asarray(is_test, dtype=bool)
    train, query = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    for part, idx in (("train", train), ("test", query)):
        if idx.size == 0:
            raise InputError(f"protocol {spec.name!r}: the {part} part of {name}'s own split is empty")
    database = train.copy()
    if spec.train:  # given:T: T seeded items of the train part; the database stays the whole part
        if spec.train > len(train):
            raise InputError(f"protocol {spec.name!r} trains on {spec.train} items, but the train part of "
                             f"{name}'s own split has {len(train)}")
        train = np.sort(np.random.default_rng([seed, 2]).choice(train, spec.train, replace=False))
    return train, query, database


def _lists(dataset, spec: ProtocolSpec, name: str):
    parts = getattr(dataset, "parts", None)
    if parts is None:
        raise InputError(f"protocol {spec.name!r} needs the data set's own train/query/database lists, but {name} "
                         "has none (list files give them); use 'given', 'per-class:T,Q' or 'random:T,Q'")
    out = []
    for part in ("train", "query", "database"):
        idx = np.asarray(parts[part], dtype=np.int64)
        if idx.size == 0:  # ImageDataset checked the lists' indices; a subset may empty one
            raise InputError(f"protocol {spec.name!r}: the {part} list of {name} is empty")
        out.append(np.sort(idx))
    return tuple(out)


def _random(n: int, spec: ProtocolSpec, seed: int, name: str):
    # Queries first, then training items from the rest: train is a sample of the database.
    if spec.train + spec.query > n:
        raise InputError(f"protocol {spec.name!r} needs at least {spec.train + spec.query} items "
                         f"({spec.train} train + {spec.query} query), {name} has {n}")
    perm = np.random.default_rng(seed).permutation(n)
    query = np.sort(perm[:spec.query])
    database = np.sort(perm[spec.query:])
    train = np.sort(perm[spec.query:spec.query + spec.train])
    return train, query, database


def _per_class(labels: np.ndarray, spec: ProtocolSpec, seed: int, name: str, class_names):
    per_item = labels.sum(axis=1)
    hint = "use 'random:T,Q' or 'given'"  # per-class protocols need single-label data
    if (per_item > 1).any():
        raise InputError(f"protocol {spec.name!r} draws per class and needs single-label data, but "
                         f"{int((per_item > 1).sum())} items of {name} have several labels; {hint}")
    if (per_item == 0).any():
        raise InputError(f"protocol {spec.name!r} draws per class, but {int((per_item == 0).sum())} items of {name} "
                         f"have no label (first: row {int(np.flatnonzero(per_item == 0)[0])}); {hint}")
    ids = labels.argmax(axis=1)
    counts = np.bincount(ids, minlength=labels.shape[1])
    # Without train in the database, each class also needs one database item to be findable.
    need = spec.train + spec.query + (0 if spec.include_train else 1)
    short = np.flatnonzero(counts < need)
    if short.size:
        c = int(short[0])
        parts = f"{spec.train} train + {spec.query} query" + ("" if spec.include_train else " + 1 database")
        raise InputError(f"protocol {spec.name!r}: {unseen.class_label(c, class_names)} of {name} has "
                         f"{int(counts[c])} items, needs at least {need} ({parts})")
    # A random order, then grouped by class (stable): rank = position inside the class.
    perm = np.random.default_rng(seed).permutation(len(ids))
    order = perm[np.argsort(ids[perm], kind="stable")]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(len(ids)) - starts[ids[order]]
    is_train, is_query = rank < spec.train, (rank >= spec.train) & (rank < spec.train + spec.query)
    in_db = ~is_query if spec.include_train else ~(is_train | is_query)
    return np.sort(order[is_train]), np.sort(order[is_query]), np.sort(order[in_db])


def carve_validation(split: Split, labels, fraction: float, seed: int) -> Split:
    """Hold out `fraction` of the training items as a seeded validation split (docs/data.md): round(fraction
    * n) of each class (at least one of a class of two or more), of all for multi-label data."""
    if not 0 < fraction < 0.5:
        raise InputError(f"validation must be a fraction in (0, 0.5), got {fraction!r}")
    labels = as_multihot(labels, "labels")[split.train]
    rng = np.random.default_rng([seed, 11])
    if (labels.sum(1) == 1).all():
        ids = labels.argmax(1)
        picked = []
        for c in np.unique(ids):
            members = np.flatnonzero(ids == c)
            take = max(1, round(fraction * len(members))) if len(members) >= 2 else 0
            picked.append(rng.permutation(members)[:take])
        chosen = np.concatenate(picked)
    else:
        chosen = rng.permutation(len(labels))[:round(fraction * len(labels))]
    if not len(chosen) or len(chosen) == len(split.train):
        raise InputError(f"validation {fraction} of {len(split.train)} training items leaves no validation "
                         "or no training items")
    validation = np.sort(split.train[chosen])
    return replace(split, train=np.setdiff1d(split.train, validation), validation=validation)


def save_split(path: str | os.PathLike, split: Split) -> None:
    """Write a split to .npz atomically (no pickled objects; topk None -> "all", num_items None -> -1)."""
    _io.save_npz(path, format=np.array(SPLIT_FORMAT), **{part: getattr(split, part) for part in PARTS},
                 unseen_classes=split.unseen_classes, protocol=np.array(split.protocol),
                 seed=np.array(split.seed, dtype=np.int64), topk=np.array(topk_to_file(split.topk)),
                 num_items=np.array(-1 if split.num_items is None else split.num_items, dtype=np.int64))


def load_split(path: str | os.PathLike) -> Split:
    """Read a split written by save_split, checking every part."""
    arrays = _io.load_npz(path)
    missing = [k for k in ("train", "query", "database", "protocol", "seed", "topk") if k not in arrays]
    if missing:
        raise InputError(f"{path}: not a split file, missing {', '.join(missing)} (keys: {', '.join(arrays)})")
    fmt = arrays.get("format")
    if fmt is not None and str(fmt) != SPLIT_FORMAT:
        raise InputError(f"{path}: unsupported split format {str(fmt)!r} (expected {SPLIT_FORMAT!r})")
    parts = {}
    for part in PARTS:
        idx = arrays.get(part, np.zeros(0, np.int64))  # files before validation splits have none
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise InputError(f"{path}: {part} must be a 1-D integer array, got shape {idx.shape} dtype {idx.dtype}")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or len(np.unique(idx)) != len(idx)):
            raise InputError(f"{path}: {part} indices must be non-negative and unique")
        parts[part] = idx
    protocol = arrays["protocol"]
    if protocol.ndim != 0 or protocol.dtype.kind != "U":
        raise InputError(f"{path}: protocol must be a string")
    scalars = {}
    topk = topk_from_file(arrays["topk"], str(path))
    for key in ("seed", "num_items"):
        value = arrays.get(key, np.array(-1))
        if value.ndim != 0 or value.dtype.kind not in "iu":
            raise InputError(f"{path}: {key} must be an integer scalar, got shape {value.shape} dtype {value.dtype}")
        scalars[key] = int(value)
    if scalars["seed"] < 0:
        raise InputError(f"{path}: seed must be non-negative, got {scalars['seed']}")
    unseen_classes = arrays.get("unseen_classes", np.zeros(0, np.int64))
    if unseen_classes.ndim != 1 or (unseen_classes.size and unseen_classes.dtype.kind not in "iu"):
        raise InputError(f"{path}: unseen_classes must be a 1-D integer array")
    split = Split(**parts, unseen_classes=unseen_classes, protocol=str(protocol), seed=scalars["seed"], topk=topk,
                  num_items=None if scalars["num_items"] < 0 else scalars["num_items"])
    if split.num_items is not None:
        split.check(split.num_items, str(path))
    return split
