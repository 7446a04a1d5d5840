"""A folder of photos with no run, as `lbhash duplicates FOLDER` searches it: an index made in memory.

Each photo is embedded by the pretrained `BACKBONE` (its ImageNet weights, frozen, at `SIZE` px: the
README's own-folder recipe without the training), less its one-colour margins (lbhash.data.edits.trimmed:
a bordered or letterboxed copy then embeds as its photo does), and hashed by pHash (lbhash.data.perceptual,
the photo as it is). The instance code is learned on the folder's own photos
(lbhash.indexes.instance_learning.learn_transform: `COPIES` random edited copies of each, the whitening of
what edits do to an embedding) where there are at least MIN_LEARN_PHOTOS of them, else ITQ of their
embeddings. The float rows join the two: a pair's dot product is `LOOK_WEIGHT` of their pHash agreement and
the rest of their cosine in the code's space (`folder_rows`), and pairs are scored by their margin over their
neighbours (lbhash.indexes.duplicates). The class code is empty (8 zero bits): a folder has no classes, and the
search that pairs photos ranks by their look alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lbhash.data.edits import trimmed
from lbhash.data.perceptual import BITS as PHASH_BITS, phash_signs
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.instance import InstanceTransform
from lbhash.indexes import index_inputs
from lbhash.indexes.instance_codes import attach
from lbhash.indexes.instance_learning import MIN_LEARN_PHOTOS, cosine_rows, learn_transform

logger = logging.getLogger("lbhash")

BACKBONE, SIZE = "efficientnet_lite0", 160
INSTANCE_BITS = 256
CHUNK = 64  # photos embedded between two progress lines
COPIES = 2  # edited copies of each photo the code learns from (validation: 1, 2 and 4 alike; 2 the cheapest best)
# a pair's similarity: this share of their pHash agreement, the rest their cosine (the validation folder: 0.2-0.4
# found all 50 planted pairs and reported no other, 0 found 48; docs/results/duplicates.md)
LOOK_WEIGHT = 0.3


def folder_index(folder) -> CodeIndex:
    """An in-memory index of the photos under `folder` (any image files, subfolders included), with the
    `folder_sources` attribute (each id's file)."""
    return looks_index(folder_photos(folder), folder)


@dataclass(frozen=True)
class FolderPhotos:
    """What `folder_photos` read of a folder: the photos' embeddings (n, d), their pHash signs (n, 64), the
    instance transform learned on them (or ITQ) and each photo's file."""

    embeddings: np.ndarray
    signs: np.ndarray
    transform: InstanceTransform
    sources: list[str]


def folder_photos(folder) -> FolderPhotos:
    """The photos of `folder` embedded, hashed and coded (the minutes of `folder_index`)."""
    from lbhash.data import check_images, load_data

    dataset = load_data(f"images:{Path(folder)}", labels_required=False)
    readable, skipped = check_images(dataset, skip_bad=True)  # (files that do not decode: skipped and counted)
    if skipped:
        logger.info("duplicates: %d of %d files in %s skipped (they do not decode as images)", skipped, len(dataset),
                    folder)
    if len(readable) < 2:
        raise InputError(f"{folder}: {len(readable)} photo(s) that decode; finding copies needs two at least")
    backbone = index_inputs.backbone_embedder(BACKBONE, SIZE)

    def embed(images: list) -> np.ndarray:  # (each photo less its one-colour frame: a framed copy's is the same)
        return backbone([trimmed(img) for img in images])

    started, rows, hashes = time.perf_counter(), [], []
    for start in range(0, len(readable), CHUNK):
        images = [dataset.image(int(i)) for i in readable[start:start + CHUNK]]
        rows.append(embed(images))
        hashes.append(phash_signs(images))
        logger.info("duplicates: %d of %d photos embedded (%.0f s)", min(len(readable), start + CHUNK), len(readable),
                    time.perf_counter() - started)
    emb = np.concatenate(rows)
    bits = min(INSTANCE_BITS, emb.shape[1] // 8 * 8)
    photos = _Readable(dataset, readable)
    transform, why = learn_transform(embed, photos, np.arange(len(emb)), emb, bits, copies=COPIES) \
        if len(emb) >= MIN_LEARN_PHOTOS else (None, f"{len(emb)} photos are too few to learn a code on (at least "
                                                    f"{MIN_LEARN_PHOTOS}): ITQ of their embeddings")
    if transform is None:
        logger.info("duplicates: %s", why)
        transform = InstanceTransform.fit(emb, bits, "itq")
    return FolderPhotos(emb, np.concatenate(hashes), transform, [str(s) for s in dataset.item_sources(readable).tolist()])


def looks_index(photos: FolderPhotos, folder, look_weight: float = LOOK_WEIGHT) -> CodeIndex:
    """The in-memory index of a folder's `photos`: their instance codes and their `folder_rows`."""
    looks = folder_rows(photos.transform, photos.embeddings, photos.signs, look_weight)
    transform = photos.transform
    if not transform.maps_floats:  # (its rows are kept as they come, as a learned code's are: the identity map)
        transform = replace(transform, float_map=np.eye(transform.dim))
    index = CodeIndex(8, instance_bits=transform.bits, embedding_dim=looks.shape[1])
    attach(index, transform, f"{transform.method} code of the {len(looks)} photos of {folder}")
    index.add(np.zeros((len(looks), 1), np.uint8), embeddings=looks, instance=transform.apply(photos.embeddings))
    index.folder_sources = list(photos.sources)
    return index


def folder_rows(transform: InstanceTransform, emb: np.ndarray, signs: np.ndarray,
                look_weight: float = LOOK_WEIGHT) -> np.ndarray:
    """float32 unit rows (n, r + 64) whose dot product is a pair's similarity: (1 - look_weight) x the cosine of
    the photos' embeddings (in the learned code's space, or centred: `cosine_rows`) + look_weight x the share of
    their pHash bits (`signs`, +1 and -1) that agree less the share that differ."""
    cosine = cosine_rows(transform, emb)
    return np.hstack([np.sqrt(1 - look_weight) * cosine, np.sqrt(look_weight / PHASH_BITS) * signs]).astype(np.float32)


class _Readable:
    """The folder's photos that decode, by their row in the index (what the code learns from)."""

    def __init__(self, dataset, readable: np.ndarray):
        self.dataset, self.readable = dataset, readable

    def image(self, row: int) -> np.ndarray:
        return self.dataset.image(int(self.readable[row]))
