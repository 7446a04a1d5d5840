"""Image data sets: ImageDataset and check_images (loaders: image_loaders, image_arrays).

Same-sized images are decoded once into a uint8 pixel store (in memory, or memory-mapped
from the disk cache of lbhash.data.pixel_cache), and batches are gathered from it and
transformed as whole tensors (lbhash.data.augment). Sets of images of different sizes are
decoded per item, by DataLoader workers, with the per-image transforms. torch is imported
only when batches are made, so loading labels for a split stays light.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from lbhash.cpus import usable_cpus
from lbhash.data.base import EpochShard, HashDataset, InputOptions, check_indices
from lbhash.data.image_sources import decode_image, open_image, take
from lbhash.errors import InputError

CACHE_MODES = ("auto", "on", "disk", "off")
PARTS = ("train", "query", "database")
_SKIP_HINT = "skip_bad=True (--skip-bad-images) leaves unreadable images out"


@dataclass(eq=False)
class ImageDataset(HashDataset):
    """Images plus labels.

    The pixels come from `pixels` ((n, H, W, 3) uint8, decoded) or from `source` (encoded bytes per
    item, see image_sources). `parts`: a train/query/database split given by the source; `topk`: a
    preset's default R; `declared_multi_label` overrides the label-count rule; `cache` and
    `cache_key`: see preload; `rows_of`: the file whose rows `pixels` are (sources `FILE row N`).
    """

    labels: np.ndarray
    is_test: np.ndarray | None
    name: str
    class_names: list[str] | None = None
    source: object | None = None
    pixels: np.ndarray | None = None
    parts: dict[str, np.ndarray] | None = None
    topk: int | None = None
    declared_multi_label: bool | None = None
    cache: str = "auto"
    cache_key: str | None = None
    rows_of: str | None = None
    input_kind = "images"
    _bad: np.ndarray | None = field(default=None, init=False, repr=False)  # cache slots that failed
    _no_cache: bool = field(default=False, init=False, repr=False)
    _mixed: bool = field(default=False, init=False, repr=False)  # decoding met an image of another size

    def __post_init__(self) -> None:
        self.check_labels(None)
        n = len(self.labels)
        if self.cache not in CACHE_MODES:
            raise InputError(f"{self.name}: cache must be one of {', '.join(CACHE_MODES)}, got {self.cache!r}")
        if (self.source is None) == (self.pixels is None):
            raise InputError(f"{self.name}: give exactly one of source and pixels")
        if self.pixels is not None:
            px = self.pixels
            if px.dtype != np.uint8 or px.ndim != 4 or px.shape[3] != 3 or len(px) != n:
                raise InputError(f"{self.name}: pixels must be uint8 ({n}, H, W, 3), got {px.dtype} {px.shape}")
            px.flags.writeable = False  # a shared cache: nobody writes to it
        elif len(self.source) != n:
            raise InputError(f"{self.name}: {len(self.source)} images for {n} label rows")
        if self.parts is not None:
            self.parts = _check_parts(self.parts, n, self.name)

    @property
    def multi_label(self) -> bool:
        """The preset's declaration, else True if any item has other than one label."""
        return super().multi_label if self.declared_multi_label is None else self.declared_multi_label

    def where(self, i: int) -> str:
        """Item i's file (or `tarball:member`) for messages."""
        return f"{self.name}[{i}]" if self.source is None else self.source.where(int(i))

    def image(self, i: int) -> np.ndarray:
        """Item i as a new (H, W, 3) uint8 RGB array; ValueError naming the file if unreadable."""
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"{self.name}: item {i} out of range for {len(self)} items")
        if self.pixels is not None and (self._bad is None or not self._bad[i]):
            return self.pixels[i].copy()
        return decode_image(self.source.read(i), self.source.where(i))

    def preload(self, progress: bool | None = None) -> bool:
        """Decode every image once into the pixel store `pixels` if the store rule allows (docs/data.md);
        True if stored. Unreadable images do not stop it; reading one raises later."""
        if self.pixels is None:
            self._build_store(None, True, progress)
        return self.pixels is not None

    def native_side(self) -> int | None:
        """The side of the first image if it is square, else None."""
        shape = self.pixels.shape[1:3] if self.pixels is not None else (self._first_shape() or (None, None))[:2]
        return int(shape[0]) if shape[0] is not None and shape[0] == shape[1] else None

    def sizes(self) -> dict:
        """What is known of the sizes without decoding: `{"stored_size": [H, W]}` (the pixel store),
        `{"varying": True}` (decoding met another size), `{"first_size": [H, W]}` (the first header) or `{}`."""
        if self.pixels is not None:
            return {"stored_size": [int(self.pixels.shape[1]), int(self.pixels.shape[2])]}
        if self._mixed:
            return {"varying": True}
        first = self._first_shape()
        return {} if first is None else {"first_size": [int(first[0]), int(first[1])]}

    def torch_dataset(self, indices=None, transform=None):
        """A torch Dataset of (transform(uint8 CHW), float32 labels, k), k the position in `indices`; preloads first."""
        from lbhash.data.transforms import TransformedImages

        self.preload()
        return TransformedImages(self, check_indices(self, indices), transform)

    def subset(self, indices) -> ImageDataset:
        idx = check_indices(self, indices)
        parts = None if self.parts is None else _subset_parts(self.parts, idx)
        common = dict(labels=self.labels[idx], is_test=None if self.is_test is None else self.is_test[idx],
                      name=self.name, class_names=self.class_names, parts=parts, topk=self.topk,
                      declared_multi_label=self.declared_multi_label, cache=self.cache,
                      cache_key=self.cache_key, rows_of=self.rows_of)
        if self.pixels is not None and self._bad is None:
            return ImageDataset(pixels=np.ascontiguousarray(self.pixels[idx]), **common)
        return ImageDataset(source=take(self.source, idx), **common)

    def item_sources(self, indices) -> np.ndarray | None:
        """Each item's file (or TARBALL:MEMBER), or `FILE row N` for the rows of an image file
        (`rows_of`); None for pixels given in memory."""
        idx = check_indices(self, indices)
        if self.source is None:
            return None if self.rows_of is None else np.array([f"{self.rows_of} row {int(i)}" for i in idx], dtype=str)
        return np.array([self.source.where(int(i)) for i in idx], dtype=str)

    def check_items(self, indices, skip_bad: bool = False) -> tuple[np.ndarray, int]:
        return check_images(self, indices, skip_bad=skip_bad)

    def train_batches(self, indices, shard: EpochShard, device="cpu", options: InputOptions = InputOptions()):
        from lbhash.data.batches import LoaderBatches, PixelBatches

        idx = self._stored(indices)
        if idx is not None:
            return PixelBatches(self.pixels, idx, self.labels[idx], _batch_transform(options, train=True),
                                shard, device, options.channels_last)
        dataset = self.torch_dataset(indices, _transform(options, train=True))
        return LoaderBatches(dataset, shard, device, options.num_workers, options.channels_last)

    def encode_batches(self, indices, options: InputOptions = InputOptions(), device="cpu",
                       progress: bool = False, batch_size: int | None = None):
        from lbhash.data.batches import loader_inputs, pixel_inputs

        batch_size = batch_size or encode_batch_size(options, device)
        idx = self._stored(indices)
        if idx is not None:
            return pixel_inputs(self.pixels, idx, _batch_transform(options, train=False), batch_size, device,
                                options.channels_last, progress)
        dataset = self.torch_dataset(indices, _transform(options, train=False))
        return loader_inputs(dataset, batch_size, device, options.num_workers, options.channels_last, progress)

    def _stored(self, indices) -> np.ndarray | None:
        """The indices when the pixel store holds all of them (decoding it first if allowed)."""
        idx = check_indices(self, indices)
        if not self.preload():
            return None
        if self._bad is not None and self._bad[idx].any():
            self._raise_unreadable(int(idx[self._bad[idx]][0]))
        return idx

    def _cache_shape(self) -> tuple[int, int, int] | None:
        if self.pixels is not None or self.cache == "off" or self._no_cache or not len(self):
            return None
        return self._first_shape()

    def _first_shape(self) -> tuple[int, int, int] | None:
        """(H, W, 3) of the first image whose header reads (None: none of the first 16)."""
        for i in range(min(len(self), 16)):
            try:
                with open_image(self.source.read(i)) as im:  # (the header only)
                    w, h = im.size
                return h, w, 3
            except (ValueError, OSError, SyntaxError, Image.DecompressionBombError):
                continue
        return None

    def _build_store(self, required, skip_bad: bool, progress) -> np.ndarray | None:
        """Fill `pixels` (memory or disk cache, see preload); returns the unreadable mask, or
        None when no store is made. Items in `required` (None: none) raise unless skip_bad."""
        from lbhash.data import pixel_cache

        shape = self._cache_shape()
        if shape is None:
            return None
        n = len(self)
        fits = n * int(np.prod(shape)) <= pixel_cache.memory_budget()
        fill = lambda pixels: self._decode_into(pixels, required, skip_bad, progress)  # noqa: E731
        disk = (self.cache == "disk" or not fits) and self.cache_key is not None
        if disk:
            fingerprint = pixel_cache.source_fingerprint(self.source)
            path = pixel_cache.entry_dir(self.cache_key, fingerprint)
            try:
                got = pixel_cache.open_entry(path, n, shape, in_memory=fits)
                if got is None:
                    record = {"key": self.cache_key, "source": fingerprint}
                    got = pixel_cache.build_entry(path, n, shape, fill, record, in_memory=fits)
            except pixel_cache.CacheUnavailable as why:  # never fail because of the cache
                pixel_cache.warn_unavailable(why, "into memory" if fits else "each image when it is needed")
                disk = False
        if disk:
            if got is None:
                self._no_cache = True
                return None
            pixels, bad = got
            if required is not None and not skip_bad and (bad & required).any():
                self._raise_unreadable(int(np.flatnonzero(bad & required)[0]))
        elif fits or (self.cache == "on" and self.cache_key is None):
            pixels = np.empty((n, *shape), dtype=np.uint8)
            bad = fill(pixels)
            if bad is None:
                self._no_cache = True
                return None
            pixels.flags.writeable = False  # a shared store: nobody writes to it
        else:  # too large for memory and no file to key a disk entry on
            self._no_cache = True
            return None
        self.pixels, self._bad = pixels, bad
        return bad

    def _raise_unreadable(self, i: int):
        try:
            decode_image(self.source.read(i), self.source.where(i))
        except ValueError as err:
            raise InputError(f"{err}; {_SKIP_HINT}") from None
        raise InputError(f"{self.source.where(i)}: could not be decoded when the pixel cache was built; "
                         f"{_SKIP_HINT}")

    def _decode_into(self, pixels: np.ndarray, required, skip_bad: bool, progress) -> np.ndarray | None:
        """Decode every item into `pixels` in threads (decoding releases the GIL); returns the
        unreadable mask, or None at the first image of another size (cache "on": an error)."""
        from tqdm import tqdm

        n, shape = len(self), pixels.shape[1:]
        bad = np.zeros(n, dtype=bool)

        def one(i):
            try:
                img = decode_image(self.source.read(i), self.source.where(i))
            except ValueError as err:
                return err
            if img.shape != shape:
                return img.shape
            pixels[i] = img
            return None

        workers = min(8, usable_cpus())
        with ThreadPoolExecutor(workers) as pool, tqdm(total=n, desc=f"decoding {self.name}", unit="img",
                                                       leave=False, disable=_quiet(n, progress)) as bar:
            for start in range(0, n, 1024):  # blocks: no million pending futures
                block = range(start, min(n, start + 1024))
                for i, result in zip(block, pool.map(one, block)):
                    if isinstance(result, ValueError):
                        if required is not None and required[i] and not skip_bad:
                            raise InputError(f"{result}; {_SKIP_HINT}")
                        bad[i] = True
                    elif result is not None:
                        if self.cache == "on":
                            raise InputError(f"{self.source.where(i)}: is {result[1]}x{result[0]}, but cache=on "
                                             f"needs every image the size of the first ({shape[1]}x{shape[0]})")
                        self._mixed = True
                        return None
                bar.update(len(block))
        return bad

    def _validate(self, idx: np.ndarray, skip_bad: bool, progress, workers: int | None) -> np.ndarray:
        """Decode (JPEG at 1/8 scale) each of idx in threads; returns the unreadable mask."""
        from tqdm import tqdm

        def check(i):
            try:
                decode_image(self.source.read(i), self.source.where(i), draft=True)
            except ValueError as err:
                return err
            return None

        bad = np.zeros(len(self), dtype=bool)
        workers = workers or min(8, usable_cpus())
        with ThreadPoolExecutor(workers) as pool, tqdm(total=len(idx), desc=f"checking {self.name}", unit="img",
                                                       leave=False, disable=_quiet(len(idx), progress)) as bar:
            for start in range(0, len(idx), 1024):  # blocks: no million pending futures
                block = idx[start:start + 1024]
                for i, err in zip(block, pool.map(check, block)):
                    if err is not None:
                        if not skip_bad:
                            raise InputError(f"{err}; {_SKIP_HINT}")
                        bad[i] = True
                bar.update(len(block))
        return bad


