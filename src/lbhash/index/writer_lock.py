"""One writer per index directory: an exclusive `flock` on `.NAME.serve.lock` beside it, taken by
every process that changes the index (readers take none: saves are atomic).

The holder writes "PID WHAT" into it and a second writer is refused at once naming that pid; the
kernel drops the lock when its process ends. Taking it checks that the locked file is still the
one at that path, so two writers never hold locks on different files.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from lbhash._io import open_own_file
from lbhash.errors import InputError


class IndexBusy(InputError):
    """Another process is writing the index (it holds the writer lock)."""


def lock_path(index_dir: str | os.PathLike) -> Path:
    index_dir = Path(index_dir)
    return index_dir.parent / f".{index_dir.name}.serve.lock"


class WriterLock:
    """Held from construction until `release` (or the end of a `with` block)."""

    def __init__(self, index_dir: str | os.PathLike, holder: str):
        self.index_dir, self.path = Path(index_dir), lock_path(index_dir)
        if not self.index_dir.parent.is_dir():
            raise InputError(f"{self.index_dir}: no such index directory")
        self.fd = _acquire(self.index_dir, self.path, holder)

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # still held: a newcomer creates and locks a new file
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def writer_lock(index_dir: str | os.PathLike, holder: str) -> WriterLock:
    """Take the index's writer lock now (`holder`: e.g. "lbhash index add") or raise IndexBusy naming
    the holder's pid; a context manager, or call `release()`."""
    return WriterLock(index_dir, holder)


def _acquire(index_dir: Path, path: Path, holder: str) -> int:
    while True:
        fd = open_own_file(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                raise _busy(index_dir, path, fd) from None
            finally:
                os.close(fd)
        try:
            held, named = os.fstat(fd), os.stat(path)
            same = (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the file was released and deleted after we opened it: take the new one
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {holder}\n".encode())
    return fd


def _busy(index_dir: Path, path: Path, fd: int) -> IndexBusy:
    text = ""
    for _ in range(20):  # the holder writes its pid right after it locks
        text = os.pread(fd, 256, 0).decode(errors="replace").strip()
        if text:
            break
        time.sleep(0.05)
    pid, _, what = text.partition(" ")
    who = f"pid {pid}, {what}" if pid.isdigit() and what else f"pid {pid}" if pid.isdigit() else "pid unknown"
    verb = "served" if what == "lbhash serve" else "being changed"
    return IndexBusy(f"{index_dir} is {verb} by another process ({who}; lock {path}): one writer per index, "
                     "or changes saved by one would be lost when the other saves; try again when it is done")
