"""Instance codes: a compact binary code of an item's embedding, kept beside its class code so that a
search finds the very picture as well as its class (docs/instance-codes.md, "Instance codes"), and the same-picture
mark that an index calibrates on its own photos (`mark_rule`).

The class code of a center-based method (CSQ, the paper's `_D`) collapses a class onto one code, so
it cannot tell two photos of a class apart. The instance code keeps what the embedding says about
the item itself: the unit embedding, centred on the training mean, projected on its top principal
directions and rotated to balance the bits (ITQ, Gong and Lazebnik 2011), then signed. The Hamming
distance of two instance codes estimates the angle of the two embeddings. A learned code (`learn`)
first whitens the embedding by what edits do to it, learned from edited copies of the photos, so that
a copy's code stays near its photo's where the raw embedding moves (grayscale, a frame). A perceptual
transform (`with_perceptual`) keeps its first bits and gives the rest to a photo's perceptual hashes
(lbhash.data.perceptual.perceptual_codes, passed to `apply`), which barely move where the embedding moves
most (JPEG, colour, grayscale); an index of photos without float rows keeps such a code (docs/results/copies.md).

`InstanceTransform.fit` fits it on embeddings (a run's training items), `learn` on embeddings and their
copies' (lbhash.indexes.instance_learning); `apply` gives packed
uint8 codes in the FAISS bit layout; `to_bytes` / `from_bytes` are the file an index keeps
(`instance-transform.npz`, checksummed with the index's other files). Numpy only.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lbhash.codes import hamming_distance, pack
from lbhash.errors import InputError

INSTANCE_BITS = 256          # the default length (docs/duplicates.md, "Choosing the defaults": measured on validation items)
MIN_INSTANCE_BITS = 8
MAX_INSTANCE_BITS = 4096
METHODS = ("itq", "pca", "learned")  # ITQ rotation after PCA, the PCA directions alone, or learned from copies
FITTED = ("itq", "pca")                # the ones `InstanceTransform.fit` makes (`learn` makes "learned")
COPY_SHRINK = 0.01  # the copies' covariance is regularised by this share of its largest eigenvalue (validation)
FLOAT_DIMS = 1280   # a learned transform's float rows: the whitened space's top directions (validation)
ITQ_ITERATIONS = 50
FILE_NAME = "instance-transform.npz"
# the ranking by both codes (lbhash.index.blend), its defaults chosen on validation items (docs/duplicates.md,
# "Choosing the defaults")
LOOKS_LIKE = 0.85       # from 0 (same class first) to 1 (looks like first), where float rows give the cosine
LOOKS_LIKE_CODES = 0.7  # the same where the two codes alone rank, for a query whose look-alikes share its class code
# ... raised towards LOOKS_LIKE_APART, query by query, as its AGREEING nearest items by instance code share its
# class code less (within a share CLASS_NEAR of the class bits): a query of a class the run never saw (its
# look-alikes land under several class codes) is ranked by its look (validation: docs/search.md, "Unseen classes")
LOOKS_LIKE_APART = 0.95
AGREEING = 20
CLASS_NEAR = 1 / 8
# float rows in a learned transform's space (the cosine of copies spreads lower): the least value at which the
# originals of validation copies come first for 98% under every edit, class P@10 above the Hamming order's
# (docs/results/copies.md, "Frozen Lite0 with the hidden layer")
LOOKS_LIKE_LEARNED = 0.98
# the two codes alone where the instance code is a learned one: fixed, not raised query by query (the raise to
# 0.9-0.95 put class P@10 below the Hamming order's), the least value at which 93% of the validation copies
# find their original first under every edit (docs/results/copies.md, "Frozen Lite0 with the hidden layer")
LOOKS_LIKE_CODES_LEARNED = 0.85
RECORD_KEY = "instance"  # an index's metadata: its transform's record (method, bits, SHA-256, what it was made from)
# a hit is marked the same picture by the threshold calibrated on the index's own photos and kept in its
# metadata under MARK_KEY (lbhash.indexes.instance_learning); an index without one marks nothing
MARK_KEY = "same_picture"
# the measures a mark is calibrated by; "margin_or_instance": a hit passes the margin's threshold or the instance
# distance's (each calibrated to let no other photo's copy pass: docs/results/copies.md, "The mark by either")
MARK_BY = ("instance", "cosine", "margin", "margin_or_instance")
MARGIN_MARKS = ("margin", "margin_or_instance")  # the marks that read a query's MARK_CANDIDATES
# an index whose instance code ends in perceptual hashes also marks a hit whose hashes are near the query's: the
# least distance of any query hash to any of the hit's at most the record's `perceptual_threshold` x HASH_BITS
# (calibrated as the others: docs/results/copies.md, "The mark by the perceptual hashes too")
HASH_BITS = 64  # each perceptual hash's bits (lbhash.data.perceptual.BITS)
# the hashes lbhash.data.perceptual.perceptual_codes writes, named in a perceptual transform's file: one made with
# other hashes (before the trimmed one faced one way) is refused, since queries' hashes would not match its items'
PERCEPTUAL_KIND = "phash,facing-trimmed-phash"
# a margin mark: the hit's centred cosine less the query's MARK_NEIGHBOUR-th best other candidate's (a copy stands
# out of the query's neighbours; a look-alike in a crowded part of the space does not: the score normalisation of
# copy detection, SSCD), over at least MARK_CANDIDATES candidates by instance code, as the calibration measures it
MARK_NEIGHBOUR = 2
MARK_CANDIDATES = 40
_FORMAT = "lbhash-instance-transform-1"


def _principal(centred: np.ndarray, bits: int, rng: np.random.Generator) -> np.ndarray:
    """The top `bits` principal directions (dim, bits) of `centred` rows (at most their rank), completed by
    random directions orthogonal to them. Many rows (more than twice the width): the eigenvectors of their
    d x d scatter matrix, n d^2 work instead of an SVD of the rows (15 s -> 2 s for 50,000 x 1,024); each
    direction's sign fixed by its largest component (an SVD's signs are arbitrary too)."""
    n, dim = centred.shape
    if n > 2 * dim:
        values, vectors = np.linalg.eigh(centred.T @ centred)
        order = np.argsort(values)[::-1]
        s, vt = np.sqrt(np.maximum(values[order], 0.0)), vectors[:, order].T
        tiny = 1e-6  # (the scatter matrix squares the rows' condition: its small eigenvalues are rounding)
    else:
        _, s, vt = np.linalg.svd(centred, full_matrices=False)
        tiny = 1e-9
    rank = int((s > s[0] * tiny).sum()) if len(s) and s[0] > 0 else 0
    directions = vt[:min(rank, bits)].T
    directions = directions * np.where(directions[np.abs(directions).argmax(axis=0), np.arange(directions.shape[1])]
                                       < 0, -1.0, 1.0)
    if directions.shape[1] < bits:
        extra = rng.standard_normal((centred.shape[1], bits - directions.shape[1]))
        extra -= directions @ (directions.T @ extra)
        q, _ = np.linalg.qr(extra)
        directions = np.hstack([directions, q])
    return directions


def _itq(centred: np.ndarray, directions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The rotation (bits, bits) that minimises the quantisation error of `centred @ directions` (ITQ, from a
    random orthogonal start). (lbhash.indexes.instance_codes.fit_transform fits on at most 20,000 rows.)"""
    bits = directions.shape[1]
    rotation, _ = np.linalg.qr(rng.standard_normal((bits, bits)))
    v = (centred @ directions).astype(np.float32)  # (the products in float32: twice as fast, the same signs)
    for _ in range(ITQ_ITERATIONS):
        b = np.where(v @ rotation.astype(np.float32) >= 0, 1.0, -1.0).astype(np.float32)
        u, _, wt = np.linalg.svd((v.T @ b).astype(np.float64))
        rotation = u @ wt
    return rotation


