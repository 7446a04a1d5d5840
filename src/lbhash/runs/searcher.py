"""Raw inputs (feature vectors or images) through an encoder: `QueryEncoder` makes a search's
`Queries` (what `lbhash search` and the service both search with), and `Searcher` searches a
backend with them."""

from __future__ import annotations

import numpy as np

from lbhash.codes import pack, to_signs
from lbhash.data.image_sources import decode_image
from lbhash.encoders import INPUT_KINDS, Encoder
from lbhash.errors import InputError
from lbhash.index.backend import Backend, InRange, Reranked, TopK
from lbhash.index.hits import Queries
from lbhash.index.rescore import RESCORE_FACTOR, rescore_search


class QueryEncoder:
    """The encoder that made an index's `bits`-bit codes (a run's torch model or an export).

    `encode`, `embed` and `embeddings` of feature rows, an image batch or a list of images of any
    sizes (the encoder checks them: lbhash.encoders.Encoder); `queries(inputs, rescore=...)` the
    `Queries` of a search in one forward pass; `decode_images` turns encoded files (JPEG, PNG, ...)
    into that list.
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
        return self.encoder.no_embeddings_ is None

    def encode(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """Packed codes uint8 (n, bits // 8) of the inputs; json_numbers: they came from JSON."""
        return self.encoder.encode(inputs, json_numbers=json_numbers)

    def embed(self, inputs, json_numbers: bool = False) -> np.ndarray:
        """The encoder's real outputs float32 (n, bits), whose signs are the codes."""
        return self.encoder.embed(inputs, json_numbers=json_numbers)

    def embeddings(self, inputs, json_numbers: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(packed codes, embeddings float32 (n, d)) of the inputs, from one forward pass."""
        real, emb = self.encoder.outputs(inputs, json_numbers=json_numbers)
        return pack(to_signs(real, "real outputs")), emb

    def queries(self, inputs, *, rescore: bool, json_numbers: bool = False) -> Queries:
        """The `Queries` of the inputs: their codes, and (rescore=True) their embeddings, from one forward pass."""
        if not rescore:
            return Queries(self.encode(inputs, json_numbers))
        return Queries(*self.embeddings(inputs, json_numbers))

    def decode_images(self, blobs: list[bytes], names: list[str]) -> list[np.ndarray]:
        """uint8 (H, W, 3) images of encoded image files; `names` appear in errors."""
        if self.input_kind != "images":
            raise InputError("this run encodes feature vectors, not images")
        return [decode_image(blob, name) for blob, name in zip(blobs, names)]


class Searcher(QueryEncoder):
    """A `Backend` and the encoder that made its codes: searches raw inputs, as the backend's searches return."""

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
