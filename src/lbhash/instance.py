"""Instance codes: a compact binary code of an item's embedding, kept beside its class code so that a
search finds the very picture as well as its class (docs/search.md, "Instance codes").

The class code of a center-based method (CSQ, the paper's `_D`) collapses a class onto one code, so
it cannot tell two photos of a class apart. The instance code keeps what the embedding says about
the item itself: the unit embedding, centred on the training mean, projected on its top principal
directions and rotated to balance the bits (ITQ, Gong and Lazebnik 2011), then signed. The Hamming
distance of two instance codes estimates the angle of the two embeddings.

`InstanceTransform.fit` learns it from embeddings (a run's training items); `apply` gives packed
uint8 codes in the FAISS bit layout; `to_bytes` / `from_bytes` are the file an index keeps
(`instance-transform.npz`, checksummed with the index's other files). Numpy only.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np

from lbhash.codes import pack
from lbhash.errors import InputError

INSTANCE_BITS = 256          # the default length (docs/search.md, "Choosing the defaults": measured on validation items)
MIN_INSTANCE_BITS = 8
MAX_INSTANCE_BITS = 4096
METHODS = ("itq", "pca", "learned")  # ITQ rotation after PCA, the PCA directions alone, or a learned head
FITTED = ("itq", "pca")                # the ones `InstanceTransform.fit` makes
ITQ_ITERATIONS = 50
FILE_NAME = "instance-transform.npz"
# the ranking by both codes (lbhash.index.blend), its defaults chosen on validation items (docs/search.md,
# "Choosing the defaults")
LOOKS_LIKE = 0.85       # from 0 (same class first) to 1 (looks like first), where float rows give the cosine
LOOKS_LIKE_CODES = 0.7  # the same where the two codes alone rank
# a hit is marked the same picture by the threshold calibrated on the index's own photos and kept in its
# metadata under MARK_KEY (lbhash.runs.instance_learning); an index without one marks nothing
MARK_KEY = "same_picture"
MARK_BY = ("instance", "cosine")
_FORMAT = "lbhash-instance-transform-1"
_FORMAT_HEAD = "lbhash-instance-transform-2"  # a learned head's: the arrays of _HEAD besides
_HEAD = ("hidden", "hidden_bias", "bias", "skip")


def mark_rule(metadata: dict | None, cosine: bool = True, where: str = "the index") -> tuple[float, bool]:
    """(threshold, by cosine) of an index's calibrated same-picture mark, as the ranking applies it: a hit is
    marked when its centred cosine is at least the threshold (by cosine), or its instance distance at most
    the threshold times the instance bits; (-1, False) where the index has no calibrated mark. `cosine`:
    whether the search scores by the centred cosine (else a mark calibrated by it gives way to the instance
    distance's, where that one was usable). A record that is not one (a threshold outside 0..1 or not
    finite, an unknown measure) is refused in one line."""
    record = (metadata or {}).get(MARK_KEY)
    if not isinstance(record, dict) or record.get("mark") is None:
        return -1.0, False
    by = record.get("mark")
    if by == "cosine" and not cosine:
        record, by = record.get("instance") or {}, "instance" if (record.get("instance") or {}).get("usable") else None
        if by is None:
            return -1.0, False
    cut = record.get("threshold")
    if by not in MARK_BY or isinstance(cut, bool) or not isinstance(cut, (int, float)) or not np.isfinite(cut) or \
            not 0 < cut <= 1:
        raise InputError(f"{where}: its same-picture mark ({MARK_KEY} in its metadata) is not one this lbhash reads: "
                         f"mark {by!r}, threshold {cut!r} (a number in 0..1); rebuild the index")
    return float(cut), by == "cosine"


def mark_why(metadata: dict | None) -> str | None:
    """Why an index marks no hit the same picture (None: it does)."""
    record = (metadata or {}).get(MARK_KEY)
    if not isinstance(record, dict):
        return "the index was built without a calibrated same-picture mark (rebuild it with `lbhash index build`)"
    return None if record.get("mark") is not None else str(record.get("why") or "no calibrated mark")


def check_instance_bits(bits, dim: int | None = None, name: str = "--instance-bits") -> int:
    """An instance-code length: a multiple of 8 from MIN_INSTANCE_BITS to MAX_INSTANCE_BITS, and at most
    the embedding width `dim` (PCA keeps at most that many directions)."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits % 8 or \
            not MIN_INSTANCE_BITS <= bits <= MAX_INSTANCE_BITS:
        raise InputError(f"{name} must be a multiple of 8 from {MIN_INSTANCE_BITS} to {MAX_INSTANCE_BITS}, got {bits!r}")
    if dim is not None and bits > dim:
        raise InputError(f"{name} {bits} is more than the embeddings' width {dim}: an instance code has at most one "
                         f"bit per dimension; give {name} {dim // 8 * 8} or less")
    return int(bits)


