"""A small index with planted copies, for the tests of the service's duplicates (GET /duplicates and the
page's view of them): hand-built as tests/cli/test_duplicate_groups.py builds its own."""

import shutil

import numpy as np

from lbhash.index import CodeIndex
from lbhash.instance import MARK_KEY
from lbhash.indexes.instance_codes import attach, fit_transform, payload_of

DIM = 24
OWNERS = (0, 0, 0, 1, 1, 2, 3)  # the photo each copy is of: 3 copies of item 0, 2 of item 1, one of 2 and 3


def copies_index(path, rng, n: int = 60, owners=OWNERS, tree=None, mark: float | None = 0.9):
    """An index at `path` of `n` photos' embeddings (positive, as pooled features are) and a copy of
    `owners` each, a small step away (ids n, n + 1, ...), with float rows, 16-bit instance codes and a
    calibrated cosine mark of `mark` (None: none). `tree`: a folder of images (tests/page_helpers.py's
    `make_image_tree`) of exactly n + len(owners) images, recorded as the items' sources, each copy's
    file made a copy of its photo's first. Returns (path, the embeddings, by id)."""
    base = np.abs(rng.standard_normal((n, DIM))) + 0.2
    emb = np.concatenate([base, base[list(owners)] + 0.05 * rng.standard_normal((len(owners), DIM))])
    transform = fit_transform(emb, 16)
    index = CodeIndex(16, instance_bits=16, embedding_dim=DIM)
    attach(index, transform, "the test's items")
    rows, inst = payload_of(transform, index, emb, len(emb), "items")
    index.add(rng.integers(0, 256, (len(emb), 2), dtype=np.uint8), embeddings=rows, instance=inst)
    if mark is not None:
        index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": mark}
    if tree is not None:
        from lbhash.data import load_data
        from lbhash.indexes.origins import dataset_sources, record_sources

        spec = f"images:{tree}"
        files = dataset_sources(load_data(spec, labels_required=False), np.arange(len(emb)))
        assert len(files) == len(emb), (len(files), len(emb))
        for copy, owner in enumerate(owners, n):
            shutil.copyfile(files[owner], files[copy])
        assert record_sources(index, spec, list(range(len(emb)))) == len(emb)
    index.save(path)
    return path, emb
