"""What the service serves: an index with a lock, a write-ahead log and compaction.

`IndexStore` holds a saved `CodeIndex` directory's writer lock. A change is validated, appended to
the log and fsynced, then applied and acknowledged, so it survives kill -9; on start the records
past the manifest's "wal_seq" are replayed. Compaction (every `compact_every` changes and on
close) folds the pending changes in a copy, swaps it in under the search lock and saves. Searches
never wait for a disk. `MilvusStore` offers the same methods over a Milvus collection; `Store`
is their one interface, and searches run `lbhash.index.search_hits`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from lbhash.codes import from_hex, to_hex
from lbhash.cpus import usable_cpus
from lbhash.data.views import item_views
from lbhash.errors import InputError
from lbhash.index import Backend, CodeIndex, Hits, Queries, SearchPlan, SparseLabels, search_hits
from lbhash.index.blend import warm_ranking
from lbhash.index.rescore import scoring_rows
from lbhash.index.writer_lock import writer_lock
from lbhash.instance import InstanceTransform
from lbhash.indexes.instance_codes import ITEM_VIEW_KEY, index_transform, payload_of
from lbhash.indexes.origins import SOURCES, forget_sources
from lbhash.serving.wal import WriteAheadLog

logger = logging.getLogger("lbhash")


def logged_embeddings(record: dict, dim: int | None, n: int, where, dtype: str) -> np.ndarray | None:
    """The stored embeddings (`dtype`, the index's: float16 or int8 (n, dim)) a log record carries,
    or None; refused in one line where they disagree with its codes or with the index."""
    hexes = record.get("embeddings")
    if (hexes is None) != (dim is None):
        have = "carries embeddings" if hexes is not None else "carries no embeddings"
        raise InputError(f"{where}: record {record.get('seq')} {have} but the index keeps "
                         f"{'none' if dim is None else f'{dim}-dimensional ones'}; the log and the index disagree")
    if hexes is None:
        return None
    width = np.dtype(dtype).itemsize
    rows = from_hex(hexes, 8 * width * dim, f"{where}: embeddings") if isinstance(hexes, list) else None
    if rows is None or len(rows) != n:
        raise InputError(f"{where}: record {record.get('seq')} holds {'no list of' if rows is None else len(rows)} "
                         f"embeddings for {n} codes; the embeddings and codes disagree")
    return rows.view(dtype)


def wal_path_for(index_dir: str | Path) -> Path:
    """The log lives beside the index directory, which compaction replaces whole."""
    index_dir = Path(index_dir)
    return index_dir.parent / f"{index_dir.name}.wal"


def lists_to_labels(lists: list[list[int]] | None, n: int) -> SparseLabels | None:
    """Class-id lists (one per item) -> sparse label sets; negative ids are refused."""
    if lists is None:
        return None
    if len(lists) != n:
        raise InputError(f"labels has {len(lists)} entries but there are {n} items")
    return SparseLabels.from_lists(lists)


class ReadWriteLock:
    """A readers-writer lock: many searches at once, one change at a time, writers first."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers, self._waiting_writers, self._writer = 0, 0, False

    @contextmanager
    def read(self):
        with self._cond:
            # a waiting writer goes first, so a stream of searches cannot starve writes
            self._cond.wait_for(lambda: not (self._writer or self._waiting_writers))
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self):
        with self._cond:
            self._waiting_writers += 1
            try:
                self._cond.wait_for(lambda: not (self._writer or self._readers))
            finally:
                self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class Store(ABC):
    """A `Backend` (`index`) with what a server adds around it (a log, locks); changes answer the
    log's sequence number (None where the backend keeps its own)."""

    backend: str  # "faiss" or "milvus", as /stats says
    index: Backend
    index_dir: Path | None = None  # the index's directory, beside which its media live (None: a server's)
    transform: InstanceTransform | None = None  # the index's instance transform (None: it keeps no instance codes)
    changes: int = 0  # the changes this store applied (what a cache of the index's contents is kept by)

    @property
    def bits(self) -> int:
        return self.index.bits

    @property
    def embedding_width(self) -> int | None:
        """The width of the embeddings that items and queries come with (the model's): the instance
        transform's, whose rows the index keeps (they may be narrower), else the float rows'; None: neither."""
        return self.transform.dim if self.transform is not None else self.index.embedding_dim

    @property
    def item_view(self) -> str | None:
        """The item view the index's photos were embedded with (lbhash.data.views), so that photos added to
        it are embedded so; None: the photos' own embeddings (an index built before the views). One this
        version does not make is refused in one line (the store checks it when it opens)."""
        view = self.index.metadata.get(ITEM_VIEW_KEY)
        if view is not None:
            item_views(view)
        return view

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    @property
    def search_threads(self) -> int | None:
        """Threads for searches (None: `Offload`'s default)."""
        return None

    @property
    def metadata(self) -> dict:
        """The index's free-form record (its data spec, model, ...; `Backend.metadata`)."""
        return self.index.metadata

    def warm(self) -> None:
        """Before the first request: load what the first search would wait for (the ranking's kernels)."""
        warm_ranking()

    def search(self, queries: Queries, plan: SearchPlan, classes: list[list[int]] | None = None) -> list[Hits]:
        """`search_hits` of the queries on the index."""
        return search_hits(self.index, queries, plan, classes)

    @contextmanager
    def reading(self):
        """Hold the index still while the block reads it over many calls: no change is applied meanwhile
        (one waits), and `changes` stays as it was (nothing here, where the backend keeps its own)."""
        yield

    def get(self, ids) -> tuple[np.ndarray, list[list[int]]]:
        """(codes, class-id lists) of the given ids; NotFound for an id not held."""
        return self.index.get_codes(ids), self.index.labels_of(ids)

    def embeddings(self, ids) -> np.ndarray:
        """The unit embeddings (float16) of the given ids, where the index keeps them (int8 rows as
        the unit rows that scoring uses)."""
        return scoring_rows(self.index.get_embeddings(ids))

    @abstractmethod
    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None,
            perceptual=None) -> tuple[np.ndarray, int | None]:
        """(ids, log sequence number); Conflict for an id held (without upsert). `embeddings` go
        with the codes exactly where the index keeps them; `perceptual`: the photos' perceptual codes where
        its instance code keeps them (lbhash.data.perceptual)."""

    @abstractmethod
    def remove(self, ids) -> int | None:
        """The log sequence number; NotFound for an id not held (nothing is removed then)."""

    def stats(self) -> dict:
        """What /stats shows of the index."""
        return self.index.stats()

    def compact(self) -> None:
        """Fold the log into the saved index (nothing where the backend keeps its own)."""

    def close(self) -> None:
        """Compact, and let go of the index."""


