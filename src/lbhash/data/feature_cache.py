"""A frozen backbone's pooled features, computed once per (weights, transform, view, photo) and kept.

With a frozen backbone every epoch would push the same images through the same network, so the
features are cached on disk, a row per photo (lbhash.data.feature_shards: `<cache dir>/features/
<space>/<shard>/`), and reused by later epochs, runs, `lbhash encode`, `lbhash index build` and the
service. A space's key (`space_key`) hashes the backbone's weights and name, the evaluation
transform, the precision and the view; a photo's, its file's bytes or its pixels. A request reads
the photos it finds and computes only the others (a folder that grew by 10 photos computes 10),
and a cache that cannot be written keeps the features in memory.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from lbhash.data import feature_shards
from lbhash.data.base import EpochShard, ForwardPass, HashDataset, InputOptions, check_indices
from lbhash.data.pixel_cache import CacheUnavailable, cache_root
from lbhash.errors import InputError
from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD

PROGRESS_EVERY = 30.0  # seconds between progress lines when no bar is shown
PROGRESS_FIRST = 10.0  # seconds to the first of them (a line says the extraction started)
_PROBE = np.random.default_rng(0).integers(0, 256, (29, 37, 3), dtype=np.uint8)  # a view's fingerprint: its output
_LOG = logging.getLogger("lbhash")


def weights_sha256(module: torch.nn.Module) -> str:
    """SHA-256 over a module's state dict (names, dtypes, shapes and bytes, in order)."""
    digest = hashlib.sha256()
    for name, value in module.state_dict().items():
        tensor = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def space_key(backbone, options: InputOptions, bf16: bool, dataset=None) -> dict:
    """What every photo's features in one space share: the backbone's name and weights, the evaluation
    transform, the precision and, for a view's data set (lbhash.data.views), the view: its name and the
    SHA-256 of what it makes of a fixed probe image, so that a view whose parameters changed (a blur's
    sigma, a frame's share) gets a space of its own."""
    transform = {"preset": options.transform, "image_size": options.image_size,
                 "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    key = {"format": feature_shards.FORMAT, "backbone": getattr(backbone, "name", type(backbone).__name__),
           "weights_sha256": weights_sha256(backbone), "transform": transform,
           "precision": "bf16" if bf16 else "fp32"}
    view = getattr(dataset, "view", None)
    if view is not None:
        seen = np.ascontiguousarray(view(_PROBE.copy()))
        key["view"] = {"name": getattr(view, "__qualname__", type(view).__name__),
                       "probe_sha256": hashlib.sha256(f"{seen.shape}".encode() + seen.tobytes()).hexdigest()}
    return key


def backbone_features(dataset, backbone: torch.nn.Module, indices, options: InputOptions,
                      how: ForwardPass = ForwardPass(), bf16: bool = False) -> np.ndarray:
    """The backbone's pooled float32 features (len(indices), D) of the items at `indices`: those of photos
    the cache holds read from it, the others computed now (on `how.device` with its progress bar and
    batch size) and cached; `bf16`: under bf16 autocast (HashModel's bf16_backbone). `how.autocast` is
    not used: the precision keys the space, so `bf16` alone sets it."""
    idx = check_indices(dataset, indices)
    if not len(idx):
        return _compute(dataset, backbone, idx, options, how, bf16)
    key = space_key(backbone, options, bf16, dataset)
    space = feature_shards.space_dir(cache_root(), key)
    digests = feature_shards.photo_digests(dataset, idx)
    try:
        features, found, used = feature_shards.lookup(space, digests)
    except CacheUnavailable as why:
        _LOG.warning("%s: the feature cache cannot be used: %s; computing in memory", cache_root(), why)
        features, found, used, space = None, np.zeros(len(idx), bool), [], None
    # each photo computed once however often it is asked for (one file twice in a folder), in the
    # items' order (np.unique sorts by digest), which keeps the data set's reads in order
    unique, first, again = np.unique(digests[~found], axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(unique), np.int64)
    rank[order] = np.arange(len(unique))
    missing = np.flatnonzero(~found)[first[order]]
    _LOG.info("backbone features: %d of %d images from the cache, %d to compute (%s%s)", int(found.sum()), len(idx),
              len(missing), getattr(backbone, "name", type(backbone).__name__), _view_name(key))
    if len(missing):
        computed = _compute(dataset, backbone, idx[missing], options, how, bf16)
        if features is None:
            features = np.empty((len(idx), computed.shape[1]), np.float32)
        features[~found] = computed[rank[again.reshape(-1)]]
    if space is not None and (len(missing) or len(used) > feature_shards.MAX_SHARDS):
        _store(space, key, digests, features, missing, used)
    return features


def _view_name(key: dict) -> str:
    return f", {key['view']['name'].removesuffix('_view')} view" if "view" in key else ""


