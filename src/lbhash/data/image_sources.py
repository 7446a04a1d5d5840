"""Where images come from: files, tarballs and DeepHash list files (CIFAR-10 pickles: image_loaders).

A source holds the encoded bytes of n images in data-set order: `read(i)` returns item i's
bytes, `where(i)` names it in messages. Paths are kept in numpy byte arrays rather than lists
of str, so that forked DataLoader workers do not copy them page by page through refcounts.
"""

from __future__ import annotations

import io
import lzma
import os
import stat
import tarfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image

from lbhash.data.image_root import ImageRoot, check_tar_member
from lbhash.data.ustar import plain_members
from lbhash.errors import InputError, one_line
from lbhash.limits import IMAGE_FORMATS

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm")
# Members of a compressed tarball are held in memory (gzip has no random access): at most this.
MAX_TAR_MEMORY = 4 << 30
SPLIT_DIRS = {"train": False, "test": True, "val": True}


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


class RefusedFormat(ValueError):
    """An image in a format lbhash does not decode (`IMAGE_FORMATS`)."""


def open_image(data: bytes) -> Image.Image:
    """Pillow's image of encoded bytes, its header read and nothing decoded, in one of
    `lbhash.limits.IMAGE_FORMATS` (whose header gives the pixels a decode makes), else
    RefusedFormat naming the format. Only those formats' readers are tried: an ICNS that says
    16 x 16 can hold a PNG of 12000 x 12000, which Pillow decodes whole past every budget that
    counts the header's pixels, and Pillow's ICO reader decodes its largest image on opening."""
    try:
        return Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
    except Image.UnidentifiedImageError:
        kind = format_by_signature(data)
        if kind is None:
            raise
        raise RefusedFormat(f"{kind} is not decoded, only {', '.join(IMAGE_FORMATS)}: a container of several "
                            "images, such as ICO or ICNS, need not decode to the size its header gives") from None


def format_by_signature(data: bytes) -> str | None:
    """The format Pillow would read `data` as, from its first 16 bytes alone (each reader's
    signature test, as `Image.open` makes it), opening nothing; None where no reader knows it."""
    Image.init()
    prefix = data[:16]
    for kind, (_, accept) in Image.OPEN.items():
        try:
            found = accept(prefix) if accept is not None else False
        except Exception:  # noqa: BLE001 (a reader's test of a file shorter than it reads: 3 bytes made BMP's a struct.error)
            found = False
        if found and not isinstance(found, (str, bytes)):  # (a str is a reader's warning, not a match)
            return kind
    return None


def decode_image(data: bytes, where: str, draft: bool = False) -> np.ndarray:
    """Decode to (H, W, 3) uint8 RGB, converting other modes; a format outside `IMAGE_FORMATS`
    is refused before it decodes (`open_image`). `draft` (validation only) decodes JPEG at
    1/8 scale, several times faster, still reading the whole stream (so truncation is caught)."""
    try:
        with open_image(data) as im:
            if draft:
                im.draft("RGB", (1, 1))
            im.load()
            rgb = im if im.mode == "RGB" else im.convert("RGB")  # alpha is dropped, not blended
            return np.array(rgb)  # writable (asarray would wrap PIL's read-only bytes)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise InputError(f"{where}: cannot decode image ({image_error(err)})") from None


def image_error(err: BaseException) -> str:
    """Why an image did not decode, in one line, without Pillow's repr of the buffer it read
    ("cannot identify image file <_io.BytesIO object at 0x...>")."""
    if isinstance(err, Image.UnidentifiedImageError):
        return "not an image in a format Pillow reads"
    return one_line(err)