def check_images(dataset: ImageDataset, indices=None, skip_bad: bool = False, progress: bool | None = None,
                 workers: int | None = None) -> tuple[np.ndarray, int]:
    """Check that every image at `indices` (default all) can be read; run it before training.

    Returns (the readable indices, in the given order; the number of unreadable ones). An
    unreadable image (missing, truncated, not an image) raises a ValueError naming its file, or
    with skip_bad=True is counted and left out. A set that qualifies for the cache is decoded into
    it (all items); others item by item in `workers` threads (JPEG at reduced scale).
    """
    idx = check_indices(dataset, indices)
    if dataset.source is None or not len(idx):
        return idx, 0
    if dataset.pixels is not None:
        bad = np.zeros(len(dataset), bool) if dataset._bad is None else dataset._bad
        if bad[idx].any() and not skip_bad:
            try:
                dataset.image(idx[bad[idx]][0])
            except ValueError as err:
                raise InputError(f"{err}; {_SKIP_HINT}") from None
    else:
        required = np.zeros(len(dataset), dtype=bool)
        required[idx] = True
        bad = dataset._build_store(required, skip_bad, progress)
        if bad is None:
            bad = dataset._validate(idx, skip_bad, progress, workers)
    return idx[~bad[idx]], int(bad[idx].sum())


