"""Index directories: written whole or not at all, verified on load, never pickled (docs/indexes.md, "Persistence").

Format version 2: index.faiss, ids.npy, labels_indptr.npy and labels_indices.npy (CSR), an
optional embeddings.npy (float16 unit rows), an optional instance_codes.npy (packed uint8 instance
codes, lbhash.instance), attachments, and manifest.json (written last) with
each file's SHA-256 and size. Version 1 (labels.npy, a bool multi-hot matrix) is still read.

Loading verifies every checksum, then maps the files (never changed in place: the verified bytes
are the mapped ones). A new directory replaces the old in one step (renameat2 RENAME_EXCHANGE,
else two renames that `load_index` can undo), so a crash leaves a complete old or new index.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import faiss
import numpy as np

from lbhash._io import file_sha256
from lbhash.arrays import first_nonfinite
from lbhash.errors import InputError
from lbhash.index._engines import FlatEngine, read_faiss
from lbhash.index._ivf import ENGINES
from lbhash.index._segments import Segment
from lbhash.index.rescore import embedding_dtype
from lbhash.index.sparse_labels import SparseLabels

FORMAT = "lbhash-code-index"
VERSION = 2
READS = (1, 2)  # version 1: dense labels.npy, converted on load
MANIFEST = "manifest.json"
FILES = ("index.faiss", "ids.npy", "labels_indptr.npy", "labels_indices.npy")
FILES_BY_VERSION = {1: ("index.faiss", "ids.npy", "labels.npy"), 2: FILES}
EMBEDDINGS = "embeddings.npy"  # only in an index that keeps embeddings
INSTANCE = "instance_codes.npy"  # only in an index that keeps instance codes
ALL_FILES = {EMBEDDINGS, INSTANCE, *(name for names in FILES_BY_VERSION.values() for name in names)}


def save_index(index, path: str | os.PathLike) -> None:
    path = Path(path)
    if path.is_symlink():  # a link to an index stays a link: its target is replaced, as a write through it would be
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    if path.exists() and not (path / MANIFEST).is_file():
        raise InputError(f"{path}: exists and is not an index directory; refusing to replace it")
    saved = index._main  # CodeIndex.save folds first: the main segment holds every live item
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        # each file is streamed to disk and then hashed from it: no file is ever held in memory
        # whole (a serialised 100M-code index would be 0.8 GB of bytes, its ids as much again)
        writers = {
            "index.faiss": lambda fh: faiss.write_index_binary(saved.engine.faiss_index(),
                                                               faiss.PyCallbackIOWriter(fh.write)),
            "ids.npy": lambda fh: np.save(fh, saved.rows.ids, allow_pickle=False),
            "labels_indptr.npy": lambda fh: np.save(fh, saved.labels.indptr, allow_pickle=False),
            "labels_indices.npy": lambda fh: np.save(fh, saved.labels.indices, allow_pickle=False),
        }
        if saved.embeddings is not None:
            writers[EMBEDDINGS] = lambda fh: np.save(fh, saved.embeddings, allow_pickle=False)
        if saved.instance is not None:
            writers[INSTANCE] = lambda fh: np.save(fh, saved.instance, allow_pickle=False)
        attachments = dict(getattr(index, "attachments", None) or {})
        writers.update({name: (lambda fh, data=bytes(data): fh.write(data))
                        for name, data in attachments.items() if _attachment_name(name)})
        for name, write in writers.items():
            _write_synced(tmp / name, write)
        digests = _file_digests(tmp, writers)
        files = {name: {"sha256": digests[name], "bytes": (tmp / name).stat().st_size} for name in writers}
        manifest = {
            "format": FORMAT, "version": VERSION, "bits": index.bits, "kind": index.kind,
            "params": index.params, "ntotal": index.ntotal, "num_classes": index.num_classes,
            "next_id": index.next_id, "trained": index.is_trained, "metadata": index.metadata,
            **({"embedding_dim": index.embedding_dim} if saved.embeddings is not None else {}),
            # (a float16 index's manifest reads as it always did)
            **({"embedding_dtype": "int8"} if saved.embeddings is not None and saved.embeddings.dtype == np.int8
               else {}),
            **({"instance_bits": index.instance_bits} if saved.instance is not None else {}),
            "files": files, **({"attachments": sorted(attachments)} if attachments else {}),
        }
        text = (json.dumps(manifest, indent=2) + "\n").encode()
        _write_synced(tmp / MANIFEST, lambda fh: fh.write(text))
        _fsync_dir(tmp)
        _replace_dir(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_index(path: str | os.PathLike, index_class):
    """The index saved at `path`, as an `index_class` (`CodeIndex`, which passes itself)."""
    path = Path(path)
    _recover_interrupted_swap(path)
    manifest = read_manifest(path)
    attached = manifest.get("attachments") or []
    if not isinstance(attached, list) or not all(_attachment_name(n) for n in attached):
        raise InputError(f"{path / MANIFEST}: 'attachments' must list plain file names")
    dim = _embedding_dim(path, manifest)
    ibits = _instance_bits(path, manifest)
    kept = (*((EMBEDDINGS,) if dim is not None else ()), *((INSTANCE,) if ibits is not None else ()))
    _verify_checksums(path, manifest, (*FILES_BY_VERSION[manifest["version"]], *kept, *attached))
    ids = _npy_map(path / "ids.npy")
    bits, kind = manifest["bits"], manifest["kind"]
    dtype = embedding_dtype(manifest.get("embedding_dtype", "float16"), f"{path / MANIFEST}: embedding_dtype")
    index = index_class(bits, kind, **manifest["params"], embedding_dim=dim, instance_bits=ibits,
                        embedding_dtype=dtype.name)
    if ids.dtype != np.int64 or ids.ndim != 1 or (len(ids) > 1 and (np.diff(ids) <= 0).any()):
        raise InputError(f"{path / 'ids.npy'}: must hold ascending unique int64 ids")
    labels = _load_labels(path, manifest, len(ids))
    engine, codes = _load_engine(path / "index.faiss", bits, kind, index.params, ids)
    if len(codes) != len(ids) or manifest["ntotal"] != len(ids):
        raise InputError(f"{path / 'index.faiss'}: holds {len(codes)} codes but ids.npy has {len(ids)} "
                         f"and the manifest says {manifest['ntotal']}")
    embeddings = None if dim is None else _load_embeddings(path / EMBEDDINGS, dim, len(ids), dtype)
    instance = None if ibits is None else _load_instance(path / INSTANCE, ibits, len(ids))
    index._main = Segment(engine, ids, codes, labels, ordered=True, embeddings=embeddings, instance=instance)
    index._tail = Segment.empty_tail(bits, labels.width, dim, ibits, dtype)
    if "trained" in manifest and manifest["trained"] is not index.is_trained:
        raise InputError(f"{path / 'index.faiss'}: the {kind} index it holds is "
                         f"{'' if index.is_trained else 'not '}trained, the manifest says "
                         f"{'trained' if manifest['trained'] else 'untrained'} (the manifest's kind or trained "
                         "was changed)")
    next_id = manifest["next_id"]
    if isinstance(next_id, bool) or not isinstance(next_id, int) or (len(ids) and next_id <= int(ids[-1])):
        raise InputError(f"{path / MANIFEST}: next_id must be an integer above the largest id "
                         f"({int(ids[-1]) if len(ids) else 'none'}), got {next_id!r}")
    index._next_id = next_id
    index.metadata = dict(manifest.get("metadata") or {})
    index.attachments = {name: (path / name).read_bytes() for name in attached}
    return index


def _embedding_dim(path: Path, manifest: dict) -> int | None:
    """The width of the embeddings the index keeps (None: it keeps none)."""
    dim = manifest.get("embedding_dim")
    listed = EMBEDDINGS in (manifest.get("files") or {})
    if dim is None and not listed:
        return None
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1 or not listed:
        raise InputError(f"{path / MANIFEST}: embedding_dim {dim!r} and the {EMBEDDINGS} entry must come together, "
                         "embedding_dim a positive integer")
    return dim


def _instance_bits(path: Path, manifest: dict) -> int | None:
    """The length of the instance codes the index keeps (None: it keeps none)."""
    bits = manifest.get("instance_bits")
    listed = INSTANCE in (manifest.get("files") or {})
    if bits is None and not listed:
        return None
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 8 or bits % 8 or not listed:
        raise InputError(f"{path / MANIFEST}: instance_bits {bits!r} and the {INSTANCE} entry must come together, "
                         "instance_bits a positive multiple of 8")
    return bits


def _load_instance(file: Path, bits: int, n: int) -> np.ndarray:
    """The mapped instance codes of a verified file: uint8 (n, bits // 8), one per id, or one line."""
    codes = _npy_map(file)
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != bits // 8:
        raise InputError(f"{file}: must hold packed uint8 instance codes (n, {bits // 8}), got {codes.dtype} {codes.shape}")
    if len(codes) != n:
        raise InputError(f"{file}: holds {len(codes)} instance codes but ids.npy has {n} codes; the two codes "
                         "disagree (rebuild the index)")
    return codes


def _load_embeddings(file: Path, dim: int, n: int, dtype: np.dtype) -> np.ndarray:
    """The mapped embeddings of a verified file: `dtype` (the manifest's) (n, dim), one per id, or one line."""
    emb = _npy_map(file)
    if emb.dtype != dtype or emb.ndim != 2 or emb.shape[1] != dim:
        raise InputError(f"{file}: must hold {dtype.name} embeddings (n, {dim}), got {emb.dtype} {emb.shape}")
    if len(emb) != n:
        raise InputError(f"{file}: holds {len(emb)} embeddings but ids.npy has {n} codes; the embeddings and codes "
                         "disagree (rebuild the index)")
    # every add refuses a non-finite embedding, but a file another writer made (its checksum
    # recomputed) could hold one: a NaN row scores NaN against every query, which left the CLI's
    # answers empty and the service's a bare 500; refused here, before anything searches
    bad = first_nonfinite(emb) if emb.dtype.kind == "f" else None  # (int8 rows are finite)
    if bad is not None:
        raise InputError(f"{file}: embedding of row {bad[0]} holds {emb[bad]} at column {bad[1]}; an index keeps "
                         "finite unit rows (rebuild the index)")
    return emb


def _verify_checksums(path: Path, manifest: dict, names) -> None:
    """Hash every listed file against the manifest (`_file_digests`)."""
    entries = {}
    for name in names:
        entry = manifest["files"].get(name)
        if not isinstance(entry, dict) or "sha256" not in entry:
            raise InputError(f"{path / MANIFEST}: no checksum for {name}")
        if not (path / name).is_file():
            raise InputError(f"{path / name}: missing (the index directory is incomplete)")
        entries[name] = entry["sha256"]

    digests = _file_digests(path, entries)
    for name, expected in entries.items():
        if digests[name] != expected:
            raise InputError(f"{path / name}: checksum mismatch (the file is corrupt or was changed)")


def _file_digests(path: Path, names) -> dict[str, str]:
    """SHA-256 of each named file, streamed (no file is held in memory) and in parallel threads
    (hashlib releases the GIL)."""
    names = list(names)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(4, len(names)))) as pool:
        return dict(zip(names, pool.map(lambda name: file_sha256(path / name), names)))