class FileSource:
    """Image files under `root` (relative names; an absolute name is used as it is)."""

    def __init__(self, root: str | os.PathLike, names: list[str]):
        self.root = os.fspath(root)
        self.names = np.array([os.fsencode(n) for n in names], dtype=bytes) if names else np.array([], "S1")

    def __len__(self) -> int:
        return len(self.names)

    def where(self, i: int) -> str:
        return os.path.join(self.root, os.fsdecode(self.names[i]))

    def read(self, i: int) -> bytes:
        path = self.where(i)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as err:
            raise InputError(f"{path}: cannot read image ({err.strerror or one_line(err)})") from None

    def stamp(self, i: int) -> tuple[int, int]:
        """(size, mtime in ns) of image i, as its file is now (what an index records)."""
        info = os.stat(self.where(i))
        return int(info.st_size), int(info.st_mtime_ns)

    def read_guarded(self, i: int, max_bytes: int, stamp: tuple[int, int] | None = None) -> bytes:
        """Image i for a server that must not be led elsewhere: the file, resolved, must still be
        inside the root, a regular file (not a FIFO or a device, opened without blocking or
        following a link), of at most `max_bytes`, and, with `stamp`, of the recorded size and
        mtime (a swapped source is refused rather than shown)."""
        path = self.where(i)
        real = os.path.realpath(path)
        if not ImageRoot(self.root).inside(real):
            raise InputError(f"{path}: now leads out of the image root {self.root}")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as err:
            raise InputError(f"{path}: cannot read image ({err.strerror or one_line(err)})") from None
        try:  # (a directory opens too: it is refused here, before it is read as a file)
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) \
                    else "a device or a socket"
                raise InputError(f"{path}: not a regular file ({kind})")
            if info.st_size > max_bytes:
                raise InputError(f"{path}: {info.st_size} bytes, more than the {max_bytes} a source is read up to")
            if stamp is not None and (int(info.st_size), int(info.st_mtime_ns)) != tuple(stamp):
                raise InputError(f"{path}: changed since the index was built (size or modification time)")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read(max_bytes + 1)[:max_bytes]
        except OSError as err:
            raise InputError(f"{path}: cannot read image ({err.strerror or one_line(err)})") from None
        finally:
            os.close(fd)

    def position(self, where: str) -> int | None:
        """The position of the file `where(i)` names now, or None when the source lists no such file."""
        prefix = os.path.join(self.root, "")
        return find_name(self, os.fsencode(where[len(prefix):])) if where.startswith(prefix) else None


class TarSource:
    """Members of an uncompressed tarball, read in place with os.pread.

    Each process opens its own descriptor on first use (DataLoader workers included); pread
    never moves a shared file offset, so threads may read at once.
    """

    def __init__(self, path: str | os.PathLike, names, offsets, sizes):
        self.path = os.fspath(path)
        self.names = np.asarray(names, dtype=bytes)
        self.offsets, self.sizes = np.asarray(offsets, np.int64), np.asarray(sizes, np.int64)
        self._fd, self._pid = None, None

    def __len__(self) -> int:
        return len(self.names)

    def where(self, i: int) -> str:
        return f"{self.path}:{self.names[i].decode('utf-8', 'replace')}"

    def read(self, i: int) -> bytes:
        offset, size = int(self.offsets[i]), int(self.sizes[i])
        if offset < 0:
            raise InputError(f"{self.where(i)}: no such member in the tarball")
        if self._pid != os.getpid():  # first use in this process
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise InputError(f"{self.where(i)}: truncated tarball ({len(data)} of {size} bytes)")
        return data

    def position(self, where: str) -> int | None:
        """The position of the member `where(i)` names now, or None when the tarball holds no such member."""
        prefix = f"{self.path}:"
        return find_name(self, where[len(prefix):].encode("utf-8", "surrogateescape")) \
            if where.startswith(prefix) else None

    def __getstate__(self):
        return {**self.__dict__, "_fd": None, "_pid": None}

    def __del__(self):
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)


class BlobSource(TarSource):
    """Members of a compressed tarball, held in one in-memory buffer."""

    def __init__(self, path, names, offsets, sizes, blob: np.ndarray):
        super().__init__(path, names, offsets, sizes)
        self.blob = blob

    def read(self, i: int) -> bytes:
        offset = int(self.offsets[i])
        if offset < 0:
            raise InputError(f"{self.where(i)}: no such member in the tarball")
        return self.blob[offset:offset + int(self.sizes[i])].tobytes()


def find_name(source, name: bytes) -> int | None:
    """The first position of `name` in `source.names` (sorted once, on first use), or None."""
    order = getattr(source, "_name_order", None)
    if order is None:  # (two threads may both sort: the same order)
        order = source._name_order = np.argsort(source.names, kind="stable")
    k = int(np.searchsorted(source.names, name, sorter=order))
    return int(order[k]) if k < len(order) and source.names[order[k]] == name else None


