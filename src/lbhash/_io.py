"""Atomic file output and safe loading shared by every layer."""

from __future__ import annotations

import errno
import hashlib
import fcntl
import json
import os
import re
import stat
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from lbhash.errors import InputError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only on success: readers never see a
    half-written file, and a failure leaves none. The temporary name holds this process's id, so that
    those of killed processes (`kill -9` skips every clean-up) are removed by the next write there."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, cannot write a file there")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes owner-only files; give the usual permissions
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")  # 255: a file name's limit
_MILVUS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")  # Milvus's own rule for collection names


def check_name(name: str, option: str, milvus: bool = False) -> str:
    """A name that becomes a path component (a study, a cell, a collection): letters, digits and '_', '.', '+', '-',
    never '..', so it cannot climb out of its folder; Milvus collection names follow Milvus's stricter rule."""
    pattern = _MILVUS_NAME if milvus else _NAME
    if not isinstance(name, str) or not pattern.fullmatch(name) or ".." in name:
        rule = ("a letter or '_', then letters, digits and '_' (Milvus's rule), at most 255" if milvus else
                "letters, digits, '_', '.', '+' and '-', at most 255, not starting with '.' or containing '..'")
        raise InputError(f"{option} {name!r}: a name is {rule}; not a path")
    return name


def check_output_file(path: str | os.PathLike, option: str) -> Path:
    """A file a command may write, checked before any work: not a directory, its parent writable or creatable."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory; give a file name")
    _check_writable_ancestor(path, path.parent, option)
    return path


def check_new_output_file(path: str | os.PathLike, option: str, overwrite: bool) -> Path:
    """`check_output_file`, and an existing file is replaced only with --overwrite; a file inside a
    run directory (beside its manifest or config) never: only training writes there."""
    path = check_output_file(path, option)
    refuse_inside_run(path, option)
    if path.exists() and not overwrite:
        raise InputError(f"{option} {path}: exists; choose another {option} to keep it, or pass --overwrite to "
                         "replace it")
    return path


def refuse_inside_run(path: str | os.PathLike, option: str) -> None:
    """Only training writes inside a run directory (its manifest checks every file there)."""
    for parent in Path(path).absolute().parents:
        if (parent / "config.yaml").is_file() and ((parent / "manifest.json").is_file() or (parent / ".lock").exists()):
            raise InputError(f"{option} {path}: inside the run directory {parent}, which only training writes; "
                             "choose a path outside it")


def check_output_dir(path: str | os.PathLike, option: str) -> Path:
    """A directory a command may write into, checked before any work: not a file, under a writable directory."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: is a file, not a directory")
    _check_writable_ancestor(path, path, option)
    return path


def _check_writable_ancestor(path: Path, start: Path, option: str) -> None:
    """The nearest existing directory at or above `start` must be a directory we can write."""
    while not start.exists():
        start = start.parent
    if not start.is_dir():
        raise InputError(f"{option} {path}: {start} is a file, not a directory")
    if not os.access(start, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: cannot write in {start}")


def temporary_name(path: Path) -> Path:
    """A unique temporary name beside `path`, in the form `remove_stale_temporaries` knows."""
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Remove `.NAME.PID.*.tmp` files beside `path` whose process is gone."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                tmp.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_own_file(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """A descriptor of the regular file at `path` (created with `os.O_CREAT`), never of what a link there points to: a
    file lbhash writes beside an index (its lock, its log) that an attacker replaced by a symbolic link, a FIFO or a
    device is refused in one line instead of being truncated, overwritten or blocking for ever."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{path}: is a symbolic link; lbhash does not follow links where it writes its "
                             "own files (remove it)") from None
        if err.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO with no reader, opened for writing; a directory
            raise InputError(f"{path}: is not a regular file (remove it)") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path}: is not a regular file (remove it)")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")


