"""Data-spec strings: `KIND`, `KIND:PATH` or `KIND:PATH?key=value&key=value`.

Each kind is an entry of DATA_KINDS (kind name -> DataKind), so new sources plug in with
`register_data_kind` without touching the parser. Image kinds: `cifar10:PATH`, `images:PATH`,
`list:DIR?root=PATH&preset=NAME` (all take `cache=auto|on|disk|off`; the first two also
`per-class=N|F`, a part of each class) and `image-array:PATH`.
Option values are taken literally (no %-decoding); a path may not contain '?'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from lbhash.data.base import HashDataset
from lbhash.data.features import DEQUANTIZE_MODES, load_digits, load_features
from lbhash.data.image_arrays import load_image_arrays
from lbhash.data.image_loaders import LIST_PRESETS, load_cifar10, load_image_folder, load_image_lists
from lbhash.data.images import CACHE_MODES, ImageDataset
from lbhash.data.per_class import PerClass, parse_per_class
from lbhash.errors import InputError


@dataclass(frozen=True)
class DataSpec:
    """A parsed data spec."""

    text: str                      # the spec as given, for messages
    kind: str
    path: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    labels_required: bool = True   # False: array files without labels, folders without class folders: unlabelled items


@dataclass(frozen=True)
class DataKind:
    """One kind of data source: how to load it and which options it takes."""

    name: str
    loader: Callable[[DataSpec], HashDataset]
    takes_path: bool
    options: tuple[str, ...] = ()
    summary: str = ""
    item_sources: bool = False     # its items name their file or member (HashDataset.item_sources)


DATA_KINDS: dict[str, DataKind] = {}


def register_data_kind(kind: DataKind) -> None:
    """Add a data-spec kind; a name may be registered once."""
    if kind.name in DATA_KINDS:
        raise InputError(f"data kind {kind.name!r} is already registered")
    if not kind.name or not kind.name.replace("-", "").replace("_", "").isalnum():
        raise InputError(f"data kind name must be letters, digits, '-' or '_', got {kind.name!r}")
    DATA_KINDS[kind.name] = kind


def parse_data_spec(spec: str) -> DataSpec:
    """Split a spec into kind, path and options, checking them against the kind's entry."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"data spec must be a non-empty string, got {spec!r}")
    text = spec.strip()
    kind_name, colon, rest = text.partition(":")
    kind = DATA_KINDS.get(kind_name)
    if kind is None:
        raise InputError(f"data spec {text!r}: unknown kind {kind_name!r} (known: {', '.join(DATA_KINDS)}; "
                         "a feature file is written features:PATH)")
    path, qmark, query = rest.partition("?")
    if not kind.takes_path:
        if colon:
            raise InputError(f"data spec {text!r}: {kind.name!r} takes no path or options, write just {kind.name!r}")
        return DataSpec(text, kind.name)
    if not path:
        raise InputError(f"data spec {text!r}: {kind.name!r} needs a path, e.g. {kind.name}:PATH")
    options: dict[str, str] = {}
    if qmark:
        for item in query.split("&"):
            key, eq, value = item.partition("=")
            if not eq or not key or not value:
                raise InputError(f"data spec {text!r}: malformed option {item!r} (expected key=value)")
            if key not in kind.options:
                raise InputError(f"data spec {text!r}: unknown option {key!r} for {kind.name!r} "
                                 f"(options: {', '.join(kind.options) or 'none'})")
            if key in options:
                raise InputError(f"data spec {text!r}: option {key!r} given twice")
            options[key] = value
    return DataSpec(text, kind.name, path, options)


PATH_OPTIONS = ("root", "labels")  # options whose values are paths (list files' root, a labels file)


def absolute_spec(spec: str) -> str:
    """The data spec with its paths (its own and PATH_OPTIONS') resolved: the same files from any directory."""
    parsed = parse_data_spec(spec)
    if parsed.path is None:
        return parsed.text
    options = {k: (str(Path(v).expanduser().resolve()) if k in PATH_OPTIONS else v)
               for k, v in parsed.options.items()}
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{parsed.kind}:{Path(parsed.path).expanduser().resolve()}" + (f"?{query}" if query else "")


def missing_paths(spec: str) -> list[str]:
    """The paths a data spec names (its own, and PATH_OPTIONS') that do not exist."""
    parsed = parse_data_spec(spec)
    named = ([parsed.path] if parsed.path is not None else []) + [v for k, v in parsed.options.items()
                                                                 if k in PATH_OPTIONS]
    return [p for p in named if not Path(p).expanduser().exists()]


def load_data(spec: str, labels_required: bool = True) -> HashDataset:
    """Parse a data spec and load the data set it names. labels_required=False: array files
    without labels load as items without labels (for encoding and search)."""
    parsed = replace(parse_data_spec(spec), labels_required=labels_required)
    return DATA_KINDS[parsed.kind].loader(parsed)


IMAGE_ARRAY_SUFFIXES = (".npz", ".npy", ".mat")  # an image input read as image-array:PATH


