"""A frozen backbone's pooled features, computed once per (weights, transform, images) and kept.

With a frozen backbone every epoch would push the same images through the same network, so the
features are cached on disk (`<cache dir>/features/<key hash>/`: features.npy and meta.json) and
reused by later epochs, runs, `lbhash encode`, `lbhash index build` and the service. The key
hashes the backbone's weights, its name, the evaluation transform and the images; entries are
checked, built and replaced as the pixel cache's are (lbhash.data.pixel_cache, whose helpers
it shares), and a cache that cannot be written keeps the features in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from lbhash.data.base import EpochShard, ForwardPass, HashDataset, InputOptions, check_indices
from lbhash.data.pixel_cache import CacheUnavailable, _publish, cache_root, read_entry, source_fingerprint, write_entry
from lbhash.errors import InputError
from lbhash.models.registry import IMAGENET_MEAN, IMAGENET_STD

FORMAT = 1
PROGRESS_EVERY = 30.0  # seconds between progress lines when no bar is shown
PROGRESS_FIRST = 10.0  # seconds to the first of them (a line says the extraction started)
_LOG = logging.getLogger("lbhash")


def weights_sha256(module: torch.nn.Module) -> str:
    """SHA-256 over a module's state dict (names, dtypes, shapes and bytes, in order)."""
    digest = hashlib.sha256()
    for name, value in module.state_dict().items():
        tensor = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def images_key(dataset, idx: np.ndarray) -> dict:
    """What identifies the images at `idx`: their decoded pixels' hash, or the source's fingerprint."""
    if dataset.preload(progress=False):
        digest = hashlib.sha256()
        for start in range(0, len(idx), 4096):
            digest.update(np.ascontiguousarray(dataset.pixels[idx[start:start + 4096]]).tobytes())
        return {"pixels_sha256": digest.hexdigest(), "shape": list(dataset.pixels.shape[1:]), "n": len(idx)}
    return {"source": source_fingerprint(dataset.source),
            "items_sha256": hashlib.sha256(idx.astype("<i8").tobytes()).hexdigest()}


def _entry_key(backbone, options: InputOptions, images: dict, bf16: bool) -> dict:
    transform = {"preset": options.transform, "image_size": options.image_size,
                 "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    key = {"format": FORMAT, "backbone": getattr(backbone, "name", type(backbone).__name__),
           "weights_sha256": weights_sha256(backbone), "transform": transform, "images": images}
    if bf16:  # float32 entries keep the key they always had
        key["precision"] = "bf16"
    return key


def backbone_features(dataset, backbone: torch.nn.Module, indices, options: InputOptions,
                      how: ForwardPass = ForwardPass(), bf16: bool = False) -> np.ndarray:
    """The backbone's pooled float32 features (len(indices), D) of the items at `indices`, cached or computed
    (and cached) now, on `how.device` with its progress bar and batch size; `bf16`: under bf16 autocast
    (HashModel's bf16_backbone). `how.autocast` is not used: the precision keys the entry, so `bf16` alone sets it."""
    idx = check_indices(dataset, indices)
    if getattr(dataset, "pixels", True) is None and getattr(dataset, "source", None) is not None:
        _LOG.info("backbone features: decoding the %d images of %s first (their pixels key the feature cache)",
                  len(dataset), dataset.name)
    key = _entry_key(backbone, options, images_key(dataset, idx), bf16)
    path = cache_root() / "features" / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    try:
        cached = _open_entry(path, len(idx))
    except CacheUnavailable as why:
        _LOG.warning("%s: the feature cache cannot be used: %s; computing in memory", cache_root(), why)
        cached, path = None, None
    if cached is not None:
        _LOG.info("backbone features: %d items from the cache (%s)", len(idx), path.name)
        return cached
    features = _compute(dataset, backbone, idx, options, how, bf16)
    if path is not None:
        try:
            _write_entry(path, features, key)
        except CacheUnavailable as why:
            _LOG.warning("%s: the feature cache cannot be written: %s; the features stay in memory", cache_root(), why)
    return features


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


def _open_entry(path, n: int) -> np.ndarray | None:
    def load(file) -> np.ndarray:
        features = np.load(file, allow_pickle=False)
        if features.dtype != np.float32 or features.ndim != 2 or len(features) != n:
            raise ValueError(f"holds {features.dtype} {features.shape}, expected {n} rows of float32")
        return features

    return read_entry(path, "features.npy", FORMAT, "", load, "feature cache entry is unusable (%s); computing it again")


def _write_entry(path, features: np.ndarray, key: dict) -> None:
    def write(tmp) -> dict:
        np.save(tmp / "features.npy", features, allow_pickle=False)
        return {**key, "shape": list(features.shape)}

    write_entry(path, "features.npy", "", write, _publish, "{reason}", "{reason}")


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
                         bf16: bool = False, home=None) -> FrozenFeatures:
    """`dataset` whose items at `indices` give the frozen backbone's (cached) features (`backbone_features`,
    with `how` and `bf16`). `home`: the items whose features were cached as one entry (a run's training
    set, on its own data): the requested items inside it are read from that entry, the others computed
    (and cached) as their own. An entry is keyed by its whole set of images, so asking for a part of it
    would miss."""
    idx = np.unique(check_indices(dataset, indices))
    parts = [idx]
    if home is not None:
        home = np.unique(np.asarray(home, np.int64))
        if len(home) and home[0] >= 0 and home[-1] < len(dataset) and np.isin(idx, home).any():
            parts = [p for p in (home, np.setdiff1d(idx, home)) if len(p)]
    features = [backbone_features(dataset, backbone, part, options, how, bf16) for part in parts]
    rows = np.full(len(dataset), -1, dtype=np.int64)
    offset = 0
    for part in parts:
        rows[part] = np.arange(offset, offset + len(part))
        offset += len(part)
    return FrozenFeatures(dataset, np.concatenate(features), rows)
