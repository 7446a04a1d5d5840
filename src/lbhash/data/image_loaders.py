"""Loaders of image data sets: CIFAR-10 pickles, class-folder trees and tarballs, DeepHash
list files (with the nuswide21 / imagenet100 presets).

CIFAR-10's official python pickles (`data_batch_1..5`, `test_batch`, `batches.meta`) are read
with an unpickler that resolves numpy's array reconstruction and nothing else."""

from __future__ import annotations

import io
import os
import pickle
import posixpath
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbhash.data.image_root import ImageRoot, list_image_files
from lbhash.data.image_sources import (
    BlobSource,
    FileSource,
    TarSource,
    class_tree,
    compressed_tarball_names,
    is_compressed,
    is_image_name,
    is_tarball,
    open_tarball,
    read_list_file,
    take,
)
from lbhash.data.images import ImageDataset
from lbhash.data.per_class import PerClass, per_class_positions
from lbhash.labels import as_multihot
from lbhash.errors import InputError, one_line

CIFAR_FILES = (*(f"data_batch_{k}" for k in range(1, 6)), "test_batch", "batches.meta")


def _latin1_encode(text, encoding="latin1"):
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(str, "latin1"): only that is allowed
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("only _codecs.encode(str, 'latin1') is allowed")
    return text.encode("latin1")


def _allowed_globals() -> dict:
    probe = np.zeros(1, np.uint8)
    reconstruct, frombuffer = probe.__reduce__()[0], probe.__reduce_ex__(5)[0]
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("_codecs", "encode"): _latin1_encode}
    for core in ("numpy.core", "numpy._core"):  # numpy 1 and 2 spell the module differently
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _CifarUnpickler(pickle.Unpickler):
    """Only numpy array reconstruction: never an arbitrary class or function."""

    allowed = _allowed_globals()

    def find_class(self, module, name):
        obj = self.allowed.get((module, name))
        if obj is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return obj


def _unpickle(data: bytes, where: str) -> dict:
    try:
        obj = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as err:  # whatever a malformed pickle raises, never run further
        raise InputError(f"{where}: not a CIFAR-10 python batch ({one_line(err)})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: not a CIFAR-10 python batch (holds {type(obj).__name__}, not a dict)")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _get(d: dict, key: str, where: str):
    if key not in d:
        raise InputError(f"{where}: no {key!r} entry (keys: {', '.join(map(str, d))})")
    return d[key]


def read_cifar_batches(read, where):
    """CIFAR-10 python batches through read(name) -> bytes and where(name) -> str.

    Returns pixels (n, 32, 32, 3) uint8, class ids, is_test and class names (train batches
    1..5 first, then test_batch).
    """
    meta = _unpickle(read("batches.meta"), where("batches.meta"))
    names = [n.decode("utf-8") if isinstance(n, bytes) else str(n)
             for n in _get(meta, "label_names", where("batches.meta"))]
    pixels, ids, test = [], [], []
    for batch in CIFAR_FILES[:-1]:
        d, w = _unpickle(read(batch), where(batch)), where(batch)
        data = _get(d, "data", w)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise InputError(f"{w}: 'data' must be a uint8 (N, 3072) array, got "
                             f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
        labels = np.asarray(_get(d, "labels", w))
        if labels.shape != (len(data),) or labels.dtype.kind not in "iu":
            raise InputError(f"{w}: 'labels' must be {len(data)} integers, got shape {labels.shape}")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
            raise InputError(f"{w}: label {int(labels.max())} out of range for {len(names)} class names")
        pixels.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))  # R, G, B planes -> HWC
        ids.append(labels.astype(np.int64))
        test.append(np.full(len(data), batch == "test_batch"))
    return np.ascontiguousarray(np.concatenate(pixels)), np.concatenate(ids), np.concatenate(test), names


LIST_FILES = (("train", "train.txt"), ("query", "test.txt"), ("database", "database.txt"))


@dataclass(frozen=True)
class ListPreset:
    """What a named list data set implies: default R, label kind, label count."""

    name: str
    topk: int | None
    multi_label: bool
    num_labels: int


LIST_PRESETS = {
    "nuswide21": ListPreset("nuswide21", 5000, True, 21),
    "imagenet100": ListPreset("imagenet100", 1000, False, 100),
}


