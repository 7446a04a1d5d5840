"""The decoded-pixel store on disk: a memory-mapped uint8 .npy per image source, built once.

An entry `<cache dir>/pixels/<key hash>/` holds pixels.npy, bad.npy and meta.json; its name
hashes the data spec and a fingerprint of the source (names, sizes, times; a tarball's SHA-256),
so a changed source never reads a stale entry. meta.json's checksum is checked before use and a
failing entry is rebuilt with a warning; entries are built in a temporary directory and renamed
into place, so concurrent builders never see partial files. A cache that cannot be written
raises `CacheUnavailable` and the caller decodes into memory. The cache directory is
`$LBHASH_CACHE_DIR`, else `~/.cache/lbhash`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from lbhash._io import file_sha256

FORMAT = 1
# decoded sets larger than this share of physical memory are memory-mapped from the disk cache
MEMORY_FRACTION = 0.25
_LOG = logging.getLogger("lbhash")
T = TypeVar("T")


class CacheUnavailable(Exception):
    """The disk cache cannot hold an entry here (the message says why): the caller decodes into memory."""


def cache_root() -> Path:
    return Path(os.environ.get("LBHASH_CACHE_DIR") or Path.home() / ".cache" / "lbhash").expanduser()


def memory_budget() -> int:
    """Bytes of decoded pixels kept in memory: MEMORY_FRACTION of the physical memory."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    return int(total * MEMORY_FRACTION)


def warn_unavailable(why: CacheUnavailable, instead: str) -> None:
    _LOG.warning("%s: the pixel cache cannot be used: %s; decoding %s instead", cache_root(), why, instead)


