"""Raw inputs (feature vectors or images) through an encoder: `QueryEncoder` makes a search's
`Queries` (what `lbhash search` and the service both search with), and `Searcher` searches a
backend with them."""

from __future__ import annotations

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data import HashDataset
from lbhash.data.image_sources import decode_image
from lbhash.encoders import INPUT_KINDS, Encoder
from lbhash.errors import InputError, one_line
from lbhash.index.backend import Backend, InRange, Reranked, TopK
from lbhash.index.hits import Queries
from lbhash.index.rescore import RESCORE_FACTOR, rescore_search


class QueryEncoder:
    """The encoder that made an index's `bits`-bit codes (a run's torch model or an export).

    `encode`, `embed` and `embeddings` of feature rows, an image batch or a list of images of any
    sizes; `queries(inputs, rescore=...)` the `Queries` of a search in one forward pass;
    `decode_images` turns encoded files (JPEG, PNG, ...) into that list.
    """

    def __init__(self, encoder: Encoder, bits: int):
        kind = getattr(encoder, "input_kind_", None)
        if kind not in INPUT_KINDS:
            raise InputError(f"the encoder's input_kind_ must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
        if int(encoder.bits_) != bits:
            raise InputError(f"the encoder makes {encoder.bits_}-bit codes but the index holds {bits}-bit codes")
        self.encoder, self.bits = encoder, bits

    @property
    def input_kind(self) -> str:
        return self.encoder.input_kind_

    @property
    def gives_embeddings(self) -> bool:
        """Whether the encoder gives embeddings (`outputs`; an image export's graph does not)."""
        return callable(getattr(self.encoder, "outputs", None)) and getattr(self.encoder, "gives_embeddings_", True)

    def encode(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """Packed codes uint8 (n, bits // 8) of feature rows (an array, or a feature data set
        loaded from a file), an image batch, or a list of images of any sizes. Feature rows go
        through the run's input contract (docs/data.md#the-input-contract); json_numbers: they
        came from JSON."""
        parts = [self._codes(batch, json_numbers) for batch in self._batches(inputs)]
        return _joined(parts, np.empty((0, self.bits // 8), np.uint8))

    def embed(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """The encoder's real outputs float32 (n, bits) of the same inputs (codes = their signs)."""
        parts = [self._real(batch, json_numbers) for batch in self._batches(inputs)]
        return _joined(parts, np.empty((0, self.bits), np.float32))

    def embeddings(self, inputs, json_numbers: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(packed codes, embeddings float32 (n, d)) of the inputs, from one forward pass: what an
        index keeping embeddings stores per item, and what a query re-scores with."""
        parts = [self._outputs(batch, json_numbers) for batch in self._batches(inputs)]
        real = _joined([p[0] for p in parts], np.empty((0, self.bits), np.float32))
        emb = _joined([p[1] for p in parts], np.empty((0, 1), np.float32))
        return codes_of(real), emb

    def queries(self, inputs, *, rescore: bool, json_numbers: bool = False) -> Queries:
        """The `Queries` of the inputs: their codes, and (rescore=True) their embeddings, from
        the same forward pass."""
        if not rescore:
            return Queries(self.encode(inputs, json_numbers))
        return Queries(*self.embeddings(inputs, json_numbers))

    def decode_images(self, blobs: list[bytes], names: list[str]) -> list[np.ndarray]:
        """uint8 (H, W, 3) images of encoded image files; `names` appear in errors."""
        if self.input_kind != "images":
            raise InputError("this run encodes feature vectors, not images")
        return [decode_image(blob, name) for blob, name in zip(blobs, names)]

    def _batches(self, inputs) -> list:
        """The inputs, checked, as the batches the encoder takes: feature rows (or a data set)
        and an image batch whole, a list of images of different sizes one at a time."""
        if isinstance(inputs, HashDataset) and inputs.input_kind != self.input_kind:
            raise InputError(f"{inputs.name}: holds {inputs.input_kind}, but the encoder encodes {self.input_kind}")
        if self.input_kind == "features":
            return [inputs if isinstance(inputs, HashDataset) else check_features(inputs)]
        images = check_images(inputs)
        return [img[None] for img in images] if isinstance(images, list) else [images]

    def _codes(self, batch, json_numbers: bool) -> np.ndarray:
        """The encoder's packed codes of a batch, checked against its contract."""
        out = _refusing(self.encoder.encode, batch, json_numbers)
        n, width = len(batch), self.bits // 8
        if out.dtype != np.uint8 or out.shape != (n, width):  # the encoder broke its contract
            raise RuntimeError(f"encoder returned {out.dtype} {out.shape}, expected uint8 ({n}, {width})")
        return out

    def _real(self, batch, json_numbers: bool) -> np.ndarray:
        """The encoder's real outputs of a batch, checked against its contract."""
        out = _refusing(self.encoder.embed, batch, json_numbers)
        n, bits = len(batch), self.bits
        if out.dtype.kind != "f" or out.shape != (n, bits):  # the encoder broke its contract
            raise RuntimeError(f"encoder returned real outputs {out.dtype} {out.shape}, expected float ({n}, {bits})")
        return out


    def _outputs(self, batch, json_numbers: bool) -> tuple[np.ndarray, np.ndarray]:
        """(real outputs, embeddings) of a batch, checked against the encoder's contract."""
        outputs = getattr(self.encoder, "outputs", None)
        if outputs is None:
            raise InputError("this encoder gives no embeddings (an export of an image run keeps only the hash "
                             "outputs): search in Hamming order (--no-rescore, rescore false), or search with --run")
        try:
            real, emb = (np.asarray(a) for a in outputs(batch, json_numbers=json_numbers))
        except ValueError as err:
            raise InputError(one_line(err)) from None
        n = len(batch)
        if real.shape != (n, self.bits) or emb.ndim != 2 or len(emb) != n:  # the encoder broke its contract
            raise RuntimeError(f"encoder returned outputs {real.shape} and embeddings {emb.shape} for {n} inputs")
        return real, emb


def _refusing(method, batch, json_numbers: bool) -> np.ndarray:
    """`method(batch)` as an array; a ValueError (lbhash's convention: the input was refused)
    becomes a one-line InputError."""
    try:
        return np.asarray(method(batch, json_numbers=json_numbers))
    except ValueError as err:
        raise InputError(one_line(err)) from None


def _joined(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """The batches' rows in order: one batch as it is, none as `empty`."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else empty


class Searcher(QueryEncoder):
    """A `Backend` and the encoder that made its codes: searches with raw inputs, returning what
    the backend's own searches return."""

    def __init__(self, index: Backend, encoder: Encoder):
        if not isinstance(index, Backend):
            raise TypeError(f"a Searcher searches a lbhash.index.Backend, not {type(index).__name__}")
        super().__init__(encoder, index.bits)
        self.index = index

    def search(self, inputs, k: int, labels=None) -> TopK:
        """`index.search` of the inputs' codes (re-scored: `rescore_search`)."""
        return self.index.search(self.encode(inputs), k, labels)

    def rescore_search(self, inputs, k: int, labels=None, factor: int = RESCORE_FACTOR) -> Reranked:
        """`lbhash.index.rescore_search` of the inputs: the Hamming top k * factor re-scored by
        their embeddings (one forward pass gives codes and embeddings; docs/search.md)."""
        queries = self.queries(inputs, rescore=True)
        return rescore_search(self.index, queries.codes, k, queries.embeddings, labels, factor)

    def range_search(self, inputs, radius: int, labels=None) -> InRange:
        return self.index.range_search(self.encode(inputs), radius, labels)


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
