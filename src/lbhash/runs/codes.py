"""The codes of any data with a finished run's model (the forward pass of `RunDirectory.encode`,
`lbhash encode`), through the one forward loop (lbhash.train.forward) and with labels stored as
lbhash.train.split_codes stores them, so a run's own items encode to the codes of its codes.npz.
Nothing here imports the training loop or Lightning: `lbhash encode` starts fast.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lbhash.codes_file import stored_labels
from lbhash.data import load_data, load_image_inputs, load_split
from lbhash.data.feature_cache import with_frozen_features
from lbhash.data.input_form import conform_dataset
from lbhash.data.views import ITEM_VIEW, item_embedding, item_views, view_of
from lbhash.errors import InputError
from lbhash.train.builder import evaluation_topk, input_options
from lbhash.train.forward import ForwardPass, embed_sharded, embed_with_features
from lbhash.train.processes import check_accelerator, encoding_processes, leave_process_group
from lbhash.runs.encoder import load_run_model
from lbhash.runs.run_files import PARTS, SPLIT, load_input_form, run_data_spec

logger = logging.getLogger("lbhash")


def item_embeddings(run_dir: str | Path, ids, data: str | None = None, progress: bool = False) -> np.ndarray:
    """The embeddings an index keeps of a run's items (`ids`: positions in its data, or in `data`,
    the same data moved), float32 (n, d), from the forward pass of their codes (a frozen backbone's
    from the feature cache) and, for photos, of their views (lbhash.data.views); one
    process, on the CPU."""
    model, cfg = load_run_model(run_dir)
    form = load_input_form(run_dir, cfg)
    spec = data or run_data_spec(run_dir, cfg)
    photos = conform_dataset(form, load_data(spec, labels_required=False), spec)
    ids = np.asarray(ids, np.int64)
    how = ForwardPass(progress=progress)
    emb = embed_with_features(model, _frozen(photos, model, cfg, ids, how), ids, input_options(cfg), how)[1]
    if cfg.input_kind != "images":
        return emb
    return item_embedding(emb, [embed_with_features(model, _frozen(view_of(photos, view), model, cfg, ids, how), ids,
                                                    input_options(cfg), how)[1]
                                for view, _ in item_views(ITEM_VIEW)], ITEM_VIEW)


def _frozen(photos, model, cfg, ids, how: ForwardPass):
    """`photos` (or a view of them) with a frozen backbone's cached features of the items at `ids` (each
    photo computed once, then read from the feature cache), else as they are."""
    if cfg.input_kind == "images" and cfg.model.freeze_backbone:
        return with_frozen_features(photos, model.backbone, ids, input_options(cfg), how, model.bf16_backbone)
    return photos


@dataclass(frozen=True)
class EncodeItems:
    """The items `RunDirectory.encode` encodes: the `part` of `data` (a data spec; None: the run's own),
    or `images`, image inputs as `lbhash search --images` takes them (lbhash.data.load_image_inputs), in
    their order, instead of a data spec (labelled only where they are one labelled input).
    `skip_bad_images` (or a run trained with it, on its own data) leaves unreadable images out, counted
    in a warning: their ids are missing from the fields."""

    data: str | None = None
    part: str = "all"
    images: Sequence = ()
    skip_bad_images: bool = False


def run_forward(sharded, run_dir: str | Path, items: EncodeItems, accelerator: str, precision: str, devices: int,
                progress: bool) -> tuple[np.ndarray, dict] | None:
    """`sharded` (`encode_sharded`, or `embed_sharded` and its two arrays) of the `items`, and the
    codes-file fields but `codes` (None on ranks other than 0)."""
    run_dir = Path(run_dir)
    data, part, images, skip_bad_images = items.data, items.part, items.images, items.skip_bad_images
    if part not in PARTS:
        raise InputError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if accelerator not in ("cpu", "gpu"):
        raise InputError(f"accelerator must be cpu or gpu, got {accelerator!r}")
    if images and (data is not None or part != "all"):
        raise InputError(f"--images encodes the images given: leave out {'--data' if data is not None else '--part'}")
    check_accelerator(accelerator)
    model, cfg = load_run_model(run_dir)
    split = load_split(run_dir / SPLIT)
    inputs = _inputs(run_dir, cfg, data, part, split, images)
    own = not images and (data is None or data in (cfg.dataset.data, run_data_spec(run_dir, cfg)))
    if skip_bad_images or (own and cfg.dataset.skip_bad_images):
        inputs = _readable(inputs, "--skip-bad-images" if skip_bad_images else "the run's skip_bad_images")
    fabric = encoding_processes(accelerator, devices)
    model.to(fabric.device)  # image models keep their channels-last layout
    outs = []
    for photos, index in inputs:
        how = ForwardPass(fabric.device, progress=progress and fabric.is_global_zero)
        dataset = _frozen(photos, model, cfg, index, how)
        out = sharded(fabric, model, dataset, index, input_options(cfg), _autocast(fabric.device, precision), progress)
        if sharded is embed_sharded and cfg.input_kind == "images":  # the embeddings an index keeps: every view
            views = [sharded(fabric, model, _frozen(view_of(photos, view), model, cfg, index, how), index,
                             input_options(cfg), _autocast(fabric.device, precision), progress)  # (every rank)
                     for view, _ in item_views(ITEM_VIEW)]
            out = None if out is None else (out[0], item_embedding(out[1], [v[1] for v in views], ITEM_VIEW))
        outs.append(out)
    leave_process_group(fabric)
    if outs[0] is None:
        return None
    out = tuple(np.concatenate(parts) for parts in zip(*outs)) if isinstance(outs[0], tuple) else np.concatenate(outs)
    width = (out[0] if isinstance(out, tuple) else out).shape[1]
    if width != cfg.hashing.bits:
        raise InputError(f"the model gives {width} bits but the run has {cfg.hashing.bits}")
    return out, {"bits": cfg.hashing.bits, **_fields(inputs, bool(images)), "topk": evaluation_topk(cfg, split)}


def _inputs(run_dir: Path, cfg, data: str | None, part: str, split, images) -> list[tuple]:
    """(data set in the run's input form, the positions to encode) of each input."""
    form = load_input_form(run_dir, cfg)
    if images:
        return [(conform_dataset(form, dataset, f"--images {dataset.name}"), np.arange(len(dataset)))
                for dataset in load_image_inputs(images)]
    own_spec = run_data_spec(run_dir, cfg)  # found from any working directory
    own = data is None or data in (cfg.dataset.data, own_spec)
    if part != "all" and not own:
        raise InputError(f"--part {part} selects items of the run's split, so it needs the run's own data "
                         f"({cfg.dataset.data}), not {data}")
    spec = own_spec if own else data
    dataset = conform_dataset(form, load_data(spec, labels_required=False), spec)
    return [(dataset, np.arange(len(dataset)) if part == "all" else getattr(split, part))]


def _readable(inputs: list[tuple], why: str) -> list[tuple]:
    """The inputs without their unreadable images (data sets of features are kept whole)."""
    kept, skipped = [], 0
    for dataset, index in inputs:
        good, bad = dataset.check_items(index, skip_bad=True)
        kept.append((dataset, np.asarray(good, np.int64)))
        skipped += bad
    if skipped:
        logger.warning("skipped %d unreadable image(s) (%s)", skipped, why)
    return kept


def _fields(inputs: list[tuple], renumber: bool) -> dict:
    """The codes-file fields `ids`, `labels` and `sources` of the inputs' items, in order: ids are the
    items' positions (in all the inputs, one after the other, where `renumber`), labels those of a
    single labelled input."""
    dataset, index = inputs[0]
    labelled = len(inputs) == 1 and dataset.num_classes > 0
    sources = [d.item_sources(i) for d, i in inputs]
    starts = np.cumsum([0] + [len(d) for d, _ in inputs[:-1]])
    ids = np.concatenate([start + i for start, (_, i) in zip(starts, inputs)]) if renumber else index
    return {"ids": np.asarray(ids, np.int64),
            "labels": stored_labels(dataset.multi_label, dataset.labels[index]) if labelled else None,
            "sources": None if any(s is None for s in sources) else np.concatenate(sources)}


def _autocast(device: torch.device, precision: str):
    """Mixed precision on a GPU (bf16 by default); the CPU always computes in float32."""
    if device.type == "cuda" and "bf16" in precision:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cuda" and precision.startswith("16"):
        return lambda: torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext



def photo_embedder(run_dir: str | Path):
    """A function from a list of uint8 (H, W, 3) photos to their embeddings float32 (n, d) as a query's
    are made (the run's forward pass; a frozen backbone's features read from the feature cache where
    they were computed before, for photos of one size: an index's edited copies, made again alike)."""
    from lbhash.data import ImageDataset

    model, cfg = load_run_model(run_dir)
    options, how = input_options(cfg), ForwardPass()

    def embed(images: list[np.ndarray]) -> np.ndarray:
        same = bool(images) and all(img.shape == images[0].shape for img in images)
        batches = [np.stack(images)] if same else [img[None] for img in images]
        out = []
        for pixels in batches:
            idx = np.arange(len(pixels))
            dataset = ImageDataset(np.zeros((len(pixels), 0), bool), None, "copies", pixels=pixels)
            if cfg.model.freeze_backbone:
                dataset = with_frozen_features(dataset, model.backbone, idx, options, how, model.bf16_backbone)
            with torch.no_grad():
                out.append(embed_with_features(model, dataset, idx, options, how)[1])
        return np.concatenate(out) if out else np.empty((0, 0), np.float32)

    return embed


def backbone_embedder(name: str, size: int, pretrained: str = "imagenet"):
    """A function from a list of uint8 (H, W, 3) photos to the pooled features float32 (n, d) of backbone
    `name` with its `pretrained` weights, at `size` px by the backbone's evaluation transform (the pixels a
    frozen run of it sees): photos with no run, for `lbhash duplicates FOLDER`."""
    from lbhash.data.eval_images import eval_inputs
    from lbhash.models import create_backbone
    from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD

    backbone = create_backbone(name, pretrained=pretrained).eval()

    def embed(images: list[np.ndarray]) -> np.ndarray:
        out = []
        with torch.no_grad():
            for img in images:  # (photos of a folder differ in size; the transform takes one size a call)
                x = eval_inputs(img[None], backbone.transform_preset, size, IMAGENET_MEAN, IMAGENET_STD)
                out.append(backbone(torch.from_numpy(x)).float().numpy())
        return np.concatenate(out) if out else np.empty((0, backbone.out_features), np.float32)

    return embed