def learned_index(metadata: dict | None) -> bool:
    """Whether an index's instance transform is a learned one (its metadata's record says so)."""
    record = (metadata or {}).get(RECORD_KEY)
    return isinstance(record, dict) and record.get("method") == "learned"


class Mark(NamedTuple):
    """An index's same-picture mark as a search applies it (`mark_rule`)."""

    threshold: float  # -1: no mark
    by: str | None    # one of MARK_BY
    instance_threshold: float = -1.0  # "margin_or_instance": the instance distance's, a share of the bits
    perceptual_threshold: float = -1.0  # where the code ends in perceptual hashes: theirs, a share of HASH_BITS
    perceptual_bits: int = 0  # the code's last bits that are perceptual hashes (HASH_BITS each)


NO_MARK = Mark(-1.0, None)


def mark_rule(metadata: dict | None, cosine: bool = True, where: str = "the index",
              filtered: bool = False) -> Mark:
    """An index's calibrated same-picture mark as the ranking applies it: a hit is marked when its centred
    cosine is at least the threshold ("cosine"), its cosine less the query's MARK_NEIGHBOUR-th best other
    candidate's is ("margin"), its instance distance is at most the threshold times the instance bits
    ("instance"), or either of the last two holds, each at its own threshold ("margin_or_instance"); NO_MARK
    where the index has no calibrated mark. `cosine`: whether the search scores by the centred cosine;
    `filtered`: whether it reads only some items (query labels: a query's neighbours among them are not the
    ones the margin was calibrated on). Where the search cannot apply the index's measure, the next the
    calibration found usable (margin, then cosine, then instance) marks. Where the record has a
    `perceptual_threshold`, a hit whose perceptual hashes pass it is marked too, whatever the measure. A record
    that is not one (a threshold outside 0..1 or not finite, an unknown measure) is refused in one line."""
    record = (metadata or {}).get(MARK_KEY)
    if not isinstance(record, dict) or record.get("mark") is None:
        return NO_MARK
    perceptual = _perceptual_part(record, where)
    by = record.get("mark")
    if by not in MARK_BY:
        raise InputError(f"{where}: its same-picture mark ({MARK_KEY} in its metadata) is not one this lbhash reads: "
                         f"mark {by!r} (one of {', '.join(MARK_BY)}); rebuild the index")
    margin = cosine and not filtered
    applies = {"instance": True, "cosine": cosine, "margin": margin, "margin_or_instance": margin}
    if not applies[by]:
        by = next((m for m in MARK_BY[MARK_BY.index(by)::-1] if applies[m] and (record.get(m) or {}).get("usable")),
                  None)
        if by is None:
            return Mark(-1.0, None, -1.0, *perceptual) if perceptual[1] else NO_MARK
        record = record[by]
    keys = ("threshold", "instance_threshold") if by == "margin_or_instance" else ("threshold",)
    cuts = [_share(record.get(key), where, by, key) for key in keys]
    return Mark(cuts[0], by, cuts[1] if len(cuts) > 1 else -1.0, *perceptual)


