"""The validation figures behind the item views and the chunk tables (docs/instance-codes.md, "Item views" and
"Cost at scale"), on the validation photos of `studies/duplicates_table.py --start 0` (OUT: its output).

    python studies/item_views.py OUT/photos OUT/run OUT/idx

1. Exact centred cosine over every photo, recall@1 of 200 edited copies per edit (seed 0): the items
   embedded as the photo alone, as the mean of the photo and a view (PIL's Gaussian of 0.8 px, scaled to
   0.6 or 0.5 of each side and back), and as lbhash.data.views makes them (sigma 0.5, 0.8, 1.2 at weights 1
   and 0.5). The queries are the copies, embedded as they come.
2. Chunk agreement of the copies' instance codes with their originals' in the index (`OUT/idx`, made with
   the views): the share of copies whose original shares a 16-bit chunk (16 disjoint chunks; 31 chunks
   starting every 8 bits), exactly or within one bit, whatever the index's size (lbhash.index._lookup).
3. The same-picture thresholds (lbhash.instance SAME_COSINE, SAME_INSTANCE) on those copies: the share of
   originals whose centred cosine (the index keeps float rows) or instance distance passes, and the share
   of copies whose best other item passes.
About 5 minutes on 2 cores (about 7,000 forward passes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from lbhash.data.edits import EDITS
from lbhash.data.views import blurred
from lbhash.index import CodeIndex
from lbhash.indexes import index_inputs
from lbhash.serving.copies_evaluation import make_copies


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def scaled(img: np.ndarray, share: float) -> np.ndarray:
    h, w = img.shape[:2]
    small = Image.fromarray(img).resize((round(w * share), round(h * share)), Image.BILINEAR)
    return np.asarray(small.resize((w, h), Image.BILINEAR))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("index", type=Path)
    args = parser.parse_args()
    encoder = index_inputs.query_encoder(args.run)
    files = sorted(args.photos.glob("*/*.jpg"))
    photos = [np.asarray(Image.open(f).convert("RGB")) for f in files]
    pick = np.sort(np.random.default_rng(0).choice(len(photos), 200, replace=False))

    def embed(images):
        return unit(encoder.outputs(images)[1].astype(np.float64))

    alone = embed(photos)
    copies = {e: embed([edit(photos[i]) for i in pick]) for e, edit in EDITS.items()}

    def report(name: str, items: np.ndarray) -> None:
        items = unit(items)  # (an index keeps unit rows; the cosine is centred on their mean)
        center = items.mean(0)
        rows = unit(items - center)
        found = [np.mean((unit(q - center) @ rows.T).argmax(1) == pick) for q in copies.values()]
        print(f"{name:34s}", " / ".join(f"{r:.3f}" for r in found), flush=True)

    print("items                              " + " / ".join(EDITS))
    report("the photo alone", alone)
    for name, view in (("mean with PIL Gaussian 0.8", lambda x: np.asarray(Image.fromarray(x).filter(
            ImageFilter.GaussianBlur(0.8)))), ("mean with scaled 0.6", lambda x: scaled(x, 0.6)),
            ("mean with scaled 0.5", lambda x: scaled(x, 0.5))):
        report(name, alone + embed([view(x) for x in photos]))
    for sigma in (0.5, 0.8, 1.2):
        views = embed([blurred(x, sigma) for x in photos])
        for weight in (1.0, 0.5):
            report(f"lbhash view sigma {sigma} weight {weight}", alone + weight * views)

    index = CodeIndex.load(args.index)
    found = make_copies(index, encoder, 200, 0)
    originals = np.unpackbits(np.asarray(index.get_instance_codes(found.ids)), axis=1)
    print("chunk agreement (exact / within one bit) " + " / ".join(found.queries))
    for step, label in ((16, "16 disjoint 16-bit chunks"), (8, "31 chunks every 8 bits")):
        cells = []
        for q in found.queries.values():
            diff = np.unpackbits(q.instance, axis=1) != originals
            bits = diff.shape[1]
            chunks = np.stack([diff[:, s:s + 16].sum(1) for s in range(0, bits - 15, step)], axis=1)
            cells.append(f"{np.mean((chunks == 0).any(1)):.3f}/{np.mean((chunks <= 1).any(1)):.3f}")
        print(f"{label:40s}", " ".join(cells), flush=True)
    calibrate(index, found)


def calibrate(index: CodeIndex, found) -> None:
    ids = index.ids()
    rows = np.searchsorted(ids, found.ids)
    items = index.get_embeddings(ids).astype(np.float64)
    codes = np.unpackbits(np.asarray(index.get_instance_codes(ids)), axis=1)
    original_cos, other_cos, original_d, other_d = [], [], [], []
    for q in found.queries.values():
        center = q.center
        stored = unit(unit(items) - center)
        cos = unit(unit(q.embeddings.astype(np.float64)) - center) @ stored.T
        dist = (np.unpackbits(q.instance, axis=1)[:, None, :] != codes[None]).mean(2)
        r = np.arange(len(rows))
        original_cos += cos[r, rows].tolist()
        original_d += dist[r, rows].tolist()
        cos[r, rows], dist[r, rows] = -9.0, 9.0
        other_cos += cos.max(1).tolist()
        other_d += dist.min(1).tolist()
    oc, xc, od, xd = map(np.array, (original_cos, other_cos, original_d, other_d))
    for t in (0.6, 0.65, 0.7, 0.75, 0.8):
        print(f"centred cosine >= {t}: originals {np.mean(oc >= t):.3f}, best other {np.mean(xc >= t):.3f}")
    for t in (0.1, 0.15, 0.2, 0.25):
        print(f"instance distance <= {t}: originals {np.mean(od <= t):.3f}, best other {np.mean(xd <= t):.3f}")


if __name__ == "__main__":
    main()
