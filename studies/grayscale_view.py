"""Issue 86: the weights of the grayscale and framed item views (lbhash.data.views, GRAY_WEIGHT,
FRAME_WEIGHT), and trimming one-colour margins on both sides (lbhash.data.edits.trimmed), chosen on
validation photos: the run of
`studies/copies_table.py --start 0 --seed 0` (OUT/run, 1,500 CIFAR-10 training JPEGs, frozen Lite0).

    python studies/grayscale_view.py OUT/run CACHE

For each variant (the photos as they are; every photo, copy and query trimmed first), every photo is
embedded with its blurred and grayscale views, 4 random chains of each training photo (those the learned
code learns from, lbhash.indexes.instance_learning) and the 200 held-out photos under every named edit;
then for each grayscale weight (0, 0.25, 0.5, 1), and with the grayscale view at 0.5 for each framed
view (the photo shrunk to 0.8 or 0.65 of each side in a mid-grey frame) at 0.25 and 0.5, the learned transform is fitted on the training photos'
item embeddings and their copies (InstanceTransform.learn, 256 bits), and each copy searches every photo:
recall@1 of its original by the exact cosine of the learned float rows, and by the Hamming distance of
the 256-bit instance codes (a tie at the original's distance counts 1 / the tied items). Embeddings are
kept in CACHE (an .npz per variant; about 12,000 forward passes each, 5-10 minutes on 2 cores).
Prints one table (docs/results/copies.md, "The grayscale and framed views").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lbhash.codes import hamming_distance
from lbhash.data.edits import EDITS, edited, framed, grayscale, random_edit, trimmed
from lbhash.data.views import BLUR_VIEW, blurred
from lbhash.instance import InstanceTransform, unit_vectors
from lbhash.indexes import index_inputs
from lbhash.indexes.instance_learning import COPIES, held_photos

WEIGHTS = (0.0, 0.25, 0.5, 1.0)
FRAMES = {"frame 0.8": 0.8, "frame 0.65": 0.65}  # the framed view's share of each side (mid-grey frame)
FRAME_WEIGHTS = (0.25, 0.5)
VARIANTS = {"as they are": lambda img: img, "trimmed": trimmed}


def embedded(run: str, cache: Path, name: str, pre, photos, train, held) -> dict:
    """The variant's embeddings (cached): photos, their blurred and grayscale views, the training photos'
    random copies (and their owners), the held-out photos under each named edit."""
    path = cache / f"{name.replace(' ', '-')}.npz"
    if path.exists():
        return dict(np.load(path))
    embed = index_inputs.photo_embedder(run)

    def through(images, chunk=256):
        return np.concatenate([embed(images[s:s + chunk]) for s in range(0, len(images), chunk)])

    seen = [pre(photos.image(i)) for i in range(len(photos))]
    views, owners = [], []
    for i in train.tolist():
        rng = np.random.default_rng((0, i))
        img = photos.image(i)
        views.extend(pre(random_edit(img, rng)) for _ in range(COPIES))
        owners.extend([i] * COPIES)
    out = {"photo": through(seen), "blur": through([blurred(p) for p in seen]),
           "gray": through([grayscale(p) for p in seen]), "copies": through(views), "owners": np.array(owners),
           **{frame: through([framed(p, share, share, (128, 128, 128)) for p in seen]) for frame, share in FRAMES.items()},
           **{f"edit_{e}": through([pre(edited(photos.image(i), e)) for i in held.tolist()]) for e in EDITS}}
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out


def recalls(d: dict, weight: float, train, held, frame: str | None = None,
            frame_weight: float = 0.0) -> tuple[list[float], list[float]]:
    """(cosine recall@1, instance-code recall@1) per named edit at this grayscale weight (and framed view)."""
    u = lambda x: unit_vectors(np.asarray(x, np.float64))  # noqa: E731
    total = u(d["photo"]) + 0.5 * u(d["blur"]) + weight * u(d["gray"])
    if frame is not None:
        total = total + frame_weight * u(d[frame])
    items = (total / (1.5 + weight + frame_weight)).astype(np.float32)
    transform = InstanceTransform.learn(items[train], d["copies"], np.searchsorted(train, d["owners"]), 256, 0)
    rows, codes, q = transform.rows(items), transform.apply(items), np.arange(len(held))
    by_cosine, by_code = [], []
    for e in EDITS:
        sims = transform.rows(d[f"edit_{e}"]) @ rows.T
        by_cosine.append(float(np.mean(sims[q, held] >= sims.max(axis=1))))
        dist = hamming_distance(transform.apply(d[f"edit_{e}"]), codes, 256).astype(np.int64)
        own = dist[q, held][:, None]
        by_code.append(float(np.mean(((dist < own).sum(axis=1) == 0) / (dist == own).sum(axis=1))))
    return by_cosine, by_code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("cache", type=Path)
    args = parser.parse_args()
    photos = index_inputs.run_photos(args.run, index_inputs.run_data(args.run))
    held = held_photos(np.arange(len(photos)))
    train = np.asarray(index_inputs.run_training_items(args.run))
    train = np.sort(train[~np.isin(train, held)])
    print(f"{len(photos)} photos, {len(train)} learned from, {len(held)} held out; before: {BLUR_VIEW} alone "
          "(weight 0)\n")
    print("| photos | grayscale weight | framed view | search | " + " | ".join(EDITS) + " | mean | worst |")
    print("|---" * (len(EDITS) + 6) + "|")
    for name, pre in VARIANTS.items():
        d = embedded(args.run, args.cache, name, pre, photos, train, held)
        cases = [(w, None, 0.0) for w in WEIGHTS]
        if name == "as they are":
            cases += [(0.5, frame, fw) for frame in FRAMES for fw in FRAME_WEIGHTS]
        for weight, frame, frame_weight in cases:
            for search, got in zip(("cosine", "code"), recalls(d, weight, train, held, frame, frame_weight)):
                print(f"| {name} | {weight} | {frame or 'none'} {frame_weight or ''} | {search} | "
                      + " | ".join(f"{x:.3f}" for x in got) + f" | {np.mean(got):.3f} | {min(got):.3f} |")


if __name__ == "__main__":
    main()
