"""Explored for issue 86 (not built): the learned instance code beside a perceptual hash's bits, code for
code. Each copy's original searched exactly, by Hamming distance, among the indexed photos: the index's
learned 256-bit instance code, its first 192 bits, pHash (64 bits) and PDQ (256 bits), and the sum of a
learned code's distance and `w` times pHash's (w 1 with 192 bits: one plain 256-bit code, 32 bytes).

    python studies/hybrid_code.py OUT --seed S

OUT: an output folder of studies/copies_table.py (OUT/idx, OUT/run; `--seed` as given there: the same
copies). Needs the optional `imagehash` and `pdqhash` wheels. Prints a markdown table of recall@1 per edit
and writes OUT/hybrid.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from copies_table import perceptual_hashers

WEIGHTS = (0.5, 1, 2, 4)


def main() -> None:
    from lbhash.codes import hamming_distance
    from lbhash.data.edits import EDITS, edited
    from lbhash.data.image_sources import decode_image
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs
    from lbhash.indexes.origins import DataImages, read_sources
    from lbhash.serving.copies_evaluation import make_copies

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--items", type=int, default=200)
    args = parser.parse_args()
    hashers = perceptual_hashers()
    if set(hashers) != {"phash", "pdq"}:
        sys.exit("pip install imagehash pdqhash: both hashes are compared")
    index = CodeIndex.load(args.out / "idx")
    copies = make_copies(index, index_inputs.query_encoder(args.out / "run"), args.items, args.seed, tuple(EDITS))
    ids = np.sort(index.ids())
    rows = np.searchsorted(ids, copies.ids)
    learned, bits = index.get_instance_codes(ids), index.instance_bits
    record = read_sources(index)
    reader = DataImages(record)

    def image(i):
        blob = reader.read(int(i))
        return decode_image(blob, record.source(int(i))) if isinstance(blob, bytes) else np.asarray(blob)

    photos = [image(i) for i in ids]
    indexed = {name: np.stack([h(p) for p in photos]) for name, h in hashers.items()}

    def found(distances: np.ndarray) -> float:  # recall@1 of the original (ties: the lowest id)
        return float(np.mean(distances.argmin(axis=1) == rows))

    table = {}
    for edit, queries in copies.queries.items():
        hashed = {name: np.stack([h(edited(photos[r], edit)) for r in rows]) for name, h in hashers.items()}
        whole = hamming_distance(queries.instance, learned, bits).astype(np.float64)
        part = hamming_distance(queries.instance[:, :24], learned[:, :24], 192).astype(np.float64)
        phash = hamming_distance(hashed["phash"], indexed["phash"], 64).astype(np.float64)
        row = {"learned 256": found(whole), "learned 192": found(part), "pHash": found(phash),
               "PDQ": found(hamming_distance(hashed["pdq"], indexed["pdq"], 256))}
        for w in WEIGHTS:
            row[f"learned 256 + {w} x pHash"] = found(whole + w * phash)
            row[f"learned 192 + {w} x pHash"] = found(part + w * phash)
        table[edit] = row
    print("| code | " + " | ".join(EDITS) + " | worst |\n|---|" + "---|" * (len(EDITS) + 1))
    for name in next(iter(table.values())):
        values = [table[e][name] for e in EDITS]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {min(values):.3f} |")
    (args.out / "hybrid.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