class IndexStore(Store):
    """A saved `CodeIndex` directory with its writer lock, write-ahead log and compaction."""

    backend = "faiss"

    @property
    def search_threads(self) -> int:
        """One per usable CPU: a search takes a core (the scan lets go of the GIL), and more threads
        would only queue for the cores and the GIL (docs/results/search-benchmarks.md, "The service's own cost")."""
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
        self.transform = index_transform(self.index, str(self.index_dir))  # (None: no instance codes)
        self.item_view  # (refused now, not at the first add)
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
        self.saved_seq, self.pending = saved, len(replayed)
        if replayed:
            logger.info(f"replayed {len(replayed)} logged changes into {self.index_dir}")

    def warm(self) -> None:
        """`CodeIndex.warm` and the ranking's kernels (numba, about 1 s) here rather than in a client's
        search; it reads nothing of the index but its width: no lock."""
        self.index.warm()
        super().warm()

    def search(self, queries: Queries, plan: SearchPlan, classes: list[list[int]] | None = None) -> list[Hits]:
        with self.lock.read():  # hits and their labels all read under one lock
            return super().search(queries, plan, classes)

    def reading(self):
        return self.lock.read()

    def get(self, ids) -> tuple[np.ndarray, list[list[int]]]:
        with self.lock.read():
            return super().get(ids)

    def embeddings(self, ids) -> np.ndarray:
        with self.lock.read():
            return super().embeddings(ids)

    def stats(self) -> dict:
        with self.lock.read():
            return {**super().stats(), "last_seq": self.wal.last_seq, "saved_seq": self.saved_seq,
                    "pending_changes": self.pending}

    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None,
            perceptual=None) -> tuple[np.ndarray, int]:
        with self._changing:  # the only writer: reading the index needs no search lock
            embeddings, instance = payload_of(self.transform, self.index, embeddings, len(codes), "the items",
                                              perceptual)
            plan = self.index.prepare_add(codes, ids, labels, upsert, embeddings, instance)  # Conflict for an id present
            # the embeddings as stored (float16 unit rows or int8, hex) and the instance codes: replay adds these bytes
            kept = {} if plan.embeddings is None else {"embeddings": to_hex(plan.embeddings.view(np.uint8))}
            if plan.instance is not None:
                kept["instance"] = to_hex(plan.instance)
            labels = None if plan.labels is None else plan.labels.to_lists()
            seq = self.wal.append({"op": "add", "ids": plan.ids.tolist(), "codes": to_hex(plan.codes), "labels": labels,
                                   "upsert": plan.upsert, **kept})
            with self.lock.write():
                self.index.apply_add(plan)
                self.changes += 1
            self.pending += 1
        self._maybe_compact()
        return plan.ids, seq

    def remove(self, ids) -> int:
        with self._changing:
            ids = self.index.prepare_remove(np.asarray(ids, np.int64))  # NotFound for an id not in the index
            seq = self.wal.append({"op": "remove", "ids": ids.tolist()})
            with self.lock.write():
                self.index.remove(ids)
                self.changes += 1
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
        codes = from_hex(record["codes"], self.index.bits, f"{self.wal.path}: codes")
        stored = logged_embeddings(record, self.index.embedding_dim, len(ids), self.wal.path,
                                   self.index.embedding_dtype)
        ibits = self.index.instance_bits
        if ibits is not None and "instance" not in record:
            raise InputError(f"{self.wal.path}: an add of {len(ids)} items without the instance codes the index keeps")
        if ibits is None and "instance" in record:  # (a log written for another index: never replayed silently)
            raise InputError(f"{self.wal.path}: record {record.get('seq')} carries instance codes but the index keeps "
                             "none; the log and the index disagree")
        instance = None if ibits is None else from_hex(record["instance"], ibits, f"{self.wal.path}: instance codes")
        plan = self.index.prepare_add(codes, ids, lists_to_labels(record["labels"], len(ids)), record["upsert"],
                                      None if stored is None else stored.astype(np.float32), instance)
        self.index.apply_add(plan if stored is None else dataclasses.replace(plan, embeddings=stored))


class MilvusStore(Store):
    """A Milvus collection (durable on its own: no log). Its searches wait on the network:
    `Offload`'s default threads, more than cores."""

    backend = "milvus"

    def __init__(self, index: Backend):
        self.index = index
        self.transform = index_transform(index, f"Milvus collection {index.collection!r}")
        self.item_view  # (refused now, not at the first add)

    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None, perceptual=None):
        embeddings, instance = payload_of(self.transform, self.index, embeddings, len(codes), "the items", perceptual)
        # Conflict for an id taken (without upsert)
        added = self.index.add(codes, ids, labels, upsert, embeddings, instance)
        self.changes += 1
        if upsert:
            self._forget(added)
        return added, None

    def remove(self, ids):
        self.index.remove(ids)  # NotFound for an id not in the collection (no log: no sequence number)
        self.changes += 1
        self._forget(ids)

    def _forget(self, ids) -> None:
        """A replaced or removed item's recorded source is no longer its own: the record on the server
        is rewritten, only where it named one of them (new ids change nothing)."""
        before = self.index.attachments.get(SOURCES)
        forget_sources(self.index, ids)
        if self.index.attachments.get(SOURCES) is not before:
            self.index.save_record()

    def close(self) -> None:
        self.index.close()