def load_image_folder(path: str | os.PathLike, cache: str = "auto", name: str | None = None,
                      per_class: PerClass | None = None, labels_required: bool = True) -> ImageDataset:
    """A class-folder tree (lbhash.data.image_sources.class_tree), on disk or in a tarball (.tar read in
    place, .tar.gz/.tgz/.tar.bz2/.tar.xz held in memory), items ordered train then test, by class, by path.
    `per_class` keeps a part of each class (lbhash.data.per_class); of a compressed tarball only that part
    is held in memory. Without `labels_required` (encoding, search), a folder of images outside class
    folders loads as unlabelled items, by path."""
    p = Path(path).expanduser()
    if p.is_dir():
        names = list_image_files(p, is_image_name)
        source = FileSource(p, names)
    elif is_tarball(p):
        source, names = _tarball_index(p, is_image_name, per_class)
    elif p.exists():
        raise InputError(f"{p}: not a directory or a tarball (.tar, .tar.gz, .tgz, .tar.bz2, .tar.xz)")
    else:
        raise InputError(f"{p}: no such file or directory")
    return _tree_dataset(source, names, p, cache, name or f"images:{p.name}", per_class, labels_required)


def _tarball_index(p: Path, keep, per_class: PerClass | None):
    """(source, member names) of a tarball's wanted members; the source is None for a compressed
    tarball of which only a part will be read (`_tree_dataset` reads it once that part is known)."""
    if per_class is not None and is_compressed(p):
        return None, compressed_tarball_names(p, keep)
    source = open_tarball(p, keep=keep)
    return source, [n.decode("utf-8", "surrogateescape") for n in source.names]


def _tree_dataset(source, names: list[str], p: Path, cache: str, name: str,
                  per_class: PerClass | None, labels_required: bool = True) -> ImageDataset:
    positions, ids, is_test, class_names = class_tree(names, str(p), labels_required or per_class is not None)
    cache_key = f"tree:{p.resolve()}"
    if per_class is not None:
        kept = per_class_positions(ids, is_test, per_class, class_names, str(p))
        positions, ids = positions[kept], ids[kept]
        is_test = None if is_test is None else is_test[kept]
        cache_key += f"?per-class={per_class.text}"
    if source is None:  # a compressed tarball: one more pass, holding the chosen members only
        wanted = [names[k] for k in positions]
        source = open_tarball(p, keep=set(wanted).__contains__)
        member = {n.decode("utf-8", "surrogateescape"): k for k, n in enumerate(source.names)}
        positions = np.array([member[n] for n in wanted], dtype=np.int64)
    labels = np.zeros((len(positions), 0), bool) if ids is None else as_multihot(ids, num_classes=len(class_names))
    return ImageDataset(labels, is_test, name, class_names,
                        source=take(source, positions), cache=cache, cache_key=cache_key)


def load_cifar10(path: str | os.PathLike, cache: str = "auto", per_class: PerClass | None = None) -> ImageDataset:
    """CIFAR-10 from the python pickles (a `cifar-10-batches-py` directory, its parent, or
    `cifar-10-python.tar.gz`) or from a class-folder tree or tarball of 10 classes; `per_class` as above."""
    p = Path(path).expanduser()
    batches = names = None
    if p.is_dir():
        for d in (p, p / "cifar-10-batches-py"):
            if (d / "data_batch_1").is_file():
                batches = (lambda b, d=d: _read_file(d / b)), (lambda b, d=d: str(d / b))
                break
    elif is_tarball(p):
        tar, names = _tarball_index(p, lambda n: is_image_name(n) or posixpath.basename(n) in CIFAR_FILES, per_class)
        if any(posixpath.basename(n) == "data_batch_1" for n in names):
            batches = _tar_batches(p, tar)
    if batches is not None:
        pixels, ids, is_test, class_names = read_cifar_batches(*batches)
        ds = ImageDataset(as_multihot(ids, num_classes=len(class_names)), is_test, "cifar10", class_names,
                          pixels=pixels, rows_of=p.name)
        if per_class is not None:
            ds = ds.subset(per_class_positions(ids, is_test, per_class, class_names, str(p)))
    elif names is not None:  # a tarball of a class-folder tree: reuse the index just made
        ds = _tree_dataset(tar, names, p, cache, "cifar10", per_class)
    else:
        ds = load_image_folder(p, cache, name="cifar10", per_class=per_class)
    if ds.num_classes != 10:
        raise InputError(f"{p}: CIFAR-10 has 10 classes, found {ds.num_classes}")
    return ds