def encode_batch_size(options: InputOptions, device="cpu") -> int:
    """Images per encoding batch: about 2^17 pixels on the CPU (128 at 32x32), where a batch
    whose activations fit the cache runs fastest; about 2^20 on a GPU (1024 at 32x32)."""
    side = options.image_size or 32
    pixels = 1 << 20 if str(device).startswith("cuda") else 1 << 17
    return max(8, pixels // (side * side))


def _batch_transform(options: InputOptions, train: bool):
    from lbhash.data.augment import BatchTransform

    return BatchTransform(options.transform or "cifar-augment", options.image_size or 32, train, options.augment)


def _transform(options: InputOptions, train: bool):
    from lbhash.data.transforms import build_transforms

    return build_transforms(options.transform, options.image_size, train=train, augment=options.augment)


def _subset_parts(parts: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray] | None:
    """Parts of a subset: each part's items that the subset holds, as positions in it."""
    position = {int(i): k for k, i in enumerate(idx)}
    return {key: np.array([position[int(i)] for i in part if int(i) in position], dtype=np.int64)
            for key, part in parts.items()}


def _quiet(n: int, progress: bool | None):
    # None: a bar for long jobs, and only on a terminal (tqdm's disable=None)
    return (not progress) if progress is not None else (True if n < 10000 else None)


def _check_parts(parts: dict, n: int, name: str) -> dict[str, np.ndarray]:
    if set(parts) != set(PARTS):
        raise InputError(f"{name}: parts must have keys train, query, database, got {', '.join(parts)}")
    out = {}
    for key in PARTS:
        idx = np.asarray(parts[key])
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise InputError(f"{name}: part {key} must be a 1-D integer array")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n or len(np.unique(idx)) != len(idx)):
            raise InputError(f"{name}: part {key} must hold unique indices below {n}")
        out[key] = idx
    return out
