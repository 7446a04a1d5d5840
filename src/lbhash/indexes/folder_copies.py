"""A folder of photos with no run, as `lbhash duplicates FOLDER` searches it: an index made in memory.

Each photo is embedded by the pretrained `BACKBONE` (its ImageNet weights, frozen, at `SIZE` px: the
README's own-folder recipe without the training), less its one-colour margins (lbhash.data.edits.trimmed:
a bordered or letterboxed copy then embeds as its photo does). The instance code is learned on the folder's own
photos (lbhash.indexes.instance_learning.learn_transform: `COPIES` random edited copies of each, the
whitening of what edits do to an embedding) where there are at least MIN_LEARN_PHOTOS of them, else
ITQ of their embeddings; the float rows are kept, in the code's space, and pairs are scored by their
margin over their neighbours (lbhash.indexes.duplicates). The class code is empty (8 zero bits): a folder
has no classes, and the search that pairs photos ranks by their look alone.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from lbhash.data.edits import trimmed
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.instance import InstanceTransform
from lbhash.indexes import index_inputs
from lbhash.indexes.instance_codes import attach, payload_of
from lbhash.indexes.instance_learning import MIN_LEARN_PHOTOS, learn_transform

logger = logging.getLogger("lbhash")

BACKBONE, SIZE = "efficientnet_lite0", 160
INSTANCE_BITS = 256
CHUNK = 64  # photos embedded between two progress lines
COPIES = 2  # edited copies of each photo the code learns from (validation: 1, 2 and 4 alike; 2 the cheapest best)


def folder_index(folder) -> CodeIndex:
    """An in-memory index of the photos under `folder` (any image files, subfolders included), with the
    `folder_sources` attribute (each id's file)."""
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

    started, rows = time.perf_counter(), []
    for start in range(0, len(readable), CHUNK):
        rows.append(embed([dataset.image(int(i)) for i in readable[start:start + CHUNK]]))
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
    index = CodeIndex(8, instance_bits=transform.bits, embedding_dim=transform.float_map.shape[1]
                      if transform.maps_floats else emb.shape[1])
    attach(index, transform, f"{transform.method} code of the {len(emb)} photos of {folder}")
    kept, instance = payload_of(transform, index, emb, len(emb), "the photos")
    index.add(np.zeros((len(emb), 1), np.uint8), embeddings=kept, instance=instance)
    index.folder_sources = [str(s) for s in dataset.item_sources(readable).tolist()]
    return index


class _Readable:
    """The folder's photos that decode, by their row in the index (what the code learns from)."""

    def __init__(self, dataset, readable: np.ndarray):
        self.dataset, self.readable = dataset, readable

    def image(self, row: int) -> np.ndarray:
        return self.dataset.image(int(self.readable[row]))