def _load_engine(file: Path, bits: int, kind: str, params: dict, ids: np.ndarray):
    """(engine, codes): a flat index maps its file (FlatEngine.from_file); the other kinds
    deserialize FAISS's structures, which cannot be mapped."""
    if kind == "flat":
        return FlatEngine.from_file(bits, params, file, ids)
    engine, codes = ENGINES[kind].from_faiss(bits, params, read_faiss(file, bits), ids)
    return engine, np.ascontiguousarray(codes)


def read_manifest(path: Path) -> dict:
    file = path / MANIFEST
    if not path.is_dir():
        raise InputError(f"{path}: no such index directory")
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: not an index directory (no {MANIFEST})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{file}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{file}: not an lbhash index manifest")
    if manifest.get("version") not in READS:
        raise InputError(f"{file}: format version {manifest.get('version')!r}, this lbhash reads "
                         f"{' and '.join(map(str, READS))}")
    missing = [key for key in ("bits", "kind", "params", "ntotal", "next_id", "files") if key not in manifest]
    if missing:
        raise InputError(f"{file}: missing {', '.join(missing)}")
    if manifest["kind"] not in ENGINES:
        raise InputError(f"{file}: unknown index kind {manifest['kind']!r}")
    return manifest


def _attachment_name(name) -> bool:
    """A plain file name of its own (no folder, not one of the index's files)."""
    return (isinstance(name, str) and name not in ALL_FILES and name != MANIFEST and not name.startswith(".")
            and name.replace("-", "").replace("_", "").replace(".", "").isalnum())


