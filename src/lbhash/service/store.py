"""What the service serves: an index with a lock, a write-ahead log and compaction.

`IndexStore` wraps a saved `CodeIndex` directory and holds its writer lock
(lbhash.index.writer_lock) while it is open. A change is validated, appended to the log
and fsynced, then applied, then acknowledged; so an acknowledged change survives kill -9.
On start the log records the saved index does not hold yet (sequence number above its
manifest's "wal_seq") are replayed. Compaction saves the index atomically with the last
sequence number in its manifest and then empties the log: after every `compact_every`
changes (in a background thread) and on close.

Searches wait only for the in-memory part of a change (O(changed items) amortised,
lbhash.index._segments), never for a disk: one change at a time holds `_changing` while it
validates and fsyncs its log record, and takes the search lock only to apply it. Compaction
holds `_changing` too (changes wait, searches go on): it folds the index's pending changes in
a copy, swaps the copy in under the search lock (O(1)), and saves.

`MilvusStore` offers the same methods over a Milvus collection, which keeps its own log.
Searches run `lbhash.index.search_hits` (the rules shared with `lbhash search`); an unknown id
raises `NotFound` and a taken one `Conflict` (lbhash.errors), as the indexes themselves do.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from lbhash.cpus import usable_cpus
from lbhash.errors import Conflict, InputError
from lbhash.index import CodeIndex, Hits, SearchPlan, SparseLabels, search_hits
from lbhash.index.writer_lock import writer_lock
from lbhash.service.rwlock import ReadWriteLock
from lbhash.service.wal import WriteAheadLog

logger = logging.getLogger("lbhash")


def wal_path_for(index_dir: str | Path) -> Path:
    """The log lives beside the index directory, which compaction replaces whole."""
    index_dir = Path(index_dir)
    return index_dir.parent / f"{index_dir.name}.wal"


def labels_to_lists(rows: SparseLabels | None) -> list[list[int]] | None:
    return None if rows is None else rows.to_lists()


def lists_to_labels(lists: list[list[int]] | None, n: int) -> SparseLabels | None:
    """Class-id lists (one per item) -> sparse label sets; negative ids are refused."""
    if lists is None:
        return None
    if len(lists) != n:
        raise InputError(f"labels has {len(lists)} entries but there are {n} items")
    return SparseLabels.from_lists(lists)


class IndexStore:
    backend = "faiss"
    @property
    def search_threads(self) -> int:
        """One per CPU the process may use: a search takes a core (the scan lets go of the GIL),
        and more threads than cores only queue for the cores and the GIL (docs/search.md,
        "The service's own cost")."""
        return usable_cpus()

    def __init__(self, index_dir: str | Path, compact_every: int = 1000, wal_path: str | Path | None = None):
        self.index_dir = Path(index_dir)
        # one writer per index (lbhash.index.writer_lock), or acknowledged writes get lost
        self._owner = writer_lock(self.index_dir, "lbhash serve")
        try:
            self._open(wal_path, compact_every)
        except BaseException:
            self._owner.release()
            raise

    def _open(self, wal_path, compact_every: int) -> None:
        self.index = CodeIndex.load(self.index_dir)
        self.lock = ReadWriteLock()
        self._changing = threading.Lock()  # one change (or compaction) at a time
        self._compactor: threading.Thread | None = None
        self.compact_every = compact_every
        self.wal = WriteAheadLog(wal_path or wal_path_for(self.index_dir))
        saved = int(self.index.metadata.get("wal_seq", 0))
        replayed = [r for r in self.wal.records if r["seq"] > saved]
        for record in replayed:
            self._apply(record)
        self.wal.last_seq = max(saved, self.wal.last_seq)
        self.saved_seq = saved
        self.pending = len(replayed)
        if replayed:
            logger.info(f"replayed {len(replayed)} logged changes into {self.index_dir}")

    # --- reads ----------------------------------------------------------------------------

    def warm(self) -> None:
        """Before the first request: the exact scan loads its compiled code (numba, about 1 s)
        here rather than in a client's search (`CodeIndex.warm`, which reads nothing of the
        index but its width: no lock)."""
        self.index.warm()

    def search(self, queries, plan: SearchPlan, *, classes=None, real=None) -> list[Hits]:
        """`search_hits` of the queries: hits and their labels all read under one lock."""
        with self.lock.read():
            return search_hits(self.index, queries, plan, classes=classes, real=real)

    def get(self, ids) -> tuple[np.ndarray, list[list[int]]]:
        """(codes, class-id lists) of the given ids; NotFound for an id not in the index."""
        with self.lock.read():
            return self.index.get_codes(ids), self.index.labels_of(ids)

    def stats(self) -> dict:
        with self.lock.read():
            return {"backend": self.backend, "bits": self.index.bits, "kind": self.index.kind,
                    "params": self.index.params, "ntotal": self.index.ntotal,
                    "num_classes": self.index.num_classes, "exact": self.index.exact,
                    "trained": self.index.is_trained, "last_seq": self.wal.last_seq,
                    "saved_seq": self.saved_seq, "pending_changes": self.pending}

    @property
    def bits(self) -> int:
        return self.index.bits

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    # --- changes --------------------------------------------------------------------------

    def add(self, codes, ids=None, labels=None, upsert: bool = False) -> tuple[np.ndarray, int]:
        with self._changing:  # the only writer: reading the index needs no search lock
            if ids is not None and not upsert:
                present = self.index.contains(np.asarray(ids))
                if present.any():
                    raise Conflict(f"id {int(np.asarray(ids)[present][0])} is already in the index (use upsert)")
            plan = self.index.prepare_add(codes, ids, labels, upsert)
            seq = self.wal.append({"op": "add", "ids": plan.ids.tolist(), "codes": [c.tobytes().hex() for c in plan.codes],
                                   "labels": labels_to_lists(plan.labels), "upsert": plan.upsert})
            with self.lock.write():
                self.index.apply_add(plan)
            self.pending += 1
        self._maybe_compact()
        return plan.ids, seq

    def remove(self, ids) -> int:
        with self._changing:
            ids = self.index.prepare_remove(np.asarray(ids, np.int64))  # NotFound for an id not in the index
            seq = self.wal.append({"op": "remove", "ids": ids.tolist()})
            with self.lock.write():
                self.index.remove(ids)
            self.pending += 1
        self._maybe_compact()
        return seq

    def compact(self) -> None:
        """Save the index with the log's position, then empty the log. Changes wait; searches
        go on, and wait only for the O(1) swap of the folded index."""
        with self._changing:
            if not self.pending:
                return
            folded = self.index.prepare_fold()  # O(n), in a copy: searches read the index meanwhile
            with self.lock.write():
                self.index.apply_fold(folded)
            self.index.metadata["wal_seq"] = self.wal.last_seq
            self.index.save(self.index_dir)  # nothing left to fold: only reads the index
            self.wal.truncate()
            self.saved_seq, self.pending = self.wal.last_seq, 0

    def close(self) -> None:
        try:
            if self._compactor is not None:
                self._compactor.join(timeout=600)
            self.compact()
            self.wal.close()
        finally:
            self._owner.release()  # (the kernel drops it with the process too, on kill -9)

    def _maybe_compact(self) -> None:
        if self.pending < self.compact_every or (self._compactor and self._compactor.is_alive()):
            return
        self._compactor = threading.Thread(target=self.compact, name="lbhash-compact", daemon=True)
        self._compactor.start()

    def _apply(self, record: dict) -> None:
        ids = np.array(record["ids"], np.int64)
        if record["op"] == "remove":
            self.index.remove(ids)
            return
        codes = np.array([np.frombuffer(bytes.fromhex(h), np.uint8) for h in record["codes"]], np.uint8)
        codes = codes.reshape(len(ids), self.index.bits // 8)
        self.index.add(codes, ids, lists_to_labels(record["labels"], len(ids)), upsert=record["upsert"])


class MilvusStore:
    """The store interface over a Milvus collection (durable on its own: no log here)."""

    backend = "milvus"
    search_threads = None  # searches wait on the network: Offload's default, more threads than cores

    def __init__(self, index):
        self.index = index

    @property
    def bits(self) -> int:
        return self.index.bits

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries, plan: SearchPlan, *, classes=None, real=None) -> list[Hits]:
        return search_hits(self.index, queries, plan, classes=classes, real=real)

    def get(self, ids):
        """(codes, class-id lists) of the given ids; NotFound for an id not in the collection."""
        return self.index.get_codes(ids), self.index.labels_of(ids)

    def add(self, codes, ids=None, labels=None, upsert: bool = False):
        return self.index.add(codes, ids, labels, upsert), None  # Conflict for an id taken (without upsert)

    def remove(self, ids):
        self.index.remove(ids)  # NotFound for an id not in the collection
        return None

    def stats(self) -> dict:
        return self.index.stats()

    def compact(self) -> None:
        pass

    def close(self) -> None:
        self.index.close()
