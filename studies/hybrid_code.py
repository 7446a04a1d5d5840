"""Explored for issue 86 (not built): the learned instance code beside a perceptual hash's bits, code for
code. Each copy's original searched exactly, by Hamming distance, among the indexed photos: the index's
learned 256-bit instance code, its first 192 bits, pHash (64 bits) and PDQ (256 bits), and the sum of a
learned code's distance and `w` times pHash's (w 1 with 192 bits: one plain 256-bit code, 32 bytes).
`--trim`: the same with pHash of the photo less its one-colour margins (lbhash.data.edits.trimmed, applied
to indexed photos and copies alike: a frame or letterbox bars then leave the hash alone), and the 256-bit
code of 128 learned bits, pHash and the trimmed photo's pHash.

    python studies/hybrid_code.py OUT --seed S [--codes-alone] [--trim]

OUT: an output folder of studies/copies_table.py (OUT/idx, OUT/run; `--seed` as given there: the same
copies). Needs the optional `imagehash` and `pdqhash` wheels. Prints a markdown table of recall@1 per edit
and writes OUT/hybrid.json. `--codes-alone`: then the two codes alone ranked as an index without float rows
ranks them (`evaluate-copies`' `codes` order at looks_like 0.85), with the index's instance code and with
the 32-byte ones of 192 learned bits and pHash's 64 (with `--trim` also of the trimmed photo's pHash, and of
128 learned bits and both hashes; an index of each made in memory): recall@1 / class P@10.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from copies_table import indexed_photos, measured_cells, perceptual_hashers

WEIGHTS = (0.5, 1, 2, 4)


def main() -> None:
    from lbhash.codes import hamming_distance
    from lbhash.data.edits import EDITS, edited
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs
    from lbhash.serving.copies_evaluation import make_copies

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--codes-alone", action="store_true")
    parser.add_argument("--trim", action="store_true", help="also pHash of the photos less their one-colour margins")
    args = parser.parse_args()
    hashers = perceptual_hashers()
    if set(hashers) != {"phash", "pdq"}:
        sys.exit("pip install imagehash pdqhash: both hashes are compared")
    index = CodeIndex.load(args.out / "idx")
    copies = make_copies(index, index_inputs.query_encoder(args.out / "run"), args.items, args.seed, tuple(EDITS))
    ids = np.sort(index.ids())
    rows = np.searchsorted(ids, copies.ids)
    learned, bits = index.get_instance_codes(ids), index.instance_bits
    photos = indexed_photos(index, ids)
    if args.trim:
        from lbhash.data.edits import trimmed

        hashers["trimmed phash"] = lambda img, phash=hashers["phash"]: phash(trimmed(img))
    indexed = {name: np.stack([h(p) for p in photos]) for name, h in hashers.items()}

    def found(distances: np.ndarray) -> float:  # recall@1 of the original (ties: the lowest id)
        return float(np.mean(distances.argmin(axis=1) == rows))

    table, copies_hashed = {}, {}
    for edit, queries in copies.queries.items():
        hashed = {name: np.stack([h(edited(photos[r], edit)) for r in rows]) for name, h in hashers.items()}
        copies_hashed[edit] = hashed
        whole = hamming_distance(queries.instance, learned, bits).astype(np.float64)
        part = hamming_distance(queries.instance[:, :24], learned[:, :24], 192).astype(np.float64)
        row = {"learned 256": found(whole), "learned 192": found(part),
               "PDQ": found(hamming_distance(hashed["pdq"], indexed["pdq"], 256))}
        perceptual = [name for name in ("phash", "trimmed phash") if name in hashed]
        spelled = {"phash": "pHash", "trimmed phash": "trimmed pHash"}
        for name in perceptual:
            phash = hamming_distance(hashed[name], indexed[name], 64).astype(np.float64)
            row[spelled[name]] = found(phash)
            for w in WEIGHTS:
                row[f"learned 256 + {w} x {spelled[name]}"] = found(whole + w * phash)
                row[f"learned 192 + {w} x {spelled[name]}"] = found(part + w * phash)
        if len(perceptual) == 2:
            both = sum(hamming_distance(hashed[n], indexed[n], 64).astype(np.float64) for n in perceptual)
            quarter = hamming_distance(queries.instance[:, :16], learned[:, :16], 128).astype(np.float64)
            row["learned 128 + pHash + trimmed pHash"] = found(quarter + both)
        table[edit] = row
    print("| code | " + " | ".join(EDITS) + " | worst |\n|---|" + "---|" * (len(EDITS) + 1))
    for name in next(iter(table.values())):
        values = [table[e][name] for e in EDITS]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {min(values):.3f} |")
    (args.out / "hybrid.json").write_text(json.dumps(table, indent=1))
    if args.codes_alone:
        codes_alone(index, copies, indexed, copies_hashed)


# the 32-byte codes of the codes-alone table: (learned bytes kept, the hashes after them)
HYBRIDS = {"learned 192 + pHash": (24, ("phash",)), "learned 192 + trimmed pHash": (24, ("trimmed phash",)),
           "learned 128 + pHash + trimmed pHash": (16, ("phash", "trimmed phash"))}


def codes_alone(index, copies, indexed: dict, copies_hashed: dict) -> None:
    """The `codes` order at 0.85 with the index's instance code and with each 256-bit code of HYBRIDS whose
    hashes were computed (`indexed`: the indexed photos' packed hashes by name; `copies_hashed`: the copies',
    by edit and name)."""
    import dataclasses

    from lbhash.index import CodeIndex
    from lbhash.serving.copies_evaluation import measure

    ids = np.sort(index.ids())
    floor = measure(index, copies, "hamming")
    print("\n| instance code | " + " | ".join(floor) + " | worst | class P@10 below Hamming's |\n|---|" +
          "---|" * (len(floor) + 2))
    print(f"| learned 256 | {measured_cells(index, copies, floor, 'codes', 0.85)} |", flush=True)
    for name, (kept, hashes) in HYBRIDS.items():
        if not set(hashes) <= set(indexed):
            continue
        hybrid = CodeIndex(index.bits, instance_bits=256)
        hybrid.metadata, hybrid.attachments = dict(index.metadata), dict(index.attachments)
        hybrid.add(index.get_codes(ids), ids=ids, labels=np.array([own[0] for own in index.labels_of(ids)]),
                   instance=np.hstack([index.get_instance_codes(ids)[:, :kept]] + [indexed[h] for h in hashes]))
        queries = {e: dataclasses.replace(q, embeddings=None, center=None, instance=np.hstack(
            [q.instance[:, :kept]] + [copies_hashed[e][h] for h in hashes])) for e, q in copies.queries.items()}
        print(f"| {name} | {measured_cells(hybrid, dataclasses.replace(copies, queries=queries), floor, 'codes', 0.85)} |",
              flush=True)


if __name__ == "__main__":
    main()
