"""Data sets and split protocols (docs/data.md).

`base` (the HashDataset contract), `features`, `images` and its readers (`image_loaders`,
`image_arrays`, `image_sources`, `per_class`, `pixel_cache`, `batches`, `augment`), `spec`
(data-spec strings and their registry), `protocols` (seeded splits, paper Sec. 6.1.1) and
`transforms` (imports torch, so it is not loaded here; its names are still reachable as
attributes); `DataOptions` (here): a run's data options.
"""

from typing import Literal

from lbhash.data.base import INPUT_KINDS, HashDataset, InputOptions
from lbhash.data.features import (
    CLASS_NAME_KEYS,
    DEQUANTIZE_MODES,
    FEATURE_KEYS,
    LABEL_KEYS,
    SPLIT_KEYS,
    ArrayDataset,
    count_unlabelled,
    load_digits,
    load_features,
)
from lbhash.data.image_arrays import load_image_arrays
from lbhash.data.image_loaders import LIST_PRESETS, ListPreset, load_cifar10, load_image_folder, load_image_lists
from lbhash.data.images import CACHE_MODES, ImageDataset, check_images
from lbhash.data.protocols import (
    PARAMETRIC_PROTOCOLS,
    PROTOCOLS,
    SOURCES as PROTOCOL_SOURCES,
    ProtocolSpec,
    Split,
    carve_validation,
    load_split,
    make_split,
    parse_protocol,
    save_split,
)
from lbhash.data.spec import (
    DATA_KINDS,
    DataKind,
    DataSpec,
    absolute_spec,
    load_data,
    load_image_inputs,
    missing_paths,
    parse_data_spec,
    register_data_kind,
)
from lbhash.options import Options, option

MIN_NATIVE_SIDE = 16  # square images from this side up to the backbone's keep their own; smaller ones are resized to it


class DataOptions(Options):
    """The data set, its split protocol and how its items reach the model."""

    # required by `lbhash train` (lbhash.cli.train); Python callers and `lbhash demo` get digits
    data: str = option("digits", "Data spec, e.g. 'features:PATH.npz', 'cifar10:PATH' or 'digits' (the toy set; "
                                 "see docs/data.md).", "a data spec string", shown="required", min_length=1)
    protocol: str | None = option(None, "Split protocol (docs/data.md), each evaluated at its source's R: "
                                        + "; ".join(f"{k} ({v})" for k, v in PROTOCOL_SOURCES.items())
                                        + "; given:T, per-class:T,Q[,+train], random:T,Q (mAP@all); unseen:K[:BASE].",
                                  "a protocol name",
                                  shown="the data set's own")
    image_size: int | None = option(None, "Image side after transforms.", "an integer >= 8",
                                    shown=f"the backbone's (small-image backbones: square images from {MIN_NATIVE_SIDE} px up to it keep their own)", ge=8)
    transform: Literal["imagenet", "cifar", "cifar-augment"] | None = option(
        None, "Image transform preset.", "one of imagenet, cifar, cifar-augment", shown="the backbone's")
    augment: Literal["crop-flip", "flip", "none"] = option(
        "crop-flip", "Training augmentation of images: the preset's random crop and flip, flips only, or none (flip "
        "and none let --train-stages cache the frozen stages' activations; the cifar preset never augments).",
        "one of crop-flip, flip, none")
    num_workers: int = option(0, "DataLoader workers for image data.", "a non-negative integer", ge=0)
    skip_bad_images: bool = option(False, "Drop unreadable images (counted) instead of stopping before training.",
                                   "true or false")
    normalize: Literal["zscore", "none"] = option("zscore", "Feature standardisation (features only).",
                                                  "one of zscore, none")


_TRANSFORM_NAMES = ("build_transforms", "TRANSFORM_PRESETS", "IMAGENET_MEAN", "IMAGENET_STD", "Compose",
                    "ToFloat", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip", "Normalize",
                    "TransformedImages")

__all__ = [
    "HashDataset", "InputOptions", "INPUT_KINDS", "load_image_arrays",
    "ArrayDataset", "load_features", "load_digits", "count_unlabelled", "load_data", "load_image_inputs",
    "parse_data_spec", "register_data_kind", "DataSpec", "DataKind", "DATA_KINDS", "absolute_spec", "missing_paths",
    "ImageDataset", "check_images", "load_cifar10", "load_image_folder", "load_image_lists",
    "ListPreset", "LIST_PRESETS", "CACHE_MODES",
    "Split", "carve_validation", "make_split", "save_split", "load_split", "parse_protocol", "ProtocolSpec",
    "PROTOCOLS", "PARAMETRIC_PROTOCOLS",
    "FEATURE_KEYS", "LABEL_KEYS", "SPLIT_KEYS", "CLASS_NAME_KEYS", "DEQUANTIZE_MODES",
    "DataOptions", *_TRANSFORM_NAMES,
]


def __getattr__(name: str):
    # transforms need torch: imported on first use of one of their names
    if name in _TRANSFORM_NAMES:
        from lbhash.data import transforms

        return getattr(transforms, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
