"""`Searcher`: search an index with raw inputs (feature vectors or images) through an encoder."""

from __future__ import annotations

import inspect

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data import HashDataset
from lbhash.data.image_sources import decode_image
from lbhash.errors import InputError, one_line
from lbhash.index.rerank import RERANK_FACTOR, rerank_search

INPUT_KINDS = ("features", "images")


class Searcher:
    """An index and the encoder that made its codes.

    The encoder has `bits_` (int), `input_kind_` ("features" or "images") and
    `encode(X) -> packed uint8 (n, bits // 8)`, where X is float (n, d) for feature runs and
    uint8 (n, H, W, 3) for image runs (`lbhash.index.sources.load_encoder` gives one).
    Re-ranking (`rerank_search`, `encode(..., real=True)`) also needs
    `encode(X, real=True) -> float (n, bits)`: the real outputs whose signs are the codes.
    """

    def __init__(self, index, encoder):
        kind = getattr(encoder, "input_kind_", None)
        if kind not in INPUT_KINDS:
            raise InputError(f"the encoder's input_kind_ must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
        if int(encoder.bits_) != index.bits:
            raise InputError(f"the encoder makes {encoder.bits_}-bit codes but the index holds {index.bits}-bit codes")
        self.index, self.encoder = index, encoder

    @property
    def input_kind(self) -> str:
        return self.encoder.input_kind_

    def encode(self, inputs, real: bool = False, json_numbers: bool = False) -> np.ndarray:
        """Packed codes of feature rows (an array, or a feature data set loaded from a file), an
        image batch, or a list of images of any sizes; real=True: the encoder's real outputs
        float32 (n, bits) instead (codes = their signs). Feature rows go through the run's input
        contract (docs/data.md#the-input-contract); json_numbers: they came from JSON."""
        if self.input_kind == "features":
            if isinstance(inputs, HashDataset) and not hasattr(self.encoder, "input_form_"):
                inputs = inputs.x  # an encoder without an input contract takes the rows
            return self._encode_checked(inputs if isinstance(inputs, HashDataset) else check_features(inputs),
                                        real, json_numbers)
        images = check_images(inputs)
        if isinstance(images, list):  # different sizes: one at a time
            parts = [self._encode_checked(img[None], real) for img in images]
            empty = np.empty((0, self.index.bits), np.float32) if real else np.empty((0, self.index.bits // 8), np.uint8)
            return np.concatenate(parts) if parts else empty
        return self._encode_checked(images, real)

    def encode_image_files(self, blobs: list[bytes], names: list[str], real: bool = False) -> np.ndarray:
        """Packed codes (or, real=True, real outputs) of encoded image files (JPEG, PNG, ...);
        `names` appear in errors."""
        if self.input_kind != "images":
            raise InputError("this run encodes feature vectors, not images")
        images = []
        for blob, name in zip(blobs, names):
            try:
                images.append(decode_image(blob, name))
            except ValueError as err:
                raise InputError(str(err)) from None
        return self.encode(images, real)

    def search(self, inputs, k: int, labels=None):
        """`index.search` of the inputs' codes (re-ranked: `rerank_search`)."""
        return self.index.search(self.encode(inputs), k, labels)

    def rerank_search(self, inputs, k: int, labels=None, factor: int = RERANK_FACTOR):
        """`lbhash.index.rerank_search` of the inputs: the Hamming top k * factor re-ranked by
        their real outputs (one forward pass gives codes and outputs; docs/search.md):
        (scores, Hamming distances, ids)."""
        real = self.encode(inputs, real=True)
        return rerank_search(self.index, codes_of(real), k, real, labels, factor)

    def range_search(self, inputs, radius: int, labels=None):
        return self.index.range_search(self.encode(inputs), radius, labels)

    def _encode_checked(self, batch, real: bool = False, json_numbers: bool = False):
        takes = "json_numbers" in inspect.signature(self.encoder.encode).parameters
        extra = {"json_numbers": True} if json_numbers and takes else {}  # encoders without the option still work
        try:
            out = self.encoder.encode(batch, real=True, **extra) if real else self.encoder.encode(batch, **extra)
        except ValueError as err:  # lbhash's convention: the input was refused
            raise InputError(one_line(err)) from None
        return self._checked_real(out, len(batch)) if real else self._checked(out, len(batch))

    def _checked(self, codes, n: int) -> np.ndarray:
        codes = np.asarray(codes)
        width = self.index.bits // 8
        if codes.dtype != np.uint8 or codes.shape != (n, width):  # the encoder broke its contract
            raise RuntimeError(f"encoder returned {codes.dtype} {codes.shape}, expected uint8 ({n}, {width})")
        return codes

    def _checked_real(self, real, n: int) -> np.ndarray:
        real = np.asarray(real)
        if real.dtype.kind != "f" or real.shape != (n, self.index.bits):  # the encoder broke its contract
            raise RuntimeError(f"encoder returned real outputs {real.dtype} {real.shape}, "
                               f"expected float ({n}, {self.index.bits})")
        return real


def codes_of(real: np.ndarray) -> np.ndarray:
    """Packed codes of real outputs: their signs, 0 -> +1 (lbhash.codes.to_signs)."""
    return pack(to_signs(real, "real outputs"))


def check_features(x, name: str = "features") -> np.ndarray:
    """Feature rows as given (their dtype is part of the input contract): 2-D numbers, all finite."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf" or arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D array of numbers (n, d), got {arr.dtype} with shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"{name} holds {arr[r, c]} at row {r}, column {c}; only finite numbers are allowed")
    return arr


def check_images(x, name: str = "images"):
    """uint8 (n, H, W, 3), or a list of uint8 (H, W, 3) arrays (sizes may differ)."""
    if isinstance(x, (list, tuple)):
        items = [np.asarray(img) for img in x]
        for i, img in enumerate(items):
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise InputError(f"{name}[{i}] must be uint8 (H, W, 3), got {img.dtype} with shape {img.shape}")
        if items and all(img.shape == items[0].shape for img in items):
            return np.stack(items)
        return items
    arr = np.asarray(x)
    if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[3] != 3:
        raise InputError(f"{name} must be uint8 (n, H, W, 3), got {arr.dtype} with shape {arr.shape}")
    return arr
