"""A run's input contract: the raw form of the data it trained on, and the one rule that turns
new inputs into the model's input (docs/data.md#the-input-contract).

Training records an `InputForm` in the run (input.json); every path that encodes (lbhash
encode, lbhash search, the service, Searcher, HashEncoder.encode) calls `conform_features`
or `conform_images`, so rows in the training data's stored form give exactly the codes the
run stored for those items.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lbhash.arrays import as_float32, first_nonfinite
from lbhash.data.features import ArrayDataset, dequantize_values
from lbhash.errors import InputError

FORM_FORMAT = "lbhash-input/1"
NORM_ROWS = 10_000  # training rows whose median length a run records
SCALE_FACTOR = 3.0  # feature rows whose median length is this many times off the training's draw a warning


@dataclass(frozen=True)
class InputForm:
    kind: str                                # "features" or "images"
    dtype: str | None                        # stored dtype of the training inputs (None: unknown, older runs)
    width: int | None = None                 # features per item
    quantization: tuple[float, float] | None = None   # (scale, zero_point): feature = (stored - zp) * scale
    normalize: str | None = None             # what the model does to features first ("zscore")
    image_size: int | None = None            # side of the images the model sees
    channels: int | None = None              # 3: RGB
    row_norm: float | None = None            # the training features' median row length (None: older runs)

    def to_dict(self) -> dict:
        out = {"format": FORM_FORMAT, **asdict(self)}
        out["quantization"] = None if self.quantization is None else list(self.quantization)
        return out

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "InputForm":
        try:
            if values.get("format") != FORM_FORMAT:
                raise ValueError(f"format {values.get('format')!r}")
            quant = values.get("quantization")
            form = cls(kind=values["kind"], dtype=values["dtype"], width=values.get("width"),
                       quantization=None if quant is None else (float(quant[0]), float(quant[1])),
                       normalize=values.get("normalize"), image_size=values.get("image_size"),
                       channels=values.get("channels"), row_norm=values.get("row_norm"))
            if form.kind not in ("features", "images") or (form.kind == "features" and not form.width):
                raise ValueError(f"kind {form.kind!r}, width {form.width!r}")
            if form.dtype is not None:
                np.dtype(form.dtype)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise InputError(f"{where}: not a readable input contract ({err})") from None
        return form

    def describe(self) -> str:
        if self.kind == "images":
            return f"uint8 RGB images -> {self.image_size}x{self.image_size} model input"
        stored = f"{self.dtype or 'float'} features, {self.width} per item"
        if self.quantization is not None:
            stored += f", dequantized as (x - {self.quantization[1]:g}) * {self.quantization[0]:g}"
        return stored


def form_of(dataset, normalize: str | None, image_size: int | None) -> InputForm:
    """The input form of a training data set."""
    if dataset.input_kind == "images":
        return InputForm("images", "uint8", image_size=image_size, channels=3)
    rows = np.asarray(dataset.x[:NORM_ROWS], np.float64)  # (the first rows: a deterministic sample)
    norm = float(np.median(np.linalg.norm(rows, axis=1))) if len(rows) else 0.0
    return InputForm("features", getattr(dataset, "raw_dtype", "float32"), dataset.input_dim(),
                     getattr(dataset, "quantization", None), normalize, row_norm=norm if norm > 0 else None)


def conform_features(form: InputForm, x, where: str, raw_dtype: str | None = None,
                     quantization: tuple[float, float] | None = None, json_numbers: bool = False) -> np.ndarray:
    """float32 model input (n, width) of feature rows `x`: stored values of dtype `raw_dtype` (default x's),
    dequantised by `quantization` when a file gave its own. json_numbers: integers from JSON (no dtype),
    which a float run takes as values."""
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.dtype.kind not in "biuf" or 0 in arr.shape:
        raise InputError(f"{where}: features must be a non-empty 2-D array of numbers (n, d), "
                         f"got {arr.dtype} with shape {arr.shape}")
    if arr.shape[1] != form.width:
        raise InputError(f"{where}: {arr.shape[1]} features per row, but the run was trained on {form.width}")
    raw = np.dtype(raw_dtype or arr.dtype)
    stored = quantization is None and raw.kind in "biu"
    if stored and form.quantization is not None:
        _check_stored_range(form, arr, where)
        return _finite(dequantize_values(arr, form.quantization), where)
    if stored and not json_numbers and form.dtype is not None and np.dtype(form.dtype).kind == "f":
        raise InputError(f"{where}: {raw} values, but the run was trained on {form.dtype} features; quantised "
                         "rows need their scale first ((x - zero_point) * scale), and values on the training "
                         "scale go in as floats (x.astype(np.float32))")
    out = _finite(as_float32(arr), where)
    if form.quantization is not None:
        _check_feature_range(form, out, where)
    _check_scale(form, out, where)
    return out


def _check_scale(form: InputForm, x: np.ndarray, where: str) -> None:
    """A warning where the rows' median length is more than SCALE_FACTOR times off the training features'
    (queries scaled 0..1 for a run trained on 0..6 found the wrong items, silently)."""
    if form.row_norm is None:
        return
    norm = float(np.median(np.linalg.norm(x.astype(np.float64), axis=1)))
    if not form.row_norm / SCALE_FACTOR <= norm <= form.row_norm * SCALE_FACTOR:
        import warnings

        from lbhash.errors import LbhashWarning

        warnings.warn(f"{where}: the rows' median length is {norm:.3g}, the training features' {form.row_norm:.3g}: "
                      "are they on the training data's scale? (the codes of rows on another scale are not the "
                      "codes of the same items)", LbhashWarning, stacklevel=3)


def conform_dataset(form: InputForm, dataset, where: str):
    """A loaded data set in the run's model input (feature sets by `conform_features`)."""
    if dataset.input_kind != form.kind:
        raise InputError(f"{where}: holds {dataset.input_kind}, but the run encodes {form.kind}")
    if form.kind == "images":
        return dataset
    x = conform_features(form, dataset.x, where, dataset.raw_dtype, dataset.quantization)
    return ArrayDataset(x, dataset.labels, dataset.is_test, dataset.name, dataset.class_names)


def _finite(x: np.ndarray, where: str) -> np.ndarray:
    bad = first_nonfinite(x)
    if bad is not None:
        r, c = bad
        raise InputError(f"{where}: holds {x[r, c]} at row {r}, column {c}; only finite numbers are allowed")
    return x


def _stored_range(form: InputForm) -> tuple[float, float]:
    dtype = np.dtype(form.dtype)
    if dtype.kind in "iu":
        return float(np.iinfo(dtype).min), float(np.iinfo(dtype).max)
    return -np.inf, np.inf


def _check_stored_range(form: InputForm, arr: np.ndarray, where: str) -> None:
    lo, hi = _stored_range(form)
    low, high = arr.min(), arr.max()
    if low < lo or high > hi:
        raise InputError(f"{where}: stored values {low}..{high} lie outside the {form.dtype} range {lo:g}..{hi:g} "
                         "of the run's quantised features")


def _check_feature_range(form: InputForm, x: np.ndarray, where: str) -> None:
    scale, zero_point = form.quantization
    lo, hi = ((v - zero_point) * scale for v in _stored_range(form))
    slack = scale / 2  # rounding of a value that the quantisation represents
    low, high = float(x.min()), float(x.max())
    if low < lo - slack or high > hi + slack:
        raise InputError(f"{where}: feature values {low:g}..{high:g} lie outside {lo:g}..{hi:g}, all that the run's "
                         f"{form.dtype} features dequantised as (x - {zero_point:g}) * {scale:g} can hold; pass the "
                         f"rows as stored ({form.dtype}) or dequantise them with that rule")
