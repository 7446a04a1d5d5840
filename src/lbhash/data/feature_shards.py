"""The feature cache's entries on disk, one row per photo (lbhash.data.feature_cache computes them).

`<cache dir>/features/<space>/` holds the features of one backbone seen one way: its name and weights,
the evaluation transform, the precision and the view (`feature_cache.space_key`, hashed into the
name). Inside it each computation leaves a shard, `<shard>/` with photos.npy (the SHA-256 of each
photo it holds, (m, 32) uint8: `photo_digests`), features.npy ((m, D) float32, row for row) and
meta.json (the space's key, both files' sizes and SHA-256). A request reads every shard's photos.npy,
then the features.npy of the shards that hold one of its photos, so a folder that grew computes
only its new or changed photos. Shards are written as the pixel cache's entries are (a temporary
directory, synced, renamed into place; lbhash.data.pixel_cache), checked against their SHA-256 on
every read (a corrupt one is removed with a warning and its photos computed again) and never
unpickled. Growth: a request that reads from more than MAX_SHARDS shards writes its photos as one
shard and removes those it read, which drops with them the rows of photos it did not ask for (a
changed photo's old features, a deleted one's): the cache of a folder edited many times holds
about one shard of its photos now, not one per version. Requests of new photos alone (queries: a
search's photos, uploads, edited copies) read no shard and leave one each; `compact` merges the shards
of one size tier (rows within a factor MAX_SHARDS) once MAX_SHARDS of them are there, so that a space
holds fewer than MAX_SHARDS shards a tier (a tier per factor of MAX_SHARDS in rows) and a lookup reads a
few files, where it read one per query ever made (benchmarks/bench_feature_shards.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import PIL

from lbhash._io import file_sha256
from lbhash.cpus import usable_cpus
from lbhash.data.pixel_cache import _publish, _remove, read_entry, write_entry

FORMAT = 2  # 1: one entry per whole set of images (a folder that grew missed it entirely)
MAX_SHARDS = 8  # shards one request may read before it merges them into one
_UNUSABLE = "feature cache shard is unusable (%s); computing its photos again"


def photo_digests(dataset, idx: np.ndarray) -> np.ndarray:
    """(len(idx), 32) uint8: the SHA-256 of each photo as the data set holds it: its file's bytes
    (with the Pillow version that decodes them) where it has a source, so that a photo already
    cached is never decoded, else its decoded pixels and their shape. A view's data set
    (lbhash.data.views) gives its photos' digests: the view is part of the space."""
    source = getattr(dataset, "source", None)
    if source is not None:
        prefix = f"file\0Pillow {PIL.__version__}\0".encode()

        def one(i: int) -> bytes:
            digest = hashlib.sha256(prefix)
            digest.update(source.read(i))  # (hashlib releases the GIL over large buffers: threads help)
            return digest.digest()

        with ThreadPoolExecutor(min(8, usable_cpus())) as pool:
            digests = list(pool.map(one, map(int, idx)))
    else:
        pixels = dataset.pixels
        digests = []
        for i in idx:
            photo = np.ascontiguousarray(pixels[int(i)])
            digest = hashlib.sha256(f"pixels\0{photo.shape}\0".encode())
            digest.update(photo.data)
            digests.append(digest.digest())
    return np.frombuffer(b"".join(digests), np.uint8).reshape(len(idx), 32).copy()


def space_dir(root: Path, key: dict) -> Path:
    return root / "features" / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def lookup(space: Path, digests: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, list[Path]]:
    """(features with a row per digest, undefined where not found (None: nothing found), the found mask,
    the shards they came from). A shard that fails its checksum is removed with a warning; one another
    process removed meanwhile is skipped (its photos are not found)."""
    want: dict[bytes, list[int]] = {}
    for k, d in enumerate(digests):
        want.setdefault(d.tobytes(), []).append(k)
    shards = _shards(space)
    where: dict[Path, tuple[list[int], list[int], int]] = {}  # shard -> (its rows, their positions, its size)
    for shard in shards:
        photos = read_entry(shard, "photos.npy", FORMAT, "photos_", _load_photos, _UNUSABLE)
        if photos is None:
            continue
        for row, d in enumerate(map(bytes, photos)):
            for k in want.pop(d, ()):  # (popped: a photo in two shards is read from the first)
                where.setdefault(shard, ([], [], len(photos)))[0].append(row)
                where[shard][1].append(k)
    found, features, used = np.zeros(len(digests), bool), None, []
    for shard, (rows, ks, size) in where.items():
        held = read_entry(shard, "features.npy", FORMAT, "", partial(_load_features, rows=size), _UNUSABLE)
        if held is None:
            continue
        if features is None:
            features = np.empty((len(digests), held.shape[1]), np.float32)
        if held.shape[1] != features.shape[1]:  # the space's key holds the weights: never two widths
            raise RuntimeError(f"{shard}: holds {held.shape[1]} features per photo, another shard {features.shape[1]}")
        features[ks] = held[rows]
        found[ks] = True
        used.append(shard)
    return features, found, used