def load_image_inputs(paths, option: str = "--images") -> list[HashDataset]:
    """The data sets of image inputs as `lbhash search --images` and `lbhash encode --images` take
    them, in order: an image array (.npz/.npy/.mat, or an image-array:PATH spec) is one; a folder is one
    (every image under it, by path; labelled by its class folders where it is a class-folder tree,
    unlabelled otherwise); consecutive image files are one, unlabelled. Nothing is decoded here."""
    from lbhash.data.image_sources import FileSource

    datasets: list[HashDataset] = []
    files: list[str] = []

    def flush() -> None:
        if files:
            datasets.append(ImageDataset(np.zeros((len(files), 0), bool), None, "images", [],
                                         source=FileSource("", list(files))))
            files.clear()

    for given in map(str, paths):
        path = Path(given).expanduser()
        if given.startswith("image-array:") or path.suffix.lower() in IMAGE_ARRAY_SUFFIXES:
            flush()
            datasets.append(load_data(given if given.startswith("image-array:") else f"image-array:{given}",
                                      labels_required=False))
        elif path.is_dir():
            flush()
            datasets.append(load_image_folder(path, labels_required=False))
        elif path.is_file():
            files.append(str(path.resolve()))
        else:
            raise InputError(f"{option} {given}: no such file or directory")
    flush()
    if not datasets:
        raise InputError(f"{option}: give at least one image file, folder or image array")
    return datasets


def _number(spec: DataSpec, key: str) -> float | None:
    value = spec.options.get(key)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise InputError(f"data spec {spec.text!r}: option {key} must be a number, got {value!r}") from None


def _load_features_spec(spec: DataSpec) -> HashDataset:
    opts = spec.options
    return load_features(spec.path, x_key=opts.get("x"), y_key=opts.get("y"), split_key=opts.get("split"),
                         labels_path=opts.get("labels"), scale=_number(spec, "scale"),
                         zero_point=_number(spec, "zero_point"),
                         dequantize=_choice(spec, "dequantize", DEQUANTIZE_MODES, "auto"),
                         labels_required=spec.labels_required)


def _load_image_arrays_spec(spec: DataSpec) -> HashDataset:
    opts = spec.options
    return load_image_arrays(spec.path, x_key=opts.get("x"), y_key=opts.get("y"), split_key=opts.get("split"),
                             labels_path=opts.get("labels"), labels_required=spec.labels_required)


def _refuse_arrays(spec: DataSpec) -> HashDataset:
    raise InputError("data 'arrays' stands for the in-memory arrays given to HashEncoder.fit; they cannot be "
                     "loaded from a spec (give --data SPEC to encode other data with such a run)")


def _choice(spec: DataSpec, key: str, choices, default: str | None) -> str | None:
    value = spec.options.get(key, default)
    if value is not None and value not in choices:
        raise InputError(f"data spec {spec.text!r}: option {key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _per_class(spec: DataSpec) -> PerClass | None:
    value = spec.options.get("per-class")
    return None if value is None else parse_per_class(value, f"data spec {spec.text!r}")


def _load_cifar10_spec(spec: DataSpec) -> HashDataset:
    return load_cifar10(spec.path, cache=_choice(spec, "cache", CACHE_MODES, "auto"), per_class=_per_class(spec))


def _load_images_spec(spec: DataSpec) -> HashDataset:
    return load_image_folder(spec.path, cache=_choice(spec, "cache", CACHE_MODES, "auto"),
                             per_class=_per_class(spec), labels_required=spec.labels_required)


def _load_list_spec(spec: DataSpec) -> HashDataset:
    return load_image_lists(spec.path, root=spec.options.get("root"),
                            preset=_choice(spec, "preset", tuple(LIST_PRESETS), None),
                            cache=_choice(spec, "cache", CACHE_MODES, "auto"))


register_data_kind(DataKind("arrays", _refuse_arrays, takes_path=False,
                            summary="in-memory arrays given to HashEncoder.fit (not loadable)"))
register_data_kind(DataKind("digits", lambda spec: load_digits(), takes_path=False,
                            summary="scikit-learn's bundled digits (1797 x 64, 10 classes)"))
register_data_kind(DataKind("features", _load_features_spec, takes_path=True,
                            options=("x", "y", "split", "labels", "scale", "zero_point", "dequantize"),
                            summary="a feature file: .npz, .npy (with labels=) or MATLAB .mat"))
register_data_kind(DataKind("image-array", _load_image_arrays_spec, takes_path=True,
                            options=("x", "y", "split", "labels"),
                            summary="images as uint8 arrays (N, H, W[, C]) in an .npz, with labels (MNIST, "
                                    "CIFAR as numpy)"))
register_data_kind(DataKind("cifar10", _load_cifar10_spec, takes_path=True, options=("cache", "per-class"), item_sources=True,
                            summary="CIFAR-10: python pickles, a class-folder tree or its tarball"))
register_data_kind(DataKind("images", _load_images_spec, takes_path=True, options=("cache", "per-class"), item_sources=True,
                            summary="a class-folder tree (train|test/<class>/* or <class>/*) or its tarball"))
register_data_kind(DataKind("list", _load_list_spec, takes_path=True, options=("root", "preset", "cache"),
                            item_sources=True, summary="DeepHash list files train.txt, test.txt, database.txt (preset "
                                    "nuswide21 or imagenet100)"))
