"""Images added through the service, kept durably beside the index (`NAME.media/`, next to
the index directory `NAME` and its log `NAME.wal`).

- `ID.item`: one image as uploaded (a JSON header line, then the bytes), staged and fsynced
  before the add and renamed to its id before the answer: an acknowledged image survives kill -9.
- `budget`: the bytes all kept images may hold; an upload past it is refused (`OverBudget`).
- `gone.log`: ids whose recorded source is no longer theirs; an item's image is its `ID.item`,
  else nothing if it is gone, else its recorded source.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import uuid
from pathlib import Path

from lbhash._io import open_own_file
from lbhash.errors import InputError
from lbhash.index.storage import _fsync_dir

GONE = "gone.log"


class OverBudget(InputError):
    """An upload beyond the byte budget of an index's kept images (HTTP 507)."""


def media_dir_for(index_dir: str | os.PathLike) -> Path:
    index_dir = Path(index_dir)
    return index_dir.parent / f"{index_dir.name}.media"


class KeptImages:
    """The images of one index's `NAME.media/` folder, created by the first change;
    `writer=False` (readers such as `lbhash search`) leaves temporaries alone."""

    def __init__(self, directory: str | os.PathLike, writer: bool = True, budget: int | None = None):
        self.dir, self.budget = Path(directory), budget
        if self.dir.is_symlink() or (self.dir.exists() and not self.dir.is_dir()):
            raise InputError(f"{self.dir}: is not a folder of its own (a link or a file); lbhash keeps uploads there "
                             "and does not follow links (remove it)")
        if writer and self.dir.is_dir():
            for leftover in self.dir.glob(".tmp-*"):  # staged by a process that died before its add
                leftover.unlink(missing_ok=True)
        self._lock = threading.Lock()
        self.used = 0  # the kept files' bytes, counted below
        self.gone: set[int] = set()
        path = self.dir / GONE
        if path.exists() or path.is_symlink():
            with os.fdopen(open_own_file(path, os.O_RDONLY), "rb") as fh:
                lines = fh.read().split(b"\n")
            # a torn last line (no newline) was never acknowledged
            self.gone.update(int(line) for line in lines[:-1] if line.strip().isdigit())
        for item in self.dir.glob("*.item") if self.dir.is_dir() else ():
            if item.is_symlink() or not item.is_file():
                raise InputError(f"{item}: is not a regular file (remove it); lbhash does not follow links")
            self.used += item.stat().st_size

    def _create(self) -> None:
        with self._lock:  # concurrent first uploads: one creates the folder, the others see it
            if not self.dir.is_dir() or self.dir.is_symlink():
                self.dir.mkdir()  # FileExistsError for a link planted since start: never written through
                _fsync_dir(self.dir.parent)

    def _item(self, item_id: int) -> Path:
        return self.dir / f"{int(item_id)}.item"

    def has(self, item_id: int) -> bool:
        path = self._item(item_id)
        return path.is_file() and not path.is_symlink()  # a link planted there is not an image of ours

    def stage(self, blobs: list[bytes], names: list[str]) -> list[Path]:
        """Write images to hidden temporary files, fsynced, for `commit` to name after their ids; their
        bytes count against the budget from here on (beyond it: OverBudget, nothing written)."""
        files = []
        for blob, name in zip(blobs, names):
            header = {"name": str(name)[:255], "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
            files.append(json.dumps(header).encode() + b"\n" + blob)
        self._reserve(sum(map(len, files)))
        staged = []
        try:
            self._create()
            for data in files:
                staged.append(self.dir / f".tmp-{uuid.uuid4().hex}")
                _write_synced(staged[-1], os.O_EXCL, data)
        except BaseException:
            self.discard(staged, unreserve=sum(map(len, files)))
            raise
        return staged

    def _reserve(self, size: int) -> None:
        with self._lock:
            if self.budget is not None and self.used + size > self.budget:
                raise OverBudget(f"the index's kept images would hold {self.used + size} bytes, more than their "
                                 f"budget of {self.budget} (lbhash serve --media-budget-mb); {self.used} used")
            self.used += size

    def _release(self, size: int) -> None:
        with self._lock:
            self.used -= size

    def commit(self, staged: list[Path], ids) -> None:
        for path, item_id in zip(staged, ids):
            replaced = self._item(item_id)
            if replaced.is_file():  # an upsert's new image: the old one's bytes are free
                self._release(replaced.stat().st_size)
            os.replace(path, replaced)
        _fsync_dir(self.dir)

    def discard(self, staged: list[Path], unreserve: int | None = None) -> None:
        """Delete staged files and release their bytes (`unreserve`: all reserved, some unwritten)."""
        freed = 0
        for path in staged:
            with contextlib.suppress(FileNotFoundError):
                freed += path.stat().st_size
                path.unlink()
        self._release(freed if unreserve is None else unreserve)

    def forget(self, ids) -> None:
        """Mark ids gone (fsynced) and delete their kept images."""
        ids = [int(i) for i in ids]
        if not ids:
            return
        self._create()
        _write_synced(self.dir / GONE, os.O_APPEND, b"".join(b"%d\n" % i for i in ids))
        self.gone.update(ids)
        removed = False
        for i in ids:
            if self.has(i):
                self._release(self._item(i).stat().st_size)
                self._item(i).unlink()
                removed = True
        if removed:
            _fsync_dir(self.dir)

    def read(self, item_id: int) -> tuple[str, bytes] | None:
        """(file name, bytes) of a kept image, checked against its header; None if none."""
        path = self._item(item_id)
        try:
            with os.fdopen(open_own_file(path, os.O_RDONLY), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        head, _, blob = data.partition(b"\n")
        try:
            header = json.loads(head)
            ok = header["bytes"] == len(blob) and header["sha256"] == hashlib.sha256(blob).hexdigest()
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise InputError(f"{path}: damaged (its header does not match its bytes)")
        return str(header["name"]), blob

    def name(self, item_id: int) -> str | None:
        """The file name a kept image was uploaded as (header only)."""
        try:
            with os.fdopen(open_own_file(self._item(item_id), os.O_RDONLY), "rb") as fh:
                return str(json.loads(fh.readline())["name"])
        except (OSError, ValueError, KeyError, TypeError):  # InputError (a link) is a ValueError
            return None


def _write_synced(path: Path, flags: int, data: bytes) -> None:
    """Write `data` to `path` (created, opened with `flags`: O_EXCL or O_APPEND) and fsync it."""
    mode = "ab" if flags & os.O_APPEND else "wb"
    with os.fdopen(open_own_file(path, os.O_WRONLY | os.O_CREAT | flags), mode) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def item_origin(item_id: int, record, kept: KeptImages | None) -> tuple[str | None, str | None]:
    """(where an item came from, how its image is read: "upload", "data" or None)."""
    if kept is not None and kept.has(item_id):
        return f"uploaded: {kept.name(item_id)}", "upload"
    if kept is not None and int(item_id) in kept.gone:
        return None, None
    source = None if record is None else record.source(item_id)
    return source, (None if source is None else "data")