def unit_vectors(x: np.ndarray) -> np.ndarray:
    """Rows of float64 `x` scaled to unit length (a zero row stays zero)."""
    norm = np.sqrt((x * x).sum(axis=1, keepdims=True))
    norm[norm == 0] = 1.0
    return x / norm


def _embeddings(x, dim: int | None, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf" or arr.ndim != 2 or (dim is not None and arr.shape[1] != dim):
        want = f"(n, {dim})" if dim is not None else "(n, d)"
        raise InputError(f"{name} must be a 2-D array of real numbers {want}, got {arr.dtype} with shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        r, c = (int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise InputError(f"{name} holds {arr[r, c]} at row {r}, column {c}; only finite numbers are allowed")
    return arr


@dataclass(frozen=True)
class InstanceTransform:
    """Embedding (n, dim) -> packed instance code (n, bits // 8): x = unit(embedding) - mean, then
    sign(x @ projection) (methods "itq", "pca"), or with a learned head (method "learned",
    lbhash.train.instance_head) sign(relu(x @ hidden + hidden_bias) @ projection + bias)."""

    mean: np.ndarray        # float64 (dim,)
    projection: np.ndarray  # float64 (dim, bits), or (width, bits) after a hidden layer
    method: str
    hidden: np.ndarray | None = None       # float64 (dim, width): the learned head's hidden layer
    hidden_bias: np.ndarray | None = None  # float64 (width,)
    bias: np.ndarray | None = None         # float64 (bits,)
    skip: np.ndarray | None = None         # float64 (dim, bits): the head's linear path

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @property
    def bits(self) -> int:
        return int(self.projection.shape[1])

    @property
    def learned(self) -> bool:
        return self.hidden is not None

    @classmethod
    def from_head(cls, arrays: dict) -> "InstanceTransform":
        """The transform of a learned head's arrays (lbhash.train.instance_head.fit_instance_head)."""
        return cls(*(np.ascontiguousarray(arrays[k], np.float64) for k in ("mean", "projection")), "learned",
                   *(np.ascontiguousarray(arrays[k], np.float64) for k in _HEAD))

    @classmethod
    def fit(cls, embeddings, bits: int = INSTANCE_BITS, method: str = "itq", seed: int = 0) -> "InstanceTransform":
        """Learn the transform from `embeddings` (n, dim), n >= 2: PCA of the centred unit rows, then
        (method "itq") the rotation that minimises the quantisation error, from a random orthogonal start
        (`seed`). Directions beyond the data's rank (n <= bits) are random orthogonal ones."""
        if method not in FITTED:
            raise InputError(f"instance method must be one of {', '.join(FITTED)} (a learned head is trained by "
                             f"lbhash.train.instance_head), got {method!r}")
        x = unit_vectors(_embeddings(embeddings, None, "embeddings"))
        bits = check_instance_bits(bits, x.shape[1])
        if len(x) < 2:
            raise InputError(f"an instance transform is fitted on at least 2 embeddings, got {len(x)}")
        mean = x.mean(axis=0)
        centred = x - mean
        rng = np.random.default_rng(seed)
        # principal directions: right singular vectors (at most min(n, dim) of them)
        _, s, vt = np.linalg.svd(centred, full_matrices=False)
        rank = int((s > s[0] * 1e-9).sum()) if len(s) and s[0] > 0 else 0
        directions = vt[:min(rank, bits)].T
        if directions.shape[1] < bits:  # complete with random directions orthogonal to them
            extra = rng.standard_normal((x.shape[1], bits - directions.shape[1]))
            extra -= directions @ (directions.T @ extra)
            q, _ = np.linalg.qr(extra)
            directions = np.hstack([directions, q])
        projection = directions
        if method == "itq":
            v = centred @ directions
            rotation, _ = np.linalg.qr(rng.standard_normal((bits, bits)))
            for _ in range(ITQ_ITERATIONS):
                b = np.where(v @ rotation >= 0, 1.0, -1.0)
                u, _, wt = np.linalg.svd(v.T @ b)
                rotation = u @ wt
            projection = directions @ rotation
        return cls(mean, np.ascontiguousarray(projection), method)

    def apply(self, embeddings, name: str = "embeddings") -> np.ndarray:
        """Packed uint8 instance codes (n, bits // 8) of `embeddings` (n, dim) (0 -> bit 1, as class codes)."""
        x = unit_vectors(_embeddings(embeddings, self.dim, name)) - self.mean
        if self.learned:
            real = np.maximum(x @ self.hidden + self.hidden_bias, 0.0) @ self.projection + x @ self.skip + self.bias
        else:
            real = x @ self.projection
        return pack(np.where(real >= 0, 1, -1).astype(np.int8))

    def to_bytes(self) -> bytes:
        """The transform as an .npz file's bytes (no pickles)."""
        out = io.BytesIO()
        head = {k: getattr(self, k) for k in _HEAD} if self.learned else {}
        np.savez(out, format=np.array(_FORMAT_HEAD if self.learned else _FORMAT), method=np.array(self.method),
                 mean=self.mean, projection=self.projection, **head)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = FILE_NAME) -> "InstanceTransform":
        """Read `to_bytes`'s file; anything else is one line naming `where`."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                fields = {name: npz[name] for name in ("format", "method", "mean", "projection")}
                learned = str(fields["format"]) == _FORMAT_HEAD
                head = {name: npz[name] for name in _HEAD} if learned else {}
        except (ValueError, OSError, KeyError, EOFError) as err:
            raise InputError(f"{where}: not an instance transform ({err})") from None
        mean, projection, method = fields["mean"], fields["projection"], str(fields["method"])
        width = head["hidden"].shape[1] if learned and head["hidden"].ndim == 2 else len(mean)
        shapes_ok = mean.ndim == 1 and projection.ndim == 2 and projection.shape[0] == width and (not learned or (
            head["hidden"].shape == (len(mean), width) and head["hidden_bias"].shape == (width,)
            and head["bias"].shape == (projection.shape[1],) and head["skip"].shape == (len(mean), projection.shape[1])))
        arrays = (mean, projection, *head.values())
        if str(fields["format"]) not in (_FORMAT, _FORMAT_HEAD) or method not in METHODS or \
                (method == "learned") != learned or any(a.dtype != np.float64 for a in arrays) or not shapes_ok or \
                not all(np.isfinite(a).all() for a in arrays):
            raise InputError(f"{where}: not an instance transform of this lbhash (format {str(fields['format'])!r}, "
                             f"method {method!r}, mean {mean.dtype} {mean.shape}, projection {projection.dtype} "
                             f"{projection.shape}{', a head that does not fit them or is not finite' if learned else ''})")
        # (a learned head may give more bits than the embedding's width; a projection cannot)
        check_instance_bits(projection.shape[1], None if learned else len(mean), f"{where}: its length")
        return cls(mean, projection, method, *head.values())

    def digest(self) -> str:
        """SHA-256 of the method and arrays (not of `to_bytes`, whose zip entries carry a time): the
        transform's identity."""
        h = hashlib.sha256(self.method.encode())
        for arr in (self.mean, self.projection, *((getattr(self, k) for k in _HEAD) if self.learned else ())):
            h.update(repr(arr.shape).encode())
            h.update(np.ascontiguousarray(arr, "<f8").tobytes())
        return h.hexdigest()
