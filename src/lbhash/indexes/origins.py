"""Where each indexed item came from, reading its image back from there alone, and thumbnails.

An index built from a run records each id's source (a file under a folder, `TARBALL:MEMBER`, or
`FILE row N`) in `sources.json`, an attachment of the index directory:

    {"format": "lbhash-sources/1", "data": DATA SPEC (absolute paths), "class_names": [...] or null,
     "prefix": common prefix of the sources, "ids": [...], "sources": [source minus prefix, ...],
     "stamps": [[size, mtime_ns], ...] (files under a folder only; records before 2026-11-25 lack it)}

`DataImages` reads an item from the recorded data spec only where the data set names its
recorded source now (its recorded position, or where a re-listed folder or tarball moved it: one
file gone does not take the others' images with it); a file must also stay inside its folder and
keep its recorded size and mtime: no path from a request is ever opened. Feature
data records only its class names, when it has real ones.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading

import numpy as np

from lbhash.errors import InputError
from lbhash.limits import MAX_IMAGE_PIXELS, MAX_SOURCE_BYTES, THUMBNAIL_SIDE

SOURCES = "sources.json"
FORMAT = "lbhash-sources/1"


def dataset_sources(dataset, positions) -> list[str] | None:
    """Sources of the items at `positions` (files, members, rows of images); None for feature data."""
    if getattr(dataset, "input_kind", None) != "images":
        return None
    found = dataset.item_sources(positions)
    return None if found is None else [str(s) for s in found.tolist()]


def record_sources(index, data_spec: str, ids) -> int:
    """Record where the items `ids` (positions in `data_spec`) came from, and the data's class
    names, in `index`'s attachments; returns how many sources were recorded (0 for feature
    data, whose class names alone are recorded when it has them)."""
    from lbhash.data import absolute_spec, load_data

    spec = absolute_spec(data_spec)
    dataset = load_data(spec, labels_required=False)
    ids = np.asarray(ids, np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(dataset)):
        raise InputError(f"ids are not positions in {spec} ({len(dataset)} items)")
    sources = dataset_sources(dataset, ids)
    if sources is None:  # feature rows: no images, but their classes may have names
        record_class_names(index, spec, getattr(dataset, "class_names", None))
        return 0
    prefix = os.path.commonprefix(sources) if len(sources) > 1 else ""
    body = {"format": FORMAT, "data": spec, "class_names": getattr(dataset, "class_names", None),
            "prefix": prefix, "ids": ids.tolist(), "sources": [s[len(prefix):] for s in sources]}
    if hasattr(getattr(dataset, "source", None), "stamp"):  # files: a swapped one is refused later
        try:
            body["stamps"] = [list(dataset.source.stamp(int(i))) for i in ids]
        except OSError as err:
            raise InputError(f"cannot read the size of an image file ({err})") from None
    _attach(index, body)
    return len(ids)


def record_class_names(index, data_spec: str, names) -> None:
    """Record the class names of feature data (no sources: its rows are not images) in `index`'s
    attachments; nothing for no names, or names that are only the ids ("0".."9": the digits)."""
    if not names or list(names) == [str(c) for c in range(len(names))]:
        return
    from lbhash.data import absolute_spec

    _attach(index, {"format": FORMAT, "data": absolute_spec(data_spec), "class_names": [str(n) for n in names],
                    "prefix": "", "ids": [], "sources": []})


def _attach(index, body: dict) -> None:
    attachments = dict(getattr(index, "attachments", None) or {})
    attachments[SOURCES] = json.dumps(body, separators=(",", ":")).encode()
    index.attachments = attachments


class SourceRecord:
    """The parsed sources.json of an index: `data`, `class_names`, `source(id)`."""

    def __init__(self, body: dict, where: str):
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise InputError(f"{where}: not an lbhash sources record")
        ids, sources = body.get("ids"), body.get("sources")
        if not isinstance(ids, list) or not isinstance(sources, list) or len(ids) != len(sources):
            raise InputError(f"{where}: 'ids' and 'sources' must be lists of one length")
        self.data, self.class_names = str(body["data"]), body.get("class_names")
        prefix = str(body.get("prefix", ""))
        self._where = {int(i): prefix + str(s) for i, s in zip(ids, sources)}
        stamps = body.get("stamps")
        if stamps is not None and (not isinstance(stamps, list) or len(stamps) != len(ids)):
            raise InputError(f"{where}: 'stamps' must be a list as long as 'ids'")
        self._stamps = {} if stamps is None else {int(i): (int(s[0]), int(s[1])) for i, s in zip(ids, stamps)}

    def stamp(self, item_id: int) -> tuple[int, int] | None:
        """(size, mtime_ns) of the item's file when the index was built, or None."""
        return self._stamps.get(int(item_id))

    def __len__(self) -> int:
        return len(self._where)

    def source(self, item_id: int) -> str | None:
        return self._where.get(int(item_id))


def read_sources(index) -> SourceRecord | None:
    """The index's sources record, or None when it has none."""
    blob = (getattr(index, "attachments", None) or {}).get(SOURCES)
    if blob is None:
        return None
    try:
        return SourceRecord(json.loads(blob), SOURCES)
    except (ValueError, UnicodeDecodeError, KeyError) as err:
        raise InputError(f"{SOURCES}: not readable ({' '.join(str(err).split())})") from None