def is_tarball(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"))


def is_compressed(path: Path) -> bool:
    """A gzip, bzip2 or xz stream (by its first bytes): no random access to its members."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    return magic[:2] == b"\x1f\x8b" or magic[:3] == b"BZh" or magic == b"\xfd7zXZ\x00"


def open_tarball(path: Path, keep=None) -> TarSource:
    """Index a tarball's regular files that `keep(name)` accepts, in the archive's order, a leading './'
    dropped: offsets of an uncompressed one (read in place later), else the members' bytes from one
    streaming pass. A wanted link member is refused (lbhash.data.image_root.check_tar_member)."""
    with _tar_errors(path):
        if not is_compressed(path):
            return _index_plain_tar(path, keep)
        plain = plain_members(path, keep, limit=MAX_TAR_MEMORY)  # (None: tarfile reads it, below)
        if plain is not None:
            sizes = [len(data) for _, data in plain]
            offsets = np.cumsum([0, *sizes[:-1]], dtype=np.int64)
            blob = np.frombuffer(b"".join(data for _, data in plain), dtype=np.uint8)
            return BlobSource(path, _names([name for name, _ in plain]), offsets, sizes, blob)
        names, offsets, sizes, chunks, total = [], [], [], [], 0
        with tarfile.open(path, "r|*") as tf:
            for name, m in _streamed_members(tf, path, keep):
                data = tf.extractfile(m).read()
                if len(data) != m.size:
                    raise EOFError("unexpected end of data")
                total += len(data)
                if total > MAX_TAR_MEMORY:
                    raise InputError(f"{path}: its images exceed {MAX_TAR_MEMORY >> 30} GiB, too much to hold "
                                     "in memory from a compressed tarball; decompress it to a .tar (read in place) "
                                     "or unpack it")
                names.append(name)
                offsets.append(total - len(data))
                sizes.append(len(data))
                chunks.append(data)
        blob = np.frombuffer(b"".join(chunks), dtype=np.uint8)
        return BlobSource(path, _names(names), offsets, sizes, blob)


def compressed_tarball_names(path: Path, keep=None) -> list[str]:
    """The names `open_tarball` would keep, from one streaming pass that holds no member's bytes:
    what a part of a compressed tarball is chosen from before only that part is read."""
    with _tar_errors(path):
        plain = plain_members(path, keep, data=False)
    if plain is not None:
        return [name for name, _ in plain]
    with _tar_errors(path), tarfile.open(path, "r|*") as tf:
        return [name for name, _ in _streamed_members(tf, path, keep)]


def _streamed_members(tf: tarfile.TarFile, path: Path, keep):
    for m in tf:
        name = _member_name(path, m, keep)
        if name is not None:
            yield name, m


@contextmanager
def _tar_errors(path: Path):
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as err:
        raise InputError(f"{path}: truncated or corrupt tarball ({one_line(err)})") from None


def _index_plain_tar(path: Path, keep) -> TarSource:
    names, offsets, sizes = [], [], []
    with tarfile.open(path, "r:") as tf:
        for m in tf.getmembers():
            name = _member_name(path, m, keep)
            if name is not None:
                names.append(name)
                offsets.append(m.offset_data)
                sizes.append(m.size)
        # tarfile stops quietly at a cut header: a complete archive ends in a zero block there
        with open(path, "rb") as fh:
            fh.seek(tf.offset)
            if fh.read(512) != bytes(512):
                raise EOFError(f"no end-of-archive block at byte {tf.offset}")
    end = max((o + s for o, s in zip(offsets, sizes)), default=0)
    if end > path.stat().st_size:
        raise EOFError(f"members end at byte {end} but the file has {path.stat().st_size}")
    return TarSource(path, _names(names), offsets, sizes)


def _member_name(path: Path, m: tarfile.TarInfo, keep) -> str | None:
    """The member's name (a leading './' dropped) if it is a wanted regular file, else None; a
    wanted link is an error."""
    name = m.name
    while name.startswith("./"):
        name = name[2:]
    if keep is not None and not keep(name):
        return None
    check_tar_member(path, m, name)
    return name if m.isreg() and not m.issparse() else None


def _names(names: list[str]) -> np.ndarray:
    return np.array([n.encode("utf-8", "surrogateescape") for n in names], dtype=bytes) if names \
        else np.array([], "S1")


def take(source, order: np.ndarray):
    """The source's items at `order`, as a new source of the same kind."""
    order = np.asarray(order, np.int64)
    if isinstance(source, FileSource):
        out = FileSource(source.root, [])
        out.names = source.names[order]
        return out
    args = (source.path, source.names[order], source.offsets[order], source.sizes[order])
    return BlobSource(*args, source.blob) if isinstance(source, BlobSource) else TarSource(*args)


def class_tree(names: list[str], where: str, labels_required: bool = True):
    """(positions into `names` in data-set order, class ids, is_test or None, class names) of relative
    paths `train|test|val/<class>/...` or `<class>/...`. Non-image files and hidden paths ('.x', macOS
    '._x') are ignored; a single wrapping folder (e.g. `cifar10/train/...`) is looked through. Without
    `labels_required`, a folder whose images are not all inside class folders (a flat folder of photos)
    gives every image, by path, with no classes (class ids None)."""
    paths = [(i, n.split("/")) for i, n in enumerate(names)
             if is_image_name(n) and not any(p.startswith(".") for p in n.split("/"))]
    if not paths:
        raise InputError(f"{where}: no images found (expected train/<class>/*, test/<class>/* or <class>/*)")
    while len({p[0] for _, p in paths}) == 1 and paths[0][1][0] not in SPLIT_DIRS \
            and all(len(p) >= 3 for _, p in paths):
        paths = [(i, p[1:]) for i, p in paths]
    tops = {p[0] for _, p in paths}
    split = bool(tops & set(SPLIT_DIRS))
    if split:
        if {"test", "val"} <= tops:
            raise InputError(f"{where}: has both test/ and val/; keep one of them as the test part")
        extra = sorted(tops - set(SPLIT_DIRS))
        if extra:
            raise InputError(f"{where}: unexpected top-level folder {extra[0]!r} beside train/test")
    depth = 3 if split else 2
    for i, p in paths:
        if len(p) < depth and not labels_required:  # no classes: every image, by path
            return np.array(sorted((i for i, _ in paths), key=names.__getitem__), dtype=np.int64), None, None, []
        if len(p) < depth:
            raise InputError(f"{where}: image {names[i]!r} is not inside a class folder")
    cls = [p[depth - 2] for _, p in paths]
    class_names = sorted(set(cls))
    ids = {c: k for k, c in enumerate(class_names)}
    test = [split and SPLIT_DIRS[p[0]] for _, p in paths]
    order = sorted(range(len(paths)), key=lambda k: (test[k], ids[cls[k]], names[paths[k][0]]))
    positions = np.array([paths[k][0] for k in order], dtype=np.int64)
    class_ids = np.array([ids[cls[k]] for k in order], dtype=np.int64)
    is_test = np.array([test[k] for k in order], dtype=bool) if split else None
    return positions, class_ids, is_test, class_names


def read_list_file(path: Path, num_labels: int | None, root: ImageRoot):
    """Lines `relative/path.jpg 0 1 0 ...` -> (paths, (m, C) bool labels, line numbers). Paths, without
    whitespace, are normalised ('./a//b' -> 'a/b') and may not leave the image root (`root.check`)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read list file ({one_line(err)})") from None
    paths, rows, lines = [], [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        tokens = line.split()
        if not tokens:
            continue
        values = tokens[1:]
        if num_labels is None:
            num_labels = len(values)
            if num_labels == 0:
                raise InputError(f"{path}:{lineno}: no label values after the path")
        if len(values) != num_labels:
            raise InputError(f"{path}:{lineno}: {len(values)} label values, expected {num_labels}")
        bad = next((v for v in values if v not in ("0", "1")), None)
        if bad is not None:
            raise InputError(f"{path}:{lineno}: label value {bad!r} is not 0 or 1")
        paths.append(root.check(tokens[0], f"{path}:{lineno}: {tokens[0]!r}"))
        rows.append([v == "1" for v in values])
        lines.append(lineno)
    labels = np.array(rows, dtype=bool).reshape(len(rows), num_labels or 0)
    return paths, labels, lines