def _tar_batches(p: Path, tar):
    """read(name) and where(name) of the CIFAR-10 batch files in a tarball (`tar`: its index, or
    None when only its names were listed: the batch files are read now)."""
    if tar is None:
        tar = open_tarball(p, keep=lambda n: posixpath.basename(n) in CIFAR_FILES)
    members = {}
    for k, raw in enumerate(tar.names):
        base = posixpath.basename(raw.decode("utf-8", "surrogateescape"))
        if base in CIFAR_FILES:
            members.setdefault(base, k)

    def read(b):
        if b not in members:
            raise InputError(f"{p}: no member {b} (a CIFAR-10 python archive holds {', '.join(CIFAR_FILES)})")
        return tar.read(members[b])

    return read, (lambda b: tar.where(members[b]) if b in members else f"{p}:{b}")


def load_image_lists(directory: str | os.PathLike, root: str | os.PathLike | None = None,
                     preset: str | None = None, cache: str = "auto") -> ImageDataset:
    """DeepHash list files `train.txt`, `test.txt` (queries) and `database.txt` in `directory`, lines
    `relative/path.jpg 0 1 0 ...`, paths inside `root` (a directory or a tarball; default `directory`).
    Each distinct path is one item (first appearance first; listed twice: the same labels), `parts`
    gives each file's items and is_test marks test.txt's."""
    d = Path(directory).expanduser()
    if not d.is_dir():
        raise InputError(f"{d}: not a directory (expected one holding train.txt, test.txt and database.txt)")
    if preset is not None and preset not in LIST_PRESETS:
        raise InputError(f"unknown list preset {preset!r} (known: {', '.join(LIST_PRESETS)})")
    pre = LIST_PRESETS.get(preset)
    num_labels = pre.num_labels if pre else None
    root_path = d if root is None else Path(root).expanduser()
    image_root = ImageRoot(root_path, on_disk=not is_tarball(root_path))  # a missing root: refused below
    index: dict[str, int] = {}
    rows, first, parts = [], [], {}
    for part, fname in LIST_FILES:
        f = d / fname
        if not f.is_file():
            raise InputError(f"{d}: no {fname} (a list directory holds train.txt, test.txt and database.txt)")
        paths, labels, lines = read_list_file(f, num_labels, image_root)
        if not paths:
            raise InputError(f"{f}: lists no images")
        num_labels = labels.shape[1]
        if pre is not None and not pre.multi_label:
            counts = labels.sum(axis=1)
            if (counts != 1).any():
                k = int(np.flatnonzero(counts != 1)[0])
                raise InputError(f"{f}:{lines[k]}: {int(counts[k])} labels, but preset {pre.name} is single-label")
        pos = []
        for p, row, line in zip(paths, labels, lines):
            k = index.get(p)
            if k is None:
                k = index[p] = len(rows)
                rows.append(row)
                first.append(f"{f}:{line}")
            elif not np.array_equal(rows[k], row):
                raise InputError(f"{f}:{line}: {p} has other labels than at {first[k]}")
            pos.append(k)
        parts[part] = np.array(list(dict.fromkeys(pos)), dtype=np.int64)  # a repeated line counts once
    names = list(index)
    is_test = np.zeros(len(names), dtype=bool)
    is_test[parts["query"]] = True
    return ImageDataset(np.array(rows, dtype=bool), is_test, pre.name if pre else f"list:{d.name}",
                        source=_list_source(root_path, names),
                        parts=parts, topk=pre.topk if pre else None,
                        declared_multi_label=pre.multi_label if pre else None, cache=cache,
                        cache_key=f"list:{d.resolve()}?root={Path(root or d).expanduser().resolve()}")


def _list_source(root: Path, names: list[str]):
    if root.is_dir():
        return FileSource(root, names)
    if not is_tarball(root):
        raise InputError(f"{root}: image root is not a directory or a tarball")
    tar = open_tarball(root, keep=set(names).__contains__)  # only the listed members (a link among them is refused)
    member = {n.decode("utf-8", "surrogateescape"): k for k, n in enumerate(tar.names)}
    pos = np.array([member.get(n, -1) for n in names], dtype=np.int64)
    ok = pos >= 0
    offsets, sizes = np.full(len(names), -1, np.int64), np.zeros(len(names), np.int64)
    offsets[ok], sizes[ok] = tar.offsets[pos[ok]], tar.sizes[pos[ok]]
    args = (tar.path, [n.encode("utf-8", "surrogateescape") for n in names], offsets, sizes)
    return BlobSource(*args, tar.blob) if isinstance(tar, BlobSource) else TarSource(*args)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
