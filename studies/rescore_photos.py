"""Issue 58's check on photos: does a search find the picture, not only its class?

The first `--train` training and `--test` test JPEGs of each CIFAR-10 class (tools/cifar_small.py),
a frozen `efficientnet_lite0` at 160 px, CSQ 64 bits, 30 epochs, protocol `given` (the test
images are the queries, the training images the database), then `lbhash index build` (which
keeps each item's pooled backbone features). Each test image is searched as an upload is
(`Searcher`: one forward pass gives its code and its embedding), in Hamming order and
re-scored at factors 1, 4 and 16 (the default). Printed:

- how many queries get as their top 8 the first 8 ids of their own class in id order (what a
  class tied at one code gives in Hamming order);
- recall@10 against the exact float search of the same embeddings (the query's unit float16
  row against every stored one, by cosine, ties by id);
- class mAP@all: the search's top 1000 (and its top 10), then every other item in Hamming order;
- the share of database items that share their class's most common code.

    python studies/rescore_photos.py ../shared/data/cifar10-jpg.tar.gz OUT [--train 150 --test 20]

About 10 minutes on 2 idle cores (extracting the features, 30 epochs on them, the index).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from cifar_small import cifar_small  # noqa: E402

sys.path.insert(0, str(ROOT / "studies"))
from _ranking import average_precision  # noqa: E402


def lbhash(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lbhash.cli", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=150)
    parser.add_argument("--test", type=int, default=20)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = out / "photos.npz"
    if not data.exists():
        np.savez(data, **cifar_small(args.tarball, args.train, args.test))
    run, idx = out / "run", out / "idx"
    if not (run / "metrics.json").exists():
        lbhash("train", "--data", f"image-array:{data}", "--protocol", "given", "--validation", "0",
               "--backbone", "efficientnet_lite0", "--pretrained", "imagenet", "--freeze-backbone",
               "--image-size", "160", "--method", "csq", "--bits", "64", "--epochs", "30", "--seed", "0",
               "--out", str(run))
    if not idx.exists():
        lbhash("index", "build", str(run), "--out", str(idx))
    measure(data, run, idx)


def measure(data: Path, run: Path, idx: Path) -> None:
    from lbhash.index import CodeIndex
    from lbhash.runs.encoder import RunEncoder
    from lbhash.index import blended_search
    from lbhash.serving.searcher import Searcher

    arrays = np.load(data)
    images, labels, is_test = arrays["images"], arrays["labels"], arrays["is_test"]
    index = CodeIndex.load(idx)
    searcher = Searcher(index, RunEncoder.load(run))
    ids = np.sort(index.ids())
    db_labels = labels[ids]  # an item's id is its position in the data set
    q_images, q_labels = images[is_test], labels[is_test]
    n = len(ids)
    queries = searcher.queries(q_images, rank=True)
    stored = index.get_embeddings(ids).astype(np.float64)
    q_units = queries.embeddings / np.linalg.norm(queries.embeddings, axis=1, keepdims=True)
    cosine = q_units @ stored.T
    float_top10 = ids[np.lexsort((ids[None].repeat(len(q_units), 0), -cosine), axis=1)[:, :10]]
    codes = index.get_codes(ids)
    shared = 0
    for c in np.unique(db_labels):
        _, counts = np.unique(codes[db_labels == c], axis=0, return_counts=True)
        shared += counts.max()
    first8 = {c: ids[db_labels == c][:8].tolist() for c in np.unique(db_labels)}
    print(f"{len(q_images)} queries, {n} database items; {shared / n:.3f} of the items share their class's "
          "most common code")
    print("| order | top 8 = the class's first 8 ids | recall@10 vs float | mAP@all, top 1000 re-scored "
          "| mAP@all, top 10 re-scored |")
    print("|---|---|---|---|---|")
    hamming = index.search(queries.codes, n).ids
    top = min(1000, n)
    for factor in (None, 1, 4, 16):
        if factor is None:
            name, top10, head = "Hamming only", hamming[:, :10], hamming[:, :top]
        else:
            name = f"re-scored, factor {factor}"
            top10 = blended_search(index, queries, 10, factor=factor).ids
            head = blended_search(index, queries, top, factor=factor).ids
        same = np.mean([top10[q, :8].tolist() == first8[q_labels[q]] for q in range(len(q_labels))])
        recall = np.mean([len(set(top10[q].tolist()) & set(float_top10[q].tolist())) / 10
                          for q in range(len(q_labels))])
        maps = []
        for first in (head, top10):  # the search's top 1000 (or 10), then every other item in Hamming order
            aps = []
            for q in range(len(q_labels)):
                ranking = np.concatenate([first[q], hamming[q][~np.isin(hamming[q], first[q])]])
                aps.append(average_precision(db_labels[np.searchsorted(ids, ranking)] == q_labels[q]))
            maps.append(np.mean(aps))
        print(f"| {name} | {same:.3f} | {recall:.3f} | {maps[0]:.4f} | {maps[1]:.4f} |")
    float_map = np.mean([average_precision(db_labels[np.argsort(-cosine[q], kind='stable')] == q_labels[q])
                         for q in range(len(q_labels))])
    print(f"| float cosine (the ceiling) | - | 1.000 | {float_map:.4f} (all items by cosine) | |")


if __name__ == "__main__":
    main()
