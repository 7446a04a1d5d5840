"""Hash-code primitives: binarisation, packing, Hamming distances, class centers.

Conventions (README, "Codes"):
- codes in memory are +/-1 arrays of shape (n, bits); `bin(x) = +1 if x >= 0 else -1`;
- codes on disk and in search are packed uint8 of shape (n, ceil(bits / 8)) in the FAISS bit
  layout: bit j is bit (j % 8), least significant first, of byte j // 8;
- Hamming distance = popcount(a XOR b) on packed 64-bit words.
"""

from __future__ import annotations

import sys

import numpy as np

from lbhash.labels import as_multihot
from lbhash.errors import InputError

# Bytes of XOR temporaries that hamming_distance may hold at once.
_CHUNK_BYTES = 64 << 20


def to_signs(x, name: str = "x"):
    """Binarise real outputs: +1 where x >= 0 (0 and -0.0 included), -1 elsewhere, as int8.

    A torch tensor gives an int8 tensor on its own device, unchecked (a NaN gives -1; training
    checks its losses instead, which needs no device sync per step); anything else gives a
    numpy array, and a NaN in it is an InputError naming `name`."""
    torch = sys.modules.get("torch")  # a tensor means torch is loaded: no import for numpy callers
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.where(x >= 0, 1, -1).to(torch.int8)
    arr = np.asarray(x)
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise InputError(f"{name} contains NaN at index {tuple(int(i) for i in np.argwhere(np.isnan(arr))[0])}")
    return np.where(arr >= 0, 1, -1).astype(np.int8)


def packed_width(bits: int) -> int:
    """Bytes per packed code."""
    return (bits + 7) // 8


def pack(codes, name: str = "codes") -> np.ndarray:
    """Pack +/-1 codes (or booleans, True = +1) of shape (n, bits) into uint8 (n, ceil(bits/8))."""
    arr = np.asarray(codes)
    if arr.ndim != 2:
        raise InputError(f"{name} must have shape (n, bits), got {arr.shape}")
    if arr.dtype != bool:
        _check_signs(arr, name)
    return np.packbits(arr > 0, axis=1, bitorder="little")


def unpack(packed, bits: int, name: str = "codes") -> np.ndarray:
    """Inverse of `pack`: uint8 (n, ceil(bits/8)) -> int8 +/-1 codes (n, bits)."""
    arr = _check_packed(np.asarray(packed), bits, name)
    unpacked = np.unpackbits(arr, axis=1, count=bits, bitorder="little")
    return (unpacked.astype(np.int8) << 1) - 1


def as_packed(codes, bits: int | None = None, name: str = "codes") -> tuple[np.ndarray, int]:
    """Accept +/-1 codes, booleans, or packed uint8; return (packed, bits).

    Packed uint8 codes have 8 bits per byte unless `bits` says otherwise (e.g. bits=12 in 2 bytes). Padding bits beyond
    `bits` must be 0 (else the codes were packed for another length), so that they never count in a distance.
    """
    arr = np.asarray(codes)
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (n, bits) or packed (n, bytes), got shape {arr.shape}")
    if arr.dtype == np.uint8:
        bits = 8 * arr.shape[1] if bits is None else bits  # the width decides unless told otherwise
        arr = _check_packed(arr, bits, name)
        if bits % 8:
            padding = arr[:, -1] >> np.uint8(bits % 8)
            if padding.any():
                row = int(np.flatnonzero(padding)[0])
                raise InputError(f"{name}: row {row} has bits set beyond bits={bits} in its last byte "
                                 f"(codes packed for another length?)")
        return np.ascontiguousarray(arr), int(bits)
    if bits is not None and arr.shape[1] != bits:
        raise InputError(f"{name} has {arr.shape[1]} columns but bits={bits}")
    return pack(arr, name), arr.shape[1]


def to_hex(codes) -> list[str]:
    """Packed codes (n, bytes) as hex strings, byte 0 first: how codes travel in JSON (the
    service's requests and answers, its write-ahead log). The one spelling; `from_hex` reads it."""
    return [row.tobytes().hex() for row in np.asarray(codes, np.uint8)]


