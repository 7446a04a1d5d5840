"""CIFAR-10's official python pickles (`data_batch_1..5`, `test_batch`, `batches.meta`), read
with an unpickler that resolves numpy's array reconstruction and nothing else."""

from __future__ import annotations

import io
import pickle

import numpy as np

from lbhash.errors import InputError, one_line

CIFAR_TRAIN = tuple(f"data_batch_{k}" for k in range(1, 6))
CIFAR_FILES = CIFAR_TRAIN + ("test_batch", "batches.meta")


def _latin1_encode(text, encoding="latin1"):
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(str, "latin1"): only that is allowed
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("only _codecs.encode(str, 'latin1') is allowed")
    return text.encode("latin1")


def _allowed_globals() -> dict:
    probe = np.zeros(1, np.uint8)
    reconstruct, frombuffer = probe.__reduce__()[0], probe.__reduce_ex__(5)[0]
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("_codecs", "encode"): _latin1_encode}
    for core in ("numpy.core", "numpy._core"):  # numpy 1 and 2 spell the module differently
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _CifarUnpickler(pickle.Unpickler):
    """Only numpy array reconstruction: never an arbitrary class or function."""

    allowed = _allowed_globals()

    def find_class(self, module, name):
        obj = self.allowed.get((module, name))
        if obj is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return obj


def _unpickle(data: bytes, where: str) -> dict:
    try:
        obj = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as err:  # whatever a malformed pickle raises, never run further
        raise InputError(f"{where}: not a CIFAR-10 python batch ({one_line(err)})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: not a CIFAR-10 python batch (holds {type(obj).__name__}, not a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _get(d: dict, key: str, where: str):
    if key not in d:
        raise InputError(f"{where}: no {key!r} entry (keys: {', '.join(map(str, d))})")
    return d[key]


def read_cifar_batches(read, where):
    """CIFAR-10 python batches through read(name) -> bytes and where(name) -> str.

    Returns pixels (n, 32, 32, 3) uint8, class ids, is_test and class names (train batches
    1..5 first, then test_batch).
    """
    meta = _unpickle(read("batches.meta"), where("batches.meta"))
    names = [n.decode("utf-8") if isinstance(n, bytes) else str(n)
             for n in _get(meta, "label_names", where("batches.meta"))]
    pixels, ids, test = [], [], []
    for batch in CIFAR_FILES[:-1]:
        d, w = _unpickle(read(batch), where(batch)), where(batch)
        data = _get(d, "data", w)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise InputError(f"{w}: 'data' must be a uint8 (N, 3072) array, got "
                             f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
        labels = np.asarray(_get(d, "labels", w))
        if labels.shape != (len(data),) or labels.dtype.kind not in "iu":
            raise InputError(f"{w}: 'labels' must be {len(data)} integers, got shape {labels.shape}")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
            raise InputError(f"{w}: label {int(labels.max())} out of range for {len(names)} class names")
        pixels.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))  # R, G, B planes -> HWC
        ids.append(labels.astype(np.int64))
        test.append(np.full(len(data), batch == "test_batch"))
    return np.ascontiguousarray(np.concatenate(pixels)), np.concatenate(ids), np.concatenate(test), names