def _share(cut, where: str, by: str, key: str) -> float:
    """A mark record's threshold: a number in (0, 1], else refused in one line."""
    if isinstance(cut, bool) or not isinstance(cut, (int, float)) or not np.isfinite(cut) or not 0 < cut <= 1:
        raise InputError(f"{where}: its same-picture mark ({MARK_KEY} in its metadata) is not one this lbhash "
                         f"reads: mark {by!r}, {key} {cut!r} (a number in 0..1); rebuild the index")
    return float(cut)


def _perceptual_part(record: dict, where: str) -> tuple[float, int]:
    """(perceptual_threshold, perceptual_bits) of a mark record; (-1, 0) where it has none."""
    if record.get("perceptual_threshold") is None:
        return -1.0, 0
    bits = record.get("perceptual_bits")
    if isinstance(bits, bool) or not isinstance(bits, int) or bits <= 0 or bits % HASH_BITS:
        raise InputError(f"{where}: its same-picture mark ({MARK_KEY} in its metadata) is not one this lbhash reads: "
                         f"perceptual_bits {bits!r} (a positive multiple of {HASH_BITS}); rebuild the index")
    return _share(record["perceptual_threshold"], where, record.get("mark"), "perceptual_threshold"), bits


def perceptual_distances(a: np.ndarray, b: np.ndarray, perceptual_bits: int, paired: bool = False) -> np.ndarray:
    """The least Hamming distance of any perceptual hash of packed codes `a` to any of `b`'s (the codes' last
    `perceptual_bits`, HASH_BITS a hash; every pair of hashes, so the distance is symmetric and a framed
    copy's trimmed hash meets its photo's own): all pairs of rows (len(a), len(b)), or `paired` rows (len(a),)."""
    starts = range(a.shape[1] - perceptual_bits // 8, a.shape[1], HASH_BITS // 8)
    hashes_a, hashes_b = ([np.ascontiguousarray(x[:, s:s + HASH_BITS // 8]) for s in starts] for x in (a, b))
    out = None
    for ha in hashes_a:
        for hb in hashes_b:
            d = np.unpackbits(ha ^ hb, axis=1).sum(axis=1) if paired else hamming_distance(ha, hb, HASH_BITS)
            out = d if out is None else np.minimum(out, d)
    return out


def mark_why(metadata: dict | None) -> str | None:
    """Why an index marks no hit the same picture (None: it does)."""
    record = (metadata or {}).get(MARK_KEY)
    if not isinstance(record, dict):
        return "the index was built without a calibrated same-picture mark (rebuild it with `lbhash index build`)"
    return None if record.get("mark") is not None else str(record.get("why") or "no calibrated mark")


def mark_summary(metadata: dict | None) -> dict:
    """The same-picture mark as `lbhash index info` and `/about` show it: the measure and threshold, what
    it did on the calibration copies, or why there is none (the photos it was calibrated on left out)."""
    record = (metadata or {}).get(MARK_KEY)
    why = mark_why(metadata)
    if why is not None:
        return {"mark": None, "why": why}
    keep = ("mark", "threshold", "instance_threshold", "perceptual_threshold", "recall", "false_marks", "copies",
            "photos", "edits", "false_mark_rate")
    return {k: record[k] for k in keep if k in record}


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
    """Embedding (n, dim) -> packed instance code (n, bits // 8): sign((unit(x) - mean) @ projection), then
    where it has `perceptual_bits`, the photos' packed perceptual hashes given to `apply`; and where it has a
    `float_map` (a learned transform), the float rows an index keeps and its cosine scores:
    (unit(x) - mean) @ float_map (`rows`)."""

    mean: np.ndarray        # float64 (dim,)
    projection: np.ndarray  # float64 (dim, bits - perceptual_bits)
    method: str
    float_map: np.ndarray | None = None  # float64 (dim, r): the whitened space's top r directions
    perceptual_bits: int = 0  # the code's last bits: the photo's perceptual hashes (a multiple of 8)

    @property
    def maps_floats(self) -> bool:
        """Whether the index's float rows are this transform's `rows` (else the embeddings as they come)."""
        return self.float_map is not None

    def rows(self, embeddings, name: str = "embeddings") -> np.ndarray:
        """The float rows an index keeps of `embeddings` (n, dim) and the queries' rows its cosine scores:
        float32 (n, r) unit rows of (unit(x) - mean) @ float_map (a transform without one: the embeddings)."""
        if self.float_map is None:
            return embeddings
        x = unit_vectors(_embeddings(embeddings, self.dim, name))
        return unit_vectors((x - self.mean) @ self.float_map).astype(np.float32)

    @property
    def dim(self) -> int:
        return int(self.projection.shape[0])

    @property
    def bits(self) -> int:
        return int(self.projection.shape[1]) + self.perceptual_bits

    def with_perceptual(self, bits: int) -> "InstanceTransform":
        """The transform of codes as long as this one's whose last `bits` (a multiple of 8, fewer than its
        own) are the photos' perceptual hashes: its projection keeps its first directions."""
        if self.perceptual_bits or bits % 8 or not 0 < bits < self.bits:
            raise InputError(f"a perceptual code's hash bits are a multiple of 8 below the code's {self.bits} bits "
                             f"(of a transform without them), got {bits}")
        return InstanceTransform(self.mean, np.ascontiguousarray(self.projection[:, :self.bits - bits]), self.method,
                                 self.float_map, bits)

    @classmethod
    def fit(cls, embeddings, bits: int = INSTANCE_BITS, method: str = "itq", seed: int = 0) -> "InstanceTransform":
        """Learn the transform from `embeddings` (n, dim), n >= 2: PCA of the centred unit rows, then
        (method "itq") the rotation that minimises the quantisation error, from a random orthogonal start
        (`seed`). Directions beyond the data's rank (n <= bits) are random orthogonal ones."""
        if method not in FITTED:
            raise InputError(f"instance method must be one of {', '.join(FITTED)} (InstanceTransform.learn makes "
                             f"the learned one), got {method!r}")
        x = unit_vectors(_embeddings(embeddings, None, "embeddings"))
        bits = check_instance_bits(bits, x.shape[1])
        if len(x) < 2:
            raise InputError(f"an instance transform is fitted on at least 2 embeddings, got {len(x)}")
        mean = x.mean(axis=0)
        rng = np.random.default_rng(seed)
        directions = _principal(x - mean, bits, rng)
        projection = directions @ _itq(x - mean, directions, rng) if method == "itq" else directions
        return cls(mean, np.ascontiguousarray(projection), method)

    @classmethod
    def learn(cls, embeddings, copies, owners, bits: int = INSTANCE_BITS, seed: int = 0) -> "InstanceTransform":
        """The learned transform (method "learned"): from photos' `embeddings` (n, dim) and the embeddings of
        their edited `copies` (m, dim), `owners` (m,) the row of `embeddings` each copy is of. Learned
        whitening from matching pairs (Radenovic, Tolias and Chum 2016; the copy-detection descriptors'
        whitening of SSCD, Pizzi et al. 2022): the centred unit rows are whitened by the covariance of the
        differences between each copy and its photo (what edits do to an embedding: its directions shrink,
        regularised by COPY_SHRINK of its largest eigenvalue), the photos' top `bits` principal directions
        taken in that space, and the ITQ rotation balances the bits: the directions along which photos differ
        much and their copies little. The index's float rows are the photos in that space too (its top
        FLOAT_DIMS directions, `rows`), so that the ranking's cosine sees what the code sees. Numpy only,
        closed form."""
        x = unit_vectors(_embeddings(embeddings, None, "embeddings"))
        y = unit_vectors(_embeddings(copies, x.shape[1], "copies"))
        owners = np.asarray(owners)
        bits = check_instance_bits(bits, x.shape[1])
        if len(x) < 2 or owners.shape != (len(y),) or owners.dtype.kind not in "iu" or not len(y) or \
                owners.min() < 0 or owners.max() >= len(x):
            raise InputError(f"a learned instance transform needs 2 or more embeddings and copies each naming its "
                             f"embedding's row, got {len(x)} embeddings, {len(y)} copies, owners {owners.shape}")
        mean = x.mean(axis=0)
        diff = y - x[owners]
        values, vectors = np.linalg.eigh(diff.T @ diff / len(diff))
        shrink = max(float(values[-1]), 1e-12) * COPY_SHRINK
        whiten = (vectors / np.sqrt(np.maximum(values, 0) + shrink)) @ vectors.T
        rng = np.random.default_rng(seed)
        white = (x - mean) @ whiten
        top = _principal(white - white.mean(axis=0), max(bits, min(FLOAT_DIMS, x.shape[1])), rng)
        directions = whiten @ top[:, :bits]
        projection = directions @ _itq(x - mean, directions, rng)
        float_map = whiten @ top[:, :min(FLOAT_DIMS, x.shape[1])]
        return cls(mean, np.ascontiguousarray(projection), "learned", np.ascontiguousarray(float_map))

    def apply(self, embeddings, name: str = "embeddings", perceptual=None) -> np.ndarray:
        """Packed uint8 instance codes (n, bits // 8) of `embeddings` (n, dim) (0 -> bit 1, as class codes), and
        where the transform has perceptual bits, the same photos' packed hashes `perceptual` (n, those bits // 8)
        after them."""
        x = unit_vectors(_embeddings(embeddings, self.dim, name))
        real = (x - self.mean) @ self.projection
        codes = pack(np.where(real >= 0, 1, -1).astype(np.int8))
        if not self.perceptual_bits:
            return codes
        hashes = None if perceptual is None else np.asarray(perceptual)
        if hashes is None or hashes.dtype != np.uint8 or hashes.shape != (len(x), self.perceptual_bits // 8):
            got = "none" if hashes is None else f"{hashes.dtype} {hashes.shape}"
            raise InputError(f"{name}: the index's instance code keeps {self.perceptual_bits} bits of each photo's "
                             f"perceptual hashes, made from its pixels: give photos (got {got} hashes for "
                             f"{len(x)} rows)")
        return np.ascontiguousarray(np.hstack([codes, hashes]))

    def to_bytes(self) -> bytes:
        """The transform as an .npz file's bytes (no pickles)."""
        out = io.BytesIO()
        extra = {} if self.float_map is None else {"float_map": self.float_map}
        if self.perceptual_bits:
            extra["perceptual_bits"] = np.array(self.perceptual_bits, np.int64)
            extra["perceptual_kind"] = np.array(PERCEPTUAL_KIND)
        np.savez(out, format=np.array(_FORMAT), method=np.array(self.method), mean=self.mean,
                 projection=self.projection, **extra)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = FILE_NAME) -> "InstanceTransform":
        """Read `to_bytes`'s file; anything else is one line naming `where`."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                fields = {name: npz[name] for name in ("format", "method", "mean", "projection")}
                float_map = npz["float_map"] if "float_map" in npz.files else None  # (learned transforms)
                hashes = npz["perceptual_bits"] if "perceptual_bits" in npz.files else np.array(0, np.int64)
                kind = str(npz["perceptual_kind"]) if "perceptual_kind" in npz.files else "phash,trimmed-phash"
        except (ValueError, OSError, KeyError, EOFError) as err:
            raise InputError(f"{where}: not an instance transform ({err})") from None
        mean, projection, method = fields["mean"], fields["projection"], str(fields["method"])
        mapped_ok = float_map is None or (float_map.dtype == np.float64 and float_map.ndim == 2 and
                                          float_map.shape[0] == len(mean) and float_map.shape[1] >= 1 and
                                          np.isfinite(float_map).all())
        if str(fields["format"]) != _FORMAT or method not in METHODS or mean.dtype != np.float64 or \
                projection.dtype != np.float64 or mean.ndim != 1 or projection.ndim != 2 or not mapped_ok or \
                projection.shape[0] != len(mean) or not np.isfinite(projection).all() or not np.isfinite(mean).all():
            shape = "" if float_map is None else f", float map {float_map.dtype} {float_map.shape}"
            raise InputError(f"{where}: not an instance transform of this lbhash (format {str(fields['format'])!r}, "
                             f"method {method!r}, mean {mean.dtype} {mean.shape}, projection {projection.dtype} "
                             f"{projection.shape}{shape})")
        if hashes.dtype != np.int64 or hashes.shape != () or int(hashes) < 0 or int(hashes) % 8:
            raise InputError(f"{where}: not an instance transform of this lbhash (perceptual bits {hashes!r})")
        if int(hashes) and kind != PERCEPTUAL_KIND:
            raise InputError(f"{where}: its code keeps perceptual hashes of another kind ({kind!r}, this lbhash makes "
                             f"{PERCEPTUAL_KIND!r}); build the index again with `lbhash index build`")
        check_instance_bits(projection.shape[1] + int(hashes), len(mean), f"{where}: its length")
        return cls(mean, projection, method, float_map, int(hashes))

    def digest(self) -> str:
        """SHA-256 of the method and arrays (not of `to_bytes`, whose zip entries carry a time): the
        transform's identity."""
        h = hashlib.sha256(self.method.encode() + (f"+{self.perceptual_bits}" if self.perceptual_bits else "").encode())
        for arr in (self.mean, self.projection, *(() if self.float_map is None else (self.float_map,))):
            h.update(repr(arr.shape).encode())
            h.update(np.ascontiguousarray(arr, "<f8").tobytes())
        return h.hexdigest()