def from_hex(texts: list[str], bits: int, name: str = "codes") -> np.ndarray:
    """Hex strings (`to_hex`) as packed uint8 codes (n, bits // 8); a string that is not hex or
    not `bits` wide is an InputError naming `name[row]`."""
    width = packed_width(bits)
    out = np.empty((len(texts), width), np.uint8)
    for row, text in enumerate(texts):
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise InputError(f"{name}[{row}] is not a hex string") from None
        if len(raw) != width:
            raise InputError(f"{name}[{row}] has {len(raw)} bytes, but the index holds {bits}-bit codes "
                             f"({2 * width} hex digits)")
        out[row] = np.frombuffer(raw, np.uint8)
    return out


def as_words(packed: np.ndarray) -> np.ndarray:
    """View packed codes as uint64 words (n, ceil(bytes/8)), zero-padded: XOR/popcount layout."""
    n, nbytes = packed.shape
    width = (nbytes + 7) // 8 * 8
    if width != nbytes:
        padded = np.zeros((n, width), dtype=np.uint8)
        padded[:, :nbytes] = packed
        packed = padded
    return np.ascontiguousarray(packed).view("<u8")


def popcount(codes, bits: int | None = None) -> np.ndarray:
    """Number of +1 bits in each code."""
    packed, _ = as_packed(codes, bits)
    return np.bitwise_count(as_words(packed)).sum(axis=1, dtype=np.int64)


def hamming_distance(a, b, bits: int | None = None) -> np.ndarray:
    """All pairwise Hamming distances (len(a), len(b)) as int32: popcount of XOR on 64-bit words, in row
    chunks so that temporaries stay bounded."""
    pa, bits_a = as_packed(a, bits, "a")
    pb, bits_b = as_packed(b, bits, "b")
    if bits_a != bits_b:
        raise InputError(f"a has {bits_a} bits but b has {bits_b}")
    wa, wb = as_words(pa), as_words(pb)
    out = np.empty((len(wa), len(wb)), dtype=np.int32)
    rows = max(1, _CHUNK_BYTES // max(1, wb.nbytes))
    for start in range(0, len(wa), rows):
        x = wa[start:start + rows, None, :] ^ wb[None, :, :]
        out[start:start + rows] = np.bitwise_count(x).sum(axis=2, dtype=np.int32)
    return out


def class_centers(codes, labels, bits: int | None = None, num_classes: int | None = None):
    """Bitwise-majority center of each class (paper Sec. 4), ties -> +1; multi-label items count for every
    label. Returns int8 +/-1 centers (C, bits) and counts[c], the items of class c (a class without
    items gets an all +1 row and count 0)."""
    packed, bits = as_packed(codes, bits)
    onehot = as_multihot(labels, "labels", num_classes)
    if len(onehot) != len(packed):
        raise InputError(f"labels has {len(onehot)} rows but codes has {len(packed)}")
    positives = np.zeros((onehot.shape[1], bits), dtype=np.float64)
    rows = max(1, (16 << 20) // (8 * bits))
    for start in range(0, len(packed), rows):
        ones = np.unpackbits(packed[start:start + rows], axis=1, count=bits, bitorder="little")
        positives += onehot[start:start + rows].T.astype(np.float64) @ ones
    counts = onehot.sum(axis=0).astype(np.int64)
    centers = np.where(2 * positives >= counts[:, None], 1, -1).astype(np.int8)
    return centers, counts


def _check_signs(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind not in "iuf":
        raise InputError(f"{name} must be +/-1 numbers, got dtype {arr.dtype}")
    bad = (arr != 1) & (arr != -1)  # NaN compares unequal, so it is caught here too
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise InputError(
            f"{name} must hold only +1/-1, found {arr[r, c].item()!r} at row {r}, column {c} "
            "(binarise real outputs with lbhash.codes.to_signs, or pass packed uint8 with bits=)"
        )


def _check_packed(arr: np.ndarray, bits: int, name: str) -> np.ndarray:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits <= 0:
        raise InputError(f"bits must be a positive integer, got {bits!r}")
    if arr.dtype != np.uint8 or arr.ndim != 2:
        raise InputError(f"packed {name} must be a 2-D uint8 array, got {arr.dtype} with shape {arr.shape}")
    if arr.shape[1] != packed_width(bits):
        raise InputError(f"packed {name} has {arr.shape[1]} bytes per code, but bits={bits} needs {packed_width(bits)}")
    return arr