def _load_labels(path: Path, manifest: dict, n: int) -> SparseLabels:
    if manifest["version"] == 1:  # a dense multi-hot matrix: converted once, on load
        dense = _npy_map(path / "labels.npy")
        if dense.dtype != bool or dense.ndim != 2 or len(dense) != n:
            raise InputError(f"{path / 'labels.npy'}: must be a bool array with one row per id ({n})")
        return SparseLabels.from_dense(dense)
    indptr = _npy_map(path / "labels_indptr.npy")
    indices = _npy_map(path / "labels_indices.npy")
    width = manifest.get("num_classes")
    if isinstance(width, bool) or not isinstance(width, int) or width < 0:
        raise InputError(f"{path / MANIFEST}: num_classes must be a non-negative integer, got {width!r}")
    where = f"{path / 'labels_indptr.npy'}, {path / 'labels_indices.npy'}"
    return SparseLabels(indptr, indices, width).check(where, rows=n)


def directory_bytes(path: str | os.PathLike) -> int:
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


# --- file and directory plumbing ------------------------------------------------------------

def _npy_map(file: Path) -> np.ndarray:
    """A read-only map of a verified .npy file (its pages are read when used, never copied)."""
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise InputError(f"{file}: not a readable .npy array ({err})") from None


def _write_synced(path: Path, write) -> None:
    """Create `path`, let `write(fh)` fill it, and fsync it."""
    with open(path, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def _replace_dir(new: Path, path: Path) -> None:
    if not path.exists():
        os.rename(new, path)
    elif _exchange(new, path):  # `new` now holds the old index
        _fsync_dir(path.parent)
        shutil.rmtree(new, ignore_errors=True)
        return
    else:
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.rename(path, aside / "index")
        os.rename(new, path)
        _fsync_dir(path.parent)
        shutil.rmtree(aside, ignore_errors=True)
    _fsync_dir(path.parent)


def _recover_interrupted_swap(path: Path) -> None:
    """Put back the old index a crash left aside between the two renames of the fallback."""
    if path.exists():
        return
    for aside in sorted(path.parent.glob(f".{path.name}.old-*")):
        if (aside / "index" / MANIFEST).is_file():
            os.rename(aside / "index", path)
            _fsync_dir(path.parent)
            shutil.rmtree(aside, ignore_errors=True)
            return


def _remove_leftovers(path: Path) -> None:
    """Delete hidden siblings an earlier crashed save left (a single writer is assumed)."""
    _recover_interrupted_swap(path)
    for pattern in (f".{path.name}.tmp-*", f".{path.name}.old-*"):
        for leftover in path.parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)