def write_shard(space: Path, digests: np.ndarray, features: np.ndarray, key: dict) -> Path:
    """Write a shard of these photos' features (its name hashes their digests: two processes that
    computed the same photos write the same shard, and the second finds it there). CacheUnavailable
    when the cache cannot be written."""
    path = space / hashlib.sha256(digests.tobytes()).hexdigest()[:32]

    def write(tmp: Path) -> dict:
        np.save(tmp / "photos.npy", digests, allow_pickle=False)
        np.save(tmp / "features.npy", features, allow_pickle=False)
        return {**key, "format": FORMAT, "shape": list(features.shape),
                "photos_bytes": (tmp / "photos.npy").stat().st_size, "photos_sha256": file_sha256(tmp / "photos.npy")}

    write_entry(path, "features.npy", "", write, _publish, "{reason}", "{reason}")
    return path


def compact(space: Path, key: dict) -> int:
    """Merge the shards of each size tier (floor(log_MAX_SHARDS(rows))) that holds MAX_SHARDS of them into
    one of the next, again while a tier overflows; the shards merged (0: none). A shard another process
    retired meanwhile stops this merge (the next request compacts); rows of one photo in two are kept once."""
    merged = 0
    while True:
        tiers: dict[int, list[Path]] = {}
        for shard in _shards(space):
            rows = _rows(shard)
            if rows:
                tiers.setdefault(_tier(rows), []).append(shard)
        full = next((t for t in sorted(tiers) if len(tiers[t]) >= MAX_SHARDS), None)
        if full is None:
            return merged
        parts = [(read_entry(shard, "photos.npy", FORMAT, "photos_", _load_photos, _UNUSABLE), shard)
                 for shard in tiers[full]]
        if any(photos is None for photos, _ in parts):
            return merged
        held = [read_entry(shard, "features.npy", FORMAT, "", partial(_load_features, rows=len(photos)), _UNUSABLE)
                for photos, shard in parts]
        if any(h is None for h in held):
            return merged
        digests, features = np.concatenate([p for p, _ in parts]), np.concatenate(held)
        _, first = np.unique(digests, axis=0, return_index=True)
        first.sort()
        retire(tiers[full], keep=write_shard(space, digests[first], features[first], key))
        merged += len(tiers[full])


def _tier(rows: int) -> int:
    """floor(log_MAX_SHARDS(rows)), in integers (no rounding at a power of MAX_SHARDS)."""
    tier = 0
    while rows >= MAX_SHARDS:
        rows //= MAX_SHARDS
        tier += 1
    return tier


def _shards(space: Path) -> list[Path]:
    return sorted(p for p in space.iterdir() if not p.name.startswith(".") and p.is_dir()) if space.is_dir() else []


def _rows(shard: Path) -> int:
    """A shard's photo count from its meta.json (0 where it cannot be read: compaction leaves it be)."""
    try:
        return int(json.loads((shard / "meta.json").read_text())["shape"][0])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return 0


def retire(shards: list[Path], keep: Path) -> None:
    """Remove the shards a merged one replaced: each is first renamed aside, so that a process
    reading the space finds a whole shard or none."""
    for shard in shards:
        if shard == keep:
            continue
        aside = shard.parent / f".{shard.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.old"
        try:
            os.rename(shard, aside)
        except OSError:  # gone already (another process merged it) or not ours to move: left as it is
            continue
        _remove(aside)


def _load_photos(file: Path) -> np.ndarray:
    photos = np.load(file, allow_pickle=False)
    if photos.dtype != np.uint8 or photos.ndim != 2 or photos.shape[1] != 32:
        raise ValueError(f"holds {photos.dtype} {photos.shape}, expected (m, 32) uint8 digests")
    return photos


def _load_features(file: Path, rows: int) -> np.ndarray:
    features = np.load(file, allow_pickle=False)
    if features.dtype != np.float32 or features.ndim != 2 or len(features) != rows:
        raise ValueError(f"holds {features.dtype} {features.shape}, expected {rows} rows of float32")
    return features