def _store(space, key: dict, digests: np.ndarray, features: np.ndarray, missing: np.ndarray, used: list) -> None:
    """Cache the photos just computed as a shard; where the request read more than MAX_SHARDS shards,
    all its photos as one shard instead, in place of those it read (feature_shards: the growth rule)."""
    merge = len(used) + bool(len(missing)) > feature_shards.MAX_SHARDS
    if merge:
        _, rows = np.unique(digests, axis=0, return_index=True)
    else:
        rows = missing
    try:
        path = feature_shards.write_shard(space, digests[rows], features[rows], key)
    except CacheUnavailable as why:
        _LOG.warning("%s: the feature cache cannot be written: %s; the features stay in memory", cache_root(), why)
        return
    if merge:
        feature_shards.retire(used, keep=path)
        _LOG.info("backbone features: %d cached shards merged into one of %d images", len(used), len(rows))
    else:
        try:
            feature_shards.compact(space, key)
        except CacheUnavailable as why:
            _LOG.warning("%s: the feature cache's shards cannot be merged: %s", cache_root(), why)


@torch.inference_mode()
def _compute(dataset, backbone, idx: np.ndarray, options: InputOptions, how: ForwardPass, bf16: bool) -> np.ndarray:
    from tqdm import tqdm

    device, progress = how.device, how.progress
    was_training = backbone.training
    backbone.eval()
    dtype = next((p.dtype for p in backbone.parameters() if p.is_floating_point()), torch.float32)
    out, start = [], time.perf_counter()
    said = start - PROGRESS_EVERY + PROGRESS_FIRST  # the first count comes early, then one every PROGRESS_EVERY
    if not progress:  # a line now: the first count comes only after PROGRESS_FIRST seconds
        _LOG.info("backbone features: computing them for %d images (%s, %s px), once: later runs read them "
                  "from the cache", len(idx), getattr(backbone, "name", type(backbone).__name__),
                  options.image_size)
    bar = tqdm(total=len(idx), desc=f"backbone features ({getattr(backbone, 'name', '')})", unit="img",
               disable=not progress, leave=False)
    try:
        # the data set's encoding batches (None): on a CPU small ones, whose activations stay in the
        # cache (8 images at 128-160 px extract 1.5-2x faster than 64; benchmarks/bench_backbone.py)
        for x in dataset.encode_batches(idx, options, device, False, how.batch_size):
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
                out.append(backbone(x.to(dtype)).float().cpu().numpy())
            bar.update(len(out[-1]))
            if not progress and time.perf_counter() - said > PROGRESS_EVERY:  # a line where no bar shows
                said, done = time.perf_counter(), sum(map(len, out))
                rate = done / (said - start)
                _LOG.info("backbone features: %d/%d images, %.1f images/s, %.0f s left", done, len(idx), rate,
                          (len(idx) - done) / rate)
    finally:
        bar.close()
        backbone.train(was_training)
    features = np.concatenate(out) if out else np.empty((0, getattr(backbone, "out_features", 0)), np.float32)
    seconds = time.perf_counter() - start
    _LOG.info("backbone features: %d images in %.1f s (%.1f images/s)", len(idx), seconds,
              len(idx) / max(seconds, 1e-9))
    if not np.isfinite(features).all():
        raise InputError(f"{dataset.name}: the backbone gave non-finite features (check the weights)")
    return features


@dataclass(eq=False)
class FrozenFeatures(HashDataset):
    """An image data set whose items at `rows` >= 0 give a frozen backbone's features as model inputs (for
    the head alone); labels, splits, names and sources are the images'."""

    images: HashDataset
    features: np.ndarray        # (m, D) float32
    rows: np.ndarray            # (n,) item -> row of `features`, -1 for items not computed
    input_kind = "images"

    def __post_init__(self) -> None:
        for name in ("labels", "is_test", "name", "class_names", "parts", "topk"):
            setattr(self, name, getattr(self.images, name))

    @property
    def multi_label(self) -> bool:
        return self.images.multi_label

    def _features(self, indices) -> np.ndarray:
        idx = check_indices(self, indices)
        rows = self.rows[idx]
        if (rows < 0).any():
            raise RuntimeError(f"{self.name}: item {int(idx[rows < 0][0])} has no computed backbone features")
        return self.features[rows]

    def subset(self, indices) -> "FrozenFeatures":
        idx = check_indices(self, indices)
        return FrozenFeatures(self.images.subset(idx), self.features, self.rows[idx])

    def item_sources(self, indices):
        return self.images.item_sources(indices)

    def check_items(self, indices, skip_bad: bool = False):
        return self.images.check_items(indices, skip_bad)

    def native_side(self):
        return self.images.native_side()

    def train_batches(self, indices, shard: EpochShard, device="cpu", options: InputOptions = InputOptions()):
        from lbhash.data.batches import ArrayBatches

        idx = check_indices(self, indices)
        return ArrayBatches(self._features(idx), self.labels[idx], shard, device)

    def encode_batches(self, indices, options: InputOptions = InputOptions(), device="cpu",
                       progress: bool = False, batch_size: int | None = None):
        from lbhash.data.batches import array_inputs

        return array_inputs(self._features(indices), batch_size or 1024, device)


def with_frozen_features(dataset, backbone, indices, options: InputOptions, how: ForwardPass = ForwardPass(),
                         bf16: bool = False) -> FrozenFeatures:
    """`dataset` whose items at `indices` give the frozen backbone's (cached) features (`backbone_features`,
    with `how` and `bf16`); any items of any data set: the cache finds each photo by its own key."""
    idx = np.unique(check_indices(dataset, indices))
    rows = np.full(len(dataset), -1, dtype=np.int64)
    rows[idx] = np.arange(len(idx))
    return FrozenFeatures(dataset, backbone_features(dataset, backbone, idx, options, how, bf16), rows)