def source_fingerprint(source) -> dict:
    """What identifies a source's bytes: its files' names, sizes and times (and a tarball's hash)."""
    names = hashlib.sha256(b"\0".join(bytes(n) for n in source.names)).hexdigest()
    if hasattr(source, "offsets"):  # a tarball: one file, hashed whole
        st = os.stat(source.path)
        return {"tarball": os.path.abspath(source.path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256": file_sha256(source.path), "names": names, "n": len(source)}
    listing = hashlib.sha256()
    for i in range(len(source)):
        path = source.where(i)
        try:
            st = os.stat(path)
            listing.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        except OSError:
            listing.update(f"{path}\0missing\n".encode("utf-8", "surrogateescape"))
    return {"root": os.path.abspath(source.root), "files": listing.hexdigest(), "names": names, "n": len(source)}


def entry_dir(key: str, fingerprint: dict) -> Path:
    ident = json.dumps({"format": FORMAT, "key": key, "source": fingerprint}, sort_keys=True)
    return cache_root() / "pixels" / hashlib.sha256(ident.encode()).hexdigest()[:32]


def open_entry(path: Path, n: int, shape: tuple[int, int, int] | None = None,
               in_memory: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """(pixels, bad) of a verified entry, memory-mapped read-only (or read into memory); None
    when there is no entry. A corrupt entry is removed with a warning, and None returned."""
    def load(pixels_file: Path) -> tuple[np.ndarray, np.ndarray]:
        pixels = np.load(pixels_file, mmap_mode=None if in_memory else "r", allow_pickle=False)
        bad = np.load(path / "bad.npy", allow_pickle=False)
        if (pixels.dtype != np.uint8 or pixels.ndim != 4 or len(pixels) != n or bad.shape != (n,)
                or bad.dtype != bool or (shape is not None and pixels.shape[1:] != shape)):
            raise ValueError(f"holds {pixels.dtype} {pixels.shape}, expected {n} images")
        if in_memory:
            pixels.flags.writeable = False
        return pixels, bad

    return read_entry(path, "pixels.npy", FORMAT, "pixels_", load, "pixel cache entry is unusable (%s); rebuilding it")


def read_entry(path: Path, file: str, fmt: int, prefix: str, load: Callable[[Path], T], unusable: str) -> T | None:
    """`load(path / file)` once the file matches meta.json's format, size and SHA-256 (keys `prefix` + "bytes",
    "sha256"; load raises ValueError for contents it refuses); None when there is no entry. A corrupt
    entry is removed with the warning `unusable` % why, and None returned. Shared with the feature cache."""
    if not path.is_dir():
        return None
    try:
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("format") != fmt or (path / file).stat().st_size != meta[prefix + "bytes"]:
            raise ValueError("size or format differs from its record")
        if file_sha256(path / file) != meta[prefix + "sha256"]:
            raise ValueError("checksum differs from its record")
        return load(path / file)
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as err:
        _remove(path)
        if path.exists():
            raise CacheUnavailable(f"its entry {path.name} is unusable ({err}) and cannot be removed") from None
        _LOG.warning("%s: " + unusable, path, err)
        return None


def build_entry(path: Path, n: int, shape: tuple[int, int, int], fill: Callable[[np.ndarray], np.ndarray | None],
                record: dict, in_memory: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """Create the entry: `fill(pixels)` decodes into a writable (n, *shape) memory map and returns
    the unreadable mask (None: give up, nothing is kept). Returns open_entry's result.
    CacheUnavailable when the cache cannot be written (its message says why)."""
    def write(tmp: Path) -> dict | None:
        pixels = np.lib.format.open_memmap(tmp / "pixels.npy", mode="w+", dtype=np.uint8, shape=(n, *shape))
        _reserve(tmp / "pixels.npy")
        bad = fill(pixels)
        if bad is None:
            return None
        pixels.flush()
        del pixels
        np.save(tmp / "bad.npy", np.asarray(bad, dtype=bool), allow_pickle=False)
        return {"format": FORMAT, **record, "shape": [n, *shape]}

    if not write_entry(path, "pixels.npy", "pixels_", write, _publish, "cannot write in it ({reason})",
                       "cannot create its entry {name} ({reason})"):
        return None
    return open_entry(path, n, shape, in_memory)


def write_entry(path: Path, file: str, prefix: str, write: Callable[[Path], dict | None],
                publish: Callable[[Path, Path], None], unwritable: str, uncreatable: str) -> bool:
    """Build an entry in a temporary directory beside `path`: `write(tmp)` writes its files there and
    returns the record for meta.json (None: give up, nothing is kept; False returned), to which `file`'s
    size and SHA-256 are added; all are synced and `publish` renames the directory to `path`.
    CacheUnavailable with `unwritable` or (publishing) `uncreatable`, formatted with the reason and the
    entry's name, when the cache cannot be written. Shared with the feature cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_tmp(path)
    except OSError as err:
        raise CacheUnavailable(unwritable.format(reason=_reason(err))) from None
    try:
        meta = write(tmp)
        if meta is None:
            return False
        meta.update({prefix + "bytes": (tmp / file).stat().st_size, prefix + "sha256": file_sha256(tmp / file)})
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        for name in os.listdir(tmp):
            with open(tmp / name, "rb+") as fh:
                os.fsync(fh.fileno())
        try:
            publish(tmp, path)  # atomic; fails if another process finished first
        except OSError as err:
            if not path.is_dir():
                raise CacheUnavailable(uncreatable.format(reason=_reason(err), name=path.name)) from None
    except OSError as err:
        raise CacheUnavailable(unwritable.format(reason=_reason(err))) from None
    finally:
        _remove(tmp)
    return True


def _reason(err: OSError) -> str:
    return err.strerror or str(err)  # not the file's name: a temporary one means nothing to a user


# The steps that change the cache directory, one function each (tests stand in for a read-only
# directory or a full disk by replacing them).

def _new_tmp(path: Path) -> Path:
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir()
    return tmp


def _reserve(file: Path) -> None:
    """Allocate the file's blocks now, so that a full disk fails here (ENOSPC) rather than as a
    SIGBUS when the memory map is written."""
    if not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(file, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    finally:
        os.close(fd)


def _publish(tmp: Path, path: Path) -> None:
    os.rename(tmp, path)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
