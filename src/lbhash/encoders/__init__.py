"""What turns inputs into codes: the `Encoder` base class, which a run's torch model
(`lbhash.runs.encoder.RunEncoder`, `HashEncoder`) and an export (lbhash.encoders.exported: ONNX
Runtime and numpy) subclass. Nothing here imports torch: a layer may name it without a model's stack.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data import HashDataset
from lbhash.data.image_arrays import as_rgb_images
from lbhash.data.input_form import InputForm, conform_dataset, conform_features
from lbhash.errors import InputError, one_line

INPUT_KINDS = ("features", "images")


class Encoder(ABC):
    """Inputs -> codes, and the real outputs whose signs are the codes.

    `bits_`: code length; `input_kind_`: "features" (X float or integer rows (n, d), through the
    run's input contract `input_form_`, docs/data.md#the-input-contract) or "images" (uint8
    (n, H, W[, C]), or a list of (H, W, 3) of any sizes: resized by the run's transform). X may also
    be a data set loaded from a file (lbhash.data.load_data). json_numbers: the rows came from
    JSON, whose integers a run trained on float features takes as values. Bad input raises a
    one-line lbhash.errors.InputError. Here, once for every subclass: the input checks, the
    batches and the outputs' shapes; a subclass gives `_forward`, the model's outputs of a batch.
    """

    bits_: int
    input_kind_: str
    input_form_: InputForm
    no_embeddings_: str | None = None  # why `outputs` is refused (an image export's graph has none); None: it is not

    @abstractmethod
    def _forward(self, inputs, embedded: bool, batch_size: int | None) -> tuple[np.ndarray, np.ndarray | None]:
        """(real outputs u (n, bits), embeddings (n, d) if `embedded` else None) of one batch: a
        conformed data set, conformed float32 feature rows, or uint8 images (n, H, W, 3).
        batch_size: rows per model call (None: the subclass's own)."""

    def encode(self, X, *, json_numbers: bool = False, batch_size: int | None = None) -> np.ndarray:
        """Packed uint8 codes (n, bits // 8) (lbhash.codes.pack) of the signs of `embed`'s outputs (0 -> +1)."""
        return pack(to_signs(self._run(X, json_numbers, batch_size, "encode")[0], "real outputs"))

    def embed(self, X, *, json_numbers: bool = False, batch_size: int | None = None) -> np.ndarray:
        """float32 real outputs u (n, bits), from the forward pass that gives the codes."""
        return self._run(X, json_numbers, batch_size, "embed")[0]

    def outputs(self, X, *, json_numbers: bool = False, batch_size: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """(float32 real outputs u (n, bits), float32 embeddings (n, d)) from one forward pass:
        the embeddings an index keeps to re-score by (an image model's pooled backbone features,
        a feature model's input features after the input contract)."""
        if self.no_embeddings_ is not None:
            raise InputError(self.no_embeddings_)
        return self._run(X, json_numbers, batch_size, "outputs")

    def identity(self) -> dict | None:
        """The weights the encoder runs, as an index records them (`lbhash index build`:
        {"file", "sha256", "epoch"}); None when unknown (a fit in memory)."""
        return None

    def run_info(self) -> dict | None:
        """The run it came from, for the search page: method, bits, data, quality (metrics)."""
        return None

    def _check_fitted(self, what: str) -> None:
        """An encoder that starts unfitted (HashEncoder) refuses `what` here."""

    def _run(self, X, json_numbers: bool, batch_size: int | None, what: str):
        """(u, embeddings or None) of X, batch by batch, each checked against `_forward`'s contract."""
        self._check_fitted(what)
        embedded, us, embs = what == "outputs", [], []
        for batch in self._batches(X, json_numbers):
            try:
                u, emb = self._forward(batch, embedded, batch_size)
            except ValueError as err:  # lbhash's convention: the input was refused
                raise InputError(one_line(err)) from None
            n = len(batch)
            if u.dtype.kind != "f" or u.shape != (n, self.bits_) or (embedded and (emb.ndim != 2 or len(emb) != n)):
                raise RuntimeError(f"encoder returned real outputs {u.dtype} {u.shape} and embeddings "
                                   f"{None if emb is None else emb.shape}, expected float ({n}, {self.bits_})")
            us.append(u)
            embs.append(emb)
        if len(us) != 1:  # none, or images of several sizes
            us = [np.concatenate(us) if us else np.empty((0, self.bits_), np.float32)]
            embs = [np.concatenate(embs) if embs else np.empty((0, 1), np.float32)] if embedded else [None]
        return us[0], embs[0]

    def _batches(self, X, json_numbers: bool) -> list:
        """X checked and in the model's input form, as `_forward`'s batches: a data set or an array
        whole, a list of images of different sizes one at a time."""
        if isinstance(X, HashDataset):
            return [conform_dataset(self.input_form_, X, X.name)]
        if self.input_kind_ == "images" and isinstance(X, (list, tuple)):
            items = [np.asarray(img) for img in X]
            for i, img in enumerate(items):
                if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                    raise InputError(f"images[{i}] must be uint8 (H, W, 3), got {img.dtype} with shape {img.shape}")
            if items and all(img.shape == items[0].shape for img in items):
                return [as_rgb_images(np.stack(items), "X", "X")]
            return [as_rgb_images(img[None], "X", "X") for img in items]
        arr = dense_array(X, "X")
        if self.input_kind_ == "images":
            return [as_rgb_images(arr, "X", "X")]
        return [conform_features(self.input_form_, arr, "X", json_numbers=json_numbers)]


def dense_array(X, name: str) -> np.ndarray:
    """X as a dense array; a scipy sparse matrix is refused (np.asarray would make an object
    array of one matrix)."""
    sparse = sys.modules.get("scipy.sparse")  # without it imported, X cannot be one of its matrices
    if sparse is not None and sparse.issparse(X):
        raise InputError(f"{name} is a sparse matrix; HashEncoder takes dense arrays ({name}.toarray())")
    return np.asarray(X)