def save_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    # np.savez appends ".npz" to names without it, so write through a file object.
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an .npz file, no pickled objects, once their headers show they fit in memory."""
    path = Path(path)
    check_fits_in_memory(path, _npz_headers(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as err:  # e.g. object arrays, which would need pickle
        raise InputError(f"{path}: cannot read safely ({err})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{path}: not a readable .npz file ({err})") from None


def load_npy(path: str | os.PathLike) -> np.ndarray:
    """One .npy array, no pickled objects, once its header shows it fits in memory."""
    path = Path(path)
    check_fits_in_memory(path, _npy_headers(path))
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:  # pickled data or object arrays
        raise InputError(f"{path}: cannot read safely ({err})") from None
    except (OSError, EOFError) as err:
        raise InputError(f"{path}: not a readable .npy file ({err})") from None


def array_headers(path: str | os.PathLike) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every array of an .npz file, or of an .npy file's one array (key ''), from their
    headers alone; InputError, as load_npz/load_npy give, for a file that is neither."""
    path = Path(path)
    return _npz_headers(path) if path.suffix.lower() == ".npz" else _npy_headers(path)


def _npz_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise InputError(f"{path}: not an .npz file (an .npz is a zip archive of .npy arrays)")
    try:
        with zipfile.ZipFile(path) as archive:
            headers = {}
            for name in archive.namelist():
                with archive.open(name) as member:
                    headers[name.removesuffix(".npy")] = _npy_header(member, f"{path}: {name}")
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{path}: not a readable .npz file ({err})") from None
    return headers


def _npy_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with open(path, "rb") as fh:
        if fh.read(2) == b"PK":
            raise InputError(f"{path}: is an .npz archive, not a single .npy array")
        fh.seek(0)
        return {"": _npy_header(fh, str(path))}


def _npy_header(fh, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from the header of an .npy stream, reading nothing past it."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = read(fh)
    except (ValueError, OSError, EOFError) as err:
        raise InputError(f"{where}: not a readable .npy array ({' '.join(str(err).split())})") from None
    return tuple(int(n) for n in shape), dtype


def available_memory() -> int | None:
    """Bytes of memory this process can still get: the kernel's MemAvailable, lowered to what
    a cgroup (v2) limit leaves and to what the process's own limits (`ulimit -v`, `ulimit -d`)
    leave above its present size; None where none of them can be read."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    found.extend(_rlimit_headroom())
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _rlimit_headroom() -> list[int]:
    """Bytes the address-space and data limits (RLIMIT_AS, RLIMIT_DATA) leave above the
    process's present VmSize and VmData; empty where no limit is set or it cannot be read."""
    try:
        import resource

        status = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmSize:", "VmData:")):
                status[line.split(":")[0]] = int(line.split()[1]) * 1024
        out = []
        for limit, used in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
            soft = resource.getrlimit(limit)[0]
            if soft != resource.RLIM_INFINITY and used in status:
                out.append(max(0, soft - status[used]))
        return out
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        return []


def check_fits_in_memory(path: Path, headers: dict[str, tuple[tuple[int, ...], np.dtype]], extra: int = 0,
                         extra_what: str = "", subject: tuple[str, tuple, np.dtype] | None = None) -> None:
    """Refuse a file whose arrays, as their headers describe them, exceed the available memory
    (numpy would otherwise fail part-way with a traceback, or the machine start swapping). `extra`
    bytes of copies the caller makes after reading (`extra_what` says which) count too; `subject`
    (name, shape, dtype) is what the message then names (default: the largest array)."""
    sizes = {key: int(np.prod(shape, dtype=object)) * dtype.itemsize for key, (shape, dtype) in headers.items()}
    free = available_memory()
    need = sum(sizes.values()) + extra
    if free is None or not sizes or need <= free:
        return
    key = max(sizes, key=sizes.get)
    shape, dtype = headers[key]
    what = f"array {key!r}" if key else "the array"
    if not extra:
        raise InputError(f"{path}: {what} has shape {shape} ({dtype}, {_gb(sizes[key])}), more than the "
                         f"{_gb(free)} of memory available")
    if subject is not None:
        what, shape, dtype = subject
    size = int(np.prod(shape, dtype=object)) * dtype.itemsize
    raise InputError(f"{path}: {what} has shape {shape} ({dtype}, {_gb(size)}); loading needs {_gb(need)} with "
                     f"{extra_what} ({_gb(extra)}), more than the {_gb(free)} of memory available")


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")
