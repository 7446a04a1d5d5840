"""What turns inputs into codes: the `Encoder` interface, and the exported encoder (ONNX
Runtime and numpy, no torch: lbhash.encoders.exported).

Implementations: a run's torch model (`lbhash.runs.encoder.RunEncoder`, `HashEncoder`) and an
export (`ExportedEncoder`). This module imports nothing heavy, so that a layer may name the
interface without loading a model's stack.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

INPUT_KINDS = ("features", "images")


@runtime_checkable
class Encoder(Protocol):
    """Inputs -> codes, and the real outputs whose signs are the codes.

    `bits_`: code length; `input_kind_`: "features" (X float or integer rows (n, d), through the
    run's input contract, docs/data.md#the-input-contract) or "images" (uint8 (n, H, W, 3), any
    size: resized by the run's transform). X may also be a data set loaded from a file
    (lbhash.data.load_data). json_numbers: the rows came from JSON, whose integers a run trained
    on float features takes as values. Bad input raises a one-line lbhash.errors.InputError.
    """

    bits_: int
    input_kind_: str

    def encode(self, X, *, json_numbers: bool = False) -> Any:
        """Packed uint8 codes (n, bits // 8), FAISS bit layout (lbhash.codes.pack)."""

    def embed(self, X, *, json_numbers: bool = False) -> Any:
        """float32 real outputs u (n, bits) of the model, from the same forward pass as the
        codes: `encode(X) == pack(to_signs(embed(X)))` (0 -> +1)."""

    def outputs(self, X, *, json_numbers: bool = False) -> Any:
        """(float32 real outputs u (n, bits), float32 embeddings (n, d)) from one forward pass:
        the embeddings an index keeps to re-score by (an image model's pooled backbone features,
        a feature model's input features after the input contract). Optional: an encoder without
        it searches in Hamming order only."""

    def identity(self) -> dict | None:
        """The weights the encoder runs, as an index records them (`lbhash index build`:
        {"file", "sha256", "epoch"}); None when unknown (a fit in memory)."""

    def run_info(self) -> dict | None:
        """The run it came from, for the search page: method, bits, data, quality (metrics)."""
