"""A run's data options (`DataOptions`): the data set, its split protocol and how its items reach the model."""

from typing import Literal

from lbhash.data.protocols import SOURCES as PROTOCOL_SOURCES
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
