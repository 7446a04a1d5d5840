"""What sets an index's same-picture thresholds: `lbhash index build RUN` run in this process with the calibration's
inputs captured, then, for the calibration copies (each held-out photo under every edit), the nearest other items
by the instance distance and by the perceptual hashes, named (calibration photo, other item, distance, the copy's
distance to its own photo), and the thresholds the calibration's rule would give with some photos left out of
its sample (`--drop`: how much one look-alike pair costs; docs/results/copies.md, "The small CNN on validation
photos").

    python studies/mark_nearest.py RUN OUT [--drop ITEM ...] [--show 12]

OUT: the index it builds (replaced). Calibration photos are named by their data position, other items by their
row in the index: the same number where the index holds the run's items in order (`--part all` of an
`all-train` run, the default there).
"""

from __future__ import annotations

import argparse

import numpy as np

from lbhash.indexes import instance_learning

MARGIN_BITS, MARGIN_HASH_BITS = instance_learning.MARGIN_BITS, instance_learning.MARGIN_HASH_BITS


def captured_distances(run: str, out: str) -> dict:
    """{edit: (instance distances, perceptual distances) of the calibration copies to every item}, with the
    calibration's photos and their rows, from an index build of `run` into `out`."""
    from lbhash.cli import main
    from lbhash.codes import hamming_distance
    from lbhash.data.edits import EDITS
    from lbhash.instance import perceptual_distances

    seen = {}
    calibrate = instance_learning.calibrate_mark

    def capture(embed, photos, held, held_rows, transform, instance, floats):
        seen.update(held=held, rows=held_rows, edits={})
        for name in EDITS:
            hashes = []
            emb, _ = instance_learning.copy_embeddings(embed, photos, held, 1, 0, edit=name, hashes=hashes)
            codes = transform.apply(emb, perceptual=np.concatenate(hashes) if transform.perceptual_bits else None)
            seen["edits"][name] = (hamming_distance(codes, instance, transform.bits).astype(np.int64),
                                   perceptual_distances(codes, instance, transform.perceptual_bits).astype(np.int64)
                                   if transform.perceptual_bits else None)
        return calibrate(embed, photos, held, held_rows, transform, instance, floats)

    instance_learning.calibrate_mark = capture
    main(["index", "build", run, "--out", out, "--overwrite"], standalone_mode=False)
    if not seen:
        raise SystemExit(f"{run}: its index calibrates no mark (not a run of photos?)")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("out")
    parser.add_argument("--drop", type=int, nargs="*", default=[], help="calibration photos to leave out")
    parser.add_argument("--show", type=int, default=12)
    args = parser.parse_args()
    seen = captured_distances(args.run, args.out)
    held, rows = seen["held"], seen["rows"]
    q, kept = np.arange(len(rows)), ~np.isin(held, args.drop)
    passed = []
    for at, (measure, margin) in enumerate((("instance", MARGIN_BITS), ("hashes", MARGIN_HASH_BITS))):
        near, own, nearest = [], [], []
        for name, distances in seen["edits"].items():
            if distances[at] is None:
                continue
            d = distances[at].copy()
            own.append(d[q, rows].copy())
            d[q, rows] = np.iinfo(np.int64).max
            other = d.argmin(axis=1)
            nearest.append(np.where(kept, d[q, other], np.iinfo(np.int64).max))
            near += [(int(d[i, other[i]]), name, int(held[i]), int(other[i]), int(own[-1][i])) for i in q]
        if not own:
            continue
        near.sort()
        print(f"{measure}: nearest other items (distance, edit, calibration photo, item, distance to its own photo):")
        for row in near[:args.show]:
            print("  ", *row)
        own, nearest = np.concatenate(own), np.concatenate(nearest)
        allowed = int(np.floor(instance_learning.FALSE_MARK_RATE * kept.sum() * len(seen["edits"])))
        cut = instance_learning.strictest_cut(nearest, allowed, margin)  # (as the calibration's rule, the rest)
        passed.append(own <= cut)
        print(f"{measure}: at most {cut} (dropped: {args.drop or 'none'}), passing {np.mean(passed[-1]):.3f} of the "
              "calibration copies' originals")
    print(f"either: {np.mean(np.logical_or.reduce(passed)):.3f}")


if __name__ == "__main__":
    main()
