"""A folder of photos with no run, as `lbhash duplicates FOLDER` searches it: an index made in memory.

Each photo is embedded by the pretrained `BACKBONE` (its ImageNet weights, frozen, at `SIZE` px: the
README's own-folder recipe without the training); the instance code is the unlearned one, ITQ of the
folder's own embeddings (`INSTANCE_BITS`; learning it from edited copies, as `lbhash index build`
does for a run, costs five times the embedding), and the float rows are kept, so pairs are scored by
the centred cosine. The same-picture mark is calibrated as an index's is (lbhash.runs.instance_learning:
copies of up to 200 of the photos under every named edit, at most 0.1% of other photos passing), or
not where the folder is too small (then `--threshold` is needed). The class code is empty (8 zero bits):
a folder has no classes, and the search that pairs photos ranks by their look alone.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.instance import MARK_KEY, InstanceTransform
from lbhash.runs import index_inputs
from lbhash.runs.instance_codes import attach, payload_of
from lbhash.runs.instance_learning import calibrate_mark, held_photos

logger = logging.getLogger("lbhash")

BACKBONE, SIZE = "efficientnet_lite0", 160
INSTANCE_BITS = 256
CHUNK = 64  # photos embedded between two progress lines


def folder_index(folder, calibrate: bool = True) -> CodeIndex:
    """An in-memory index of the photos under `folder` (any image files, subfolders included), with the
    `folder_sources` attribute (each id's file) and, where `calibrate`, its calibrated mark."""
    from lbhash.data import check_images, load_data

    dataset = load_data(f"images:{Path(folder)}", labels_required=False)
    readable, skipped = check_images(dataset, skip_bad=True)  # (files that do not decode: skipped and counted)
    if skipped:
        logger.info("duplicates: %d of %d files in %s skipped (they do not decode as images)", skipped, len(dataset),
                    folder)
    if len(readable) < 2:
        raise InputError(f"{folder}: {len(readable)} photo(s) that decode; finding copies needs two at least")
    embed = index_inputs.backbone_embedder(BACKBONE, SIZE)
    started, rows = time.perf_counter(), []
    for start in range(0, len(readable), CHUNK):
        rows.append(embed([dataset.image(int(i)) for i in readable[start:start + CHUNK]]))
        logger.info("duplicates: %d of %d photos embedded (%.0f s)", min(len(readable), start + CHUNK), len(readable),
                    time.perf_counter() - started)
    emb = np.concatenate(rows)
    transform = InstanceTransform.fit(emb, min(INSTANCE_BITS, emb.shape[1] // 8 * 8), "itq")
    index = CodeIndex(8, instance_bits=transform.bits, embedding_dim=emb.shape[1])
    attach(index, transform, f"ITQ of the {len(emb)} photos of {folder}")
    kept, instance = payload_of(transform, index, emb, len(emb), "the photos")
    index.add(np.zeros((len(emb), 1), np.uint8), embeddings=kept, instance=instance)
    if calibrate:
        held = held_photos(np.arange(len(emb)))  # (rows of the index; their photos are readable[held])
        index.metadata[MARK_KEY] = calibrate_mark(embed, _Readable(dataset, readable), held, held, transform,
                                                  instance, emb)
    index.folder_sources = [str(s) for s in dataset.item_sources(readable).tolist()]
    return index


class _Readable:
    """The folder's photos that decode, by their row in the index (what the calibration reads)."""

    def __init__(self, dataset, readable: np.ndarray):
        self.dataset, self.readable = dataset, readable

    def image(self, row: int) -> np.ndarray:
        return self.dataset.image(int(self.readable[row]))