def forget_sources(index, ids) -> None:
    """Drop the records of `ids` (items removed or replaced: their old image is not theirs)."""
    record = read_sources(index)
    if record is None:
        return
    body = json.loads(index.attachments[SOURCES])
    drop = set(np.asarray(ids, np.int64).tolist())
    keep = [k for k, i in enumerate(body["ids"]) if i not in drop]
    if len(keep) == len(body["ids"]):
        return
    for key in ("ids", "sources", "stamps"):
        if key in body:
            body[key] = [body[key][k] for k in keep]
    _attach(index, body)


class DataImages:
    """Items' images read from a sources record's data set (loaded once, on first use); the files of
    a folder of images (`images:DIR`) are read by their recorded names, with no listing at all."""

    def __init__(self, record: SourceRecord):
        self.record, self.folder = record, _image_folder(record.data)
        self._dataset, self._lock = None, threading.Lock()

    def _data(self):
        with self._lock:
            if self._dataset is None:
                from lbhash.data import load_data

                self._dataset = load_data(self.record.data, labels_required=False)
            return self._dataset

    def warm(self) -> None:
        """Load the data set ahead of the first read; a failure is left for that read to report."""
        if self.folder is not None:  # nothing to load
            return
        try:
            self._data()
        except Exception:  # noqa: BLE001 (reported, in one line, by the read that needs the data)
            pass

    def read(self, item_id: int) -> bytes | np.ndarray:
        """Item `item_id`'s encoded bytes (files, members) or (H, W, 3) uint8 pixels (rows),
        from its recorded source only; InputError when it has none or the data changed."""
        item_id = int(item_id)
        recorded = self.record.source(item_id)
        if recorded is None:
            raise InputError(f"item {item_id} has no recorded source")
        if self.folder is not None and recorded.startswith(os.path.join(self.folder, "")):
            # the folder is not listed again: one file planted or gone there (a link out fails a whole
            # listing) leaves the other files as they are; this one is read under the same guards
            from lbhash.data.image_sources import FileSource

            name = recorded[len(os.path.join(self.folder, "")):]
            return FileSource(self.folder, [name]).read_guarded(0, MAX_SOURCE_BYTES, self.record.stamp(item_id))
        dataset = self._data()
        at = self._position(dataset, item_id, recorded)
        if hasattr(dataset.source, "read_guarded"):  # a file under a folder: never followed elsewhere
            return dataset.source.read_guarded(at, MAX_SOURCE_BYTES, self.record.stamp(item_id))
        if dataset.source is not None:
            return dataset.source.read(at)
        return np.asarray(dataset.pixels[at])

    def _position(self, dataset, item_id: int, recorded: str) -> int:
        """Where the data set names the item's recorded source now: its id (the position it was
        indexed at), or, once files were added or removed since (a folder listed again shifts),
        wherever that name is now; each item is found by its own name, whatever became of others."""
        if 0 <= item_id < len(dataset) and dataset_sources(dataset, [item_id])[0] == recorded:
            return item_id
        find = getattr(dataset.source, "position", None)
        at = find(recorded) if find is not None else None
        if at is None:
            raise InputError(f"item {item_id}: its recorded source {recorded} is no longer in {self.record.data} "
                             "(the data changed: moved, removed or no longer an image file)")
        return at


def _image_folder(spec: str) -> str | None:
    """The folder of an `images:DIR` data spec (DIR a folder, not a tarball), else None."""
    from lbhash.data.spec import parse_data_spec

    try:
        parsed = parse_data_spec(spec)
    except InputError:
        return None  # (a kind unknown here: its load says so)
    return parsed.path if parsed.kind == "images" and os.path.isdir(parsed.path) else None


def thumbnail_png(image: bytes | np.ndarray, where: str, side: int = THUMBNAIL_SIDE,
                  max_pixels: int = MAX_IMAGE_PIXELS, decoding=None) -> bytes:
    """A PNG of at most side x side pixels (aspect kept, never enlarged) of encoded bytes or an
    (H, W, 3) uint8 array; RGB as training decodes it (other modes converted, alpha dropped).
    Encoded bytes are decoded within `decoding` (its `hold(pixels, where)`: the service's budget of
    pixels decoded at once)."""
    from PIL import Image

    try:
        if isinstance(image, np.ndarray):
            im, hold = Image.fromarray(np.ascontiguousarray(image)), contextlib.nullcontext()
        else:
            from lbhash.data.image_sources import open_image

            im = open_image(image)  # (a format that may decode more than its header says is refused)
            if im.width * im.height > max_pixels:
                raise InputError(f"{where}: {im.width} x {im.height} pixels, more than the {max_pixels} a "
                                 "thumbnail is decoded from")
            if im.format == "JPEG":
                im.draft("RGB", (2 * side, 2 * side))  # decode big JPEGs at a reduced scale
            hold = decoding.hold(im.width * im.height, where) if decoding is not None else contextlib.nullcontext()
        with hold:
            im.load()
            im = im if im.mode == "RGB" else im.convert("RGB")
            im.thumbnail((side, side))
            out = io.BytesIO()
            im.save(out, format="PNG")
            return out.getvalue()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        from lbhash.data.image_sources import image_error

        raise InputError(f"{where}: cannot decode image ({image_error(err)})") from None
