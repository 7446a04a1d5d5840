"""Item labels held sparsely: one sorted set of class ids per item, in CSR form.

`SparseLabels(indptr, indices, width)`: the class ids of item i, ascending and without repeats,
are `indices[indptr[i]:indptr[i + 1]]`; `width` is one past the largest class id. Memory follows
the number of labels held, never the largest class id.
"""

from __future__ import annotations

import itertools

import numpy as np

from lbhash.errors import InputError

INDEX_DTYPE = np.int32  # class ids are at most lbhash.limits.MAX_CLASS_ID (65535)
_FEW_ROWS = 64  # up to this many rows, `lists_at` slices row by row


class SparseLabels:
    """Per item, a sorted set of class ids (CSR). Build with the `from_*` constructors, which
    sort and deduplicate; `check` validates arrays that come from elsewhere (a file)."""

    __slots__ = ("indptr", "indices", "width")

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, width: int):
        self.indptr, self.indices, self.width = indptr, indices, int(width)

    @classmethod
    def empty(cls, n: int = 0, width: int = 0) -> "SparseLabels":
        """n items without labels."""
        return cls(np.zeros(n + 1, np.int64), np.empty(0, INDEX_DTYPE), width)

    @classmethod
    def from_dense(cls, rows: np.ndarray) -> "SparseLabels":
        """Boolean multi-hot rows (n, C); width C."""
        rows = np.asarray(rows, bool)
        r, c = np.nonzero(rows)  # row-major: each row's columns ascend
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(np.bincount(r, minlength=len(rows)), out=indptr[1:])
        return cls(indptr, c.astype(INDEX_DTYPE), rows.shape[1])

    @classmethod
    def from_class_ids(cls, ids: np.ndarray) -> "SparseLabels":
        """One non-negative class id per item (n,); width max + 1 (0 when empty)."""
        ids = np.asarray(ids, np.int64)
        width = int(ids.max()) + 1 if ids.size else 0
        return cls(np.arange(len(ids) + 1, dtype=np.int64), ids.astype(INDEX_DTYPE), width)

    @classmethod
    def from_lists(cls, lists, name: str = "labels") -> "SparseLabels":
        """Class-id lists, one per item (any order, repeats collapse); width one past the largest
        id (0 when there is none). Negative ids, and ids past int32, are refused."""
        lengths = np.fromiter((len(row) for row in lists), np.int64, len(lists))
        flat = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(lengths.sum()))
        if flat.size and flat.min() < 0:
            raise InputError(f"{name} must be non-negative class ids")
        if flat.size and flat.max() > np.iinfo(INDEX_DTYPE).max:
            raise InputError(f"{name} has class id {int(flat.max())}, past the int32 range")
        rows = np.repeat(np.arange(len(lengths)), lengths)
        order = np.lexsort((flat, rows))
        flat, rows = flat[order], rows[order]
        keep = np.ones(len(flat), bool)
        keep[1:] = (flat[1:] != flat[:-1]) | (rows[1:] != rows[:-1])
        indptr = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=len(lengths)), out=indptr[1:])
        width = int(flat.max()) + 1 if flat.size else 0
        return cls(indptr, flat[keep].astype(INDEX_DTYPE), width)

    @staticmethod
    def concat(parts: list["SparseLabels"], width: int | None = None) -> "SparseLabels":
        """The rows of each part, in order; width the largest of theirs (or `width`)."""
        offsets = np.cumsum([0] + [len(p.indices) for p in parts[:-1]])
        indptr = np.concatenate([np.zeros(1, np.int64)] + [p.indptr[1:] + off for p, off in zip(parts, offsets)])
        indices = np.concatenate([np.empty(0, INDEX_DTYPE)] + [p.indices for p in parts]).astype(INDEX_DTYPE)
        widest = max([p.width for p in parts] + [0 if width is None else width])
        return SparseLabels(indptr, indices, widest)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes)

    def take(self, positions) -> "SparseLabels":
        """The rows at `positions`, in that order (same width)."""
        positions = np.asarray(positions, np.int64)
        starts, ends = self.indptr[positions], self.indptr[positions + 1]
        lengths = ends - starts
        indptr = np.zeros(len(positions) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        total = int(indptr[-1])
        if total == 0:
            return SparseLabels(indptr, np.empty(0, INDEX_DTYPE), self.width)
        gather = np.repeat(starts - indptr[:-1], lengths) + np.arange(total, dtype=np.int64)
        return SparseLabels(indptr, self.indices[gather], self.width)

    def lists_at(self, positions) -> list[list[int]]:
        """`take(positions).to_lists()`, row by row for a few rows (a search's hits), where
        the vectorised gather costs more in calls than it saves."""
        positions = np.asarray(positions, np.int64)
        if len(positions) > _FEW_ROWS:
            return self.take(positions).to_lists()
        starts, ends = self.indptr[positions].tolist(), self.indptr[positions + 1].tolist()
        return [self.indices[a:b].tolist() for a, b in zip(starts, ends)]

    def to_dense(self, width: int | None = None) -> np.ndarray:
        """Boolean multi-hot rows (n, width); width defaults to self.width."""
        width = self.width if width is None else width
        out = np.zeros((len(self), width), bool)
        out[np.repeat(np.arange(len(self)), np.diff(self.indptr)), self.indices] = True
        return out

    def to_lists(self) -> list[list[int]]:
        """The class ids of each row as Python ints, ascending."""
        flat, bounds = self.indices.tolist(), self.indptr.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def any_of(self, classes) -> np.ndarray:
        """Bool (n,): which rows hold at least one of `classes`."""
        out = np.zeros(len(self), bool)
        classes = np.asarray(classes, np.int64)
        if classes.size and self.indices.size:
            hits = np.flatnonzero(np.isin(self.indices, classes))
            out[np.searchsorted(self.indptr, hits, side="right") - 1] = True
        return out

    def groups(self):
        """(class ids, row numbers) for each distinct row, rows in ascending order."""
        members: dict[bytes, list[int]] = {}
        flat, bounds = self.indices, self.indptr.tolist()
        for r, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            members.setdefault(flat[a:b].tobytes(), []).append(r)
        return [(np.frombuffer(key, INDEX_DTYPE), np.array(rows, np.int64)) for key, rows in members.items()]

    def check(self, where: str, rows: int | None = None) -> "SparseLabels":
        """Refuse arrays that are not sorted sets per row within [0, width), one line naming `where`."""
        indptr, indices = self.indptr, self.indices
        if indptr.dtype != np.int64 or indptr.ndim != 1 or len(indptr) < 1:
            raise InputError(f"{where}: the row pointers must be a 1-D int64 array, got {indptr.dtype} {indptr.shape}")
        if rows is not None and len(indptr) != rows + 1:
            raise InputError(f"{where}: {len(indptr)} row pointers for {rows} items (expected {rows + 1})")
        if indices.dtype not in (np.int32, np.int64) or indices.ndim != 1:
            raise InputError(f"{where}: the class ids must be a 1-D int32 or int64 array, got {indices.dtype} "
                             f"{indices.shape}")
        if indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != len(indices):
            raise InputError(f"{where}: the row pointers must rise from 0 to the number of class ids ({len(indices)})")
        if indices.size and (indices.min() < 0 or indices.max() >= min(self.width, 2**31)):
            bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
            raise InputError(f"{where}: class id {bad} outside 0..{min(self.width, 2**31) - 1} (num_classes {self.width})")
        if len(indices) > 1:
            rising = np.diff(indices) > 0
            inner = np.ones(len(indices) - 1, bool)
            boundaries = indptr[1:-1]
            inner[boundaries[(boundaries > 0) & (boundaries < len(indices))] - 1] = False
            if not rising[inner].all():
                raise InputError(f"{where}: the class ids of a row must ascend without repeats")
        self.indices = indices.astype(INDEX_DTYPE, copy=False)  # a file map stays a map
        return self
