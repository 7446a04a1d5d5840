"""Issue 86's tables (docs/instance-codes.md, "The learned instance code"): CIFAR-10 JPEGs as a class-folder
tree, the README's own-folder recipe (or the fine-tuning recipe, or the default small CNN), three indexes
of the run (the defaults: the learned code, float rows in its space; `--no-embeddings`: the codes alone;
`--instance-method itq`: the unlearned code, as before), `lbhash evaluate-copies` of each under every edit of
the family, the same-picture mark on photos that are in no index (`--absent`), and the instance code
beside perceptual hashes of the same copies (pHash, 8 bytes; PDQ, 32 bytes: `pip install imagehash
pdqhash`, optional), each code searched exactly against every indexed photo's.

    python studies/copies_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 0 --seed 0            # validation
    python studies/copies_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 4000 --seed 1 --absent 4500   # held out

`--start S`: the training JPEGs S to S + 149 of each class; `--absent A`: 20 JPEGs of each class from A on,
in no index, searched as they are and under every edit (the first hit of each must not be marked).
`--recipe finetune` fine-tunes Lite0 (the README's recipe, 160 px); `--recipe smallcnn` trains the default
backbone from scratch on the photos (15 epochs, 32 px). Prints markdown tables; writes OUT/*.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

from duplicates_table import lbhash, photo_tree, training_jpegs

RECIPES = {
    "frozen": ("--backbone", "efficientnet_lite0", "--pretrained", "imagenet", "--freeze-backbone", "--epochs", "30",
               "--image-size", "160"),
    "finetune": ("--backbone", "efficientnet_lite0", "--pretrained", "imagenet", "--image-size", "160"),
    "smallcnn": ("--epochs", "15", "--image-size", "32"),
}
INDEXES = {"idx": (), "idx-codes": ("--no-embeddings",), "idx-itq": ("--instance-method", "itq")}


def absent_photos(tarball: str, out: Path, start: int, per: int = 20) -> None:
    """`per` training JPEGs of each class from `start` on, flat in `out`."""
    with tarfile.open(tarball) as tar:
        out.mkdir(parents=True, exist_ok=True)
        for cls, found in training_jpegs(tar).items():
            for m in found[start:start + per]:
                (out / f"{cls}-{Path(m.name).name}").write_bytes(tar.extractfile(m).read())


def marks_on_absent(index: Path, run: Path, folder: Path, out: Path) -> dict:
    """The absent photos as they are and under every edit, searched (k 1): how many first hits are marked."""
    from PIL import Image

    from lbhash.data.edits import EDITS, edited

    photos = sorted(folder.glob("*.jpg"))
    counts = {}
    for name in ("none", *EDITS):
        where = out / f"absent-{name}"
        if not where.exists():
            where.mkdir(parents=True)
            for p in photos:
                with Image.open(p) as im:
                    img = np.asarray(im.convert("RGB"))
                Image.fromarray(img if name == "none" else edited(img, name)).save(where / f"{p.stem}.png")
        found = json.loads(lbhash("search", str(index), "--images", str(where), "--run", str(run), "-k", "1", "--json",
                                  capture=True))
        marked = [(r["name"], r["sources"][0] if r.get("sources") else r["ids"][0]) for r in found if r["same"][0]]
        counts[name] = {"searched": len(found), "marked": len(marked), "which": marked}
    return counts


def perceptual_hashers() -> dict:
    """{"phash", "pdq": uint8 (H, W, 3) photo -> its packed hash} of the optional wheels installed (a line
    on stderr for each left out)."""
    hashers = {}
    try:
        import imagehash
        from PIL import Image

        hashers["phash"] = lambda img: np.packbits(imagehash.phash(Image.fromarray(img)).hash.ravel())
    except ImportError:
        print("pHash left out: pip install imagehash", file=sys.stderr)
    try:
        import pdqhash

        hashers["pdq"] = lambda img: np.packbits(pdqhash.compute(np.ascontiguousarray(img))[0].astype(bool))
    except ImportError:
        print("PDQ left out: pip install pdqhash", file=sys.stderr)
    return hashers


def indexed_photos(index, ids) -> list[np.ndarray]:
    """The decoded photos of the index's items `ids`, read from the sources it records."""
    from lbhash.data.image_sources import decode_image
    from lbhash.indexes.origins import DataImages, read_sources

    record = read_sources(index)
    reader = DataImages(record)

    def image(i):
        blob = reader.read(int(i))
        return decode_image(blob, record.source(int(i))) if isinstance(blob, bytes) else np.asarray(blob)

    return [image(i) for i in ids]


def code_for_code(index_dir: Path, run: Path, items: int, seed: int) -> dict:
    """recall@1 of the original under each edit, each code alone searched exactly against the indexed
    photos' own: the index's instance code, pHash and PDQ (where installed)."""
    from lbhash.codes import hamming_distance
    from lbhash.data.edits import EDITS, edited
    from lbhash.index import CodeIndex
    from lbhash.indexes import index_inputs
    from lbhash.serving.copies_evaluation import make_copies

    index = CodeIndex.load(index_dir)
    copies = make_copies(index, index_inputs.query_encoder(run), items, seed, tuple(EDITS))
    ids = np.sort(index.ids())
    rows = np.searchsorted(ids, copies.ids)
    inst = index.get_instance_codes(ids)
    out = {"instance": {e: float(np.mean(hamming_distance(q.instance, inst, index.instance_bits).argmin(axis=1) == rows))
                        for e, q in copies.queries.items()}}
    hashers = perceptual_hashers()
    if hashers:
        photos = indexed_photos(index, ids)
        for name, h in hashers.items():
            db = np.stack([h(p) for p in photos])
            out[name] = {}
            for e in EDITS:
                q = np.stack([h(edited(photos[r], e)) for r in rows])
                out[name][e] = float(np.mean(hamming_distance(q, db, db.shape[1] * 8).argmin(axis=1) == rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="frozen")
    parser.add_argument("--absent", type=int, default=None, help="20 JPEGs of each class from here on: in no index")
    parser.add_argument("--sweep", action="store_true", help="looks_like and the similarity's power, on OUT/idx")
    parser.add_argument("--sweep-codes", action="store_true",
                        help="the codes-alone ranking's looks_like and similarity power, on OUT/idx-codes")
    parser.add_argument("--mark-only", action="store_true",
                        help="the default index alone: its evaluation and the mark on the photos in no index")
    args = parser.parse_args()
    out = args.out
    photos, run = out / "photos", out / "run"
    if not photos.exists():
        photo_tree(args.tarball, photos, args.start)
    if not (run / "metrics.json").exists():
        lbhash("train", "--data", f"images:{photos}", "--protocol", "all-train", *RECIPES[args.recipe],
               "--method", "csq", "--bits", "64", "--seed", "0", "--out", str(run))
    reports, indexes = {}, {"idx": INDEXES["idx"]} if args.mark_only else INDEXES
    for name, extra in indexes.items():
        if not (out / name).exists():
            lbhash("index", "build", str(run), "--out", str(out / name), *extra)
        path = out / f"dup-{name}.json"
        if not path.exists():
            path.write_text(lbhash("evaluate-copies", str(out / name), "--run", str(run), "--items", str(args.items), "--seed",
                                   str(args.seed), "--json", capture=True))
        reports[name] = json.loads(path.read_text())
    print_tables(reports)
    mark = {k: v for k, v in reports["idx"]["mark"].items() if k not in ("held", "edits")}  # (every measure's)
    print("\nthe default index's mark:", json.dumps(mark))
    if args.sweep:
        sweep(out / "idx", run, args.items, args.seed)
    if args.sweep_codes:
        sweep_codes(out / "idx-codes", run, args.items, args.seed)
    compared = out / "code-for-code.json"
    if args.mark_only:
        compared = None
    elif not compared.exists():
        compared.write_text(json.dumps(code_for_code(out / "idx", run, args.items, args.seed)))
    edits = reports["idx"]["edits"]
    if compared is not None:
        print("\n| code, searched alone | " + " | ".join(edits) + " |\n|---|" + "---|" * len(edits))
        for name, row in json.loads(compared.read_text()).items():
            print(f"| {name} | " + " | ".join(f"{row[e]:.3f}" for e in edits) + " |")
    if args.absent is not None:
        folder = out / "absent"
        if not folder.exists():
            absent_photos(args.tarball, folder, args.absent)
        for name in indexes if args.mark_only else ("idx", "idx-codes"):
            counts = marks_on_absent(out / name, run, folder, out)
            (out / f"absent-{name}.json").write_text(json.dumps(counts, indent=1))
            print(f"\n{name}: first hits marked, photos in no index: " +
                  ", ".join(f"{e} {c['marked']}/{c['searched']}" for e, c in counts.items()))


def sweep(index_dir: Path, run: Path, items: int, seed: int) -> None:
    """recall@1 / class P@10 per edit of both codes and the blend at looks_like 0.5-1.0, the similarity
    cubed (the default) and raw (lbhash.index.blend.SIMILARITY_POWER)."""
    from lbhash.index import CodeIndex, blend
    from lbhash.indexes import index_inputs
    from lbhash.serving.copies_evaluation import make_copies, measure

    index = CodeIndex.load(index_dir)
    copies = make_copies(index, index_inputs.query_encoder(run), items, seed)

    def line(report: dict) -> str:
        worst = min(m["recall@1"] for m in report.values())
        return f"worst {worst:.3f} " + " ".join(f"{e}:{m['recall@1']:.3f}/{m['class_p@10']:.3f}" for e, m in report.items())

    print("hamming", line(measure(index, copies, "hamming")), flush=True)
    for power in (3, 1):
        blend.SIMILARITY_POWER = power
        for looks_like in (0.5, 0.7, 0.85, 0.95, 1.0):
            for order in ("codes", "blend"):
                print(f"power {power} looks_like {looks_like} {order}", line(measure(index, copies, order, looks_like)),
                      flush=True)


def measured_cells(index, copies, floor: dict, order: str, looks_like: float | None) -> str:
    """A table row's cells for `order` at `looks_like`: recall@1 / class P@10 per edit, the worst recall@1, and the
    edits whose class P@10 falls below `floor`'s (the Hamming order's report)."""
    from lbhash.serving.copies_evaluation import measure

    report = measure(index, copies, order, looks_like)
    worst = min(m["recall@1"] for m in report.values())
    below = [e for e, m in report.items() if m["class_p@10"] < floor[e]["class_p@10"]]
    return " | ".join(f"{m['recall@1']:.3f} / {m['class_p@10']:.3f}" for m in report.values()) + \
        f" | {worst:.3f} | {', '.join(below) or 'none'}"


RAISES = ((0.7, 0.95), (0.8, 0.9), (0.85, 0.9), (0.85, 0.95))  # an ITQ code's query-by-query raise: (from, to)


def sweep_codes(index_dir: Path, run: Path, items: int, seed: int) -> None:
    """recall@1 / class P@10 per edit of the two codes alone (no float rows: `--no-embeddings`) at looks_like
    0.7-1.0, the instance code's similarity cubed and raw, and the query-by-query raise that an
    unlearned code's ranking takes (lbhash.index.blend.agreeing_looks_like, from each of RAISES' first value
    to its second; raw, the first alone); the Hamming order's class P@10 beside them (the floor it must keep)."""
    from lbhash.index import CodeIndex, blend
    from lbhash.indexes import index_inputs
    from lbhash.instance import RECORD_KEY
    from lbhash.serving.copies_evaluation import make_copies, measure

    index = CodeIndex.load(index_dir)
    copies = make_copies(index, index_inputs.query_encoder(run), items, seed)
    floor = measure(index, copies, "hamming")
    print("| power | looks_like | " + " | ".join(floor) + " | worst | P@10 below Hamming's |\n|---|---|" +
          "---|" * (len(floor) + 2))
    print("| - | Hamming | " + " | ".join(f"- / {m['class_p@10']:.3f}" for m in floor.values()) + " | | |")

    def row(power: int, name: str, looks_like: float | None) -> None:
        print(f"| {power} | {name} | {measured_cells(index, copies, floor, 'codes', looks_like)} |", flush=True)

    for power in (3, 1):
        blend.SIMILARITY_POWER = power
        for looks_like in (0.7, 0.8, 0.85, 0.9, 0.95, 1.0):
            row(power, str(looks_like), looks_like)
    record = index.metadata[RECORD_KEY]
    index.metadata[RECORD_KEY] = {**record, "method": "raised"}  # (the raise ranks an unlearned code only)
    for power, raises in ((3, RAISES), (1, RAISES[:1])):
        blend.SIMILARITY_POWER = power
        for start, stop in raises:
            blend.LOOKS_LIKE_CODES, blend.LOOKS_LIKE_APART = start, stop
            row(power, f"{start}->{stop}", None)


def print_tables(reports: dict) -> None:
    edits = reports["idx"]["edits"]
    print("| index | order | bytes per item | " + " | ".join(edits) + " |\n|---|---|---|" + "---|" * len(edits))
    for name, report in reports.items():
        mark = report.get("mark") or {}
        print(f"<!-- {name}: mark {mark.get('mark')} {mark.get('threshold')} {mark.get('why', '')} -->")
        for order, row in report["orders"].items():
            cells = [f"{m['recall@1']:.3f} / {m['class_p@10']:.3f}" for m in row["edits"].values()]
            print(f"| {name} | {order} | {row['bytes_per_item']} | " + " | ".join(cells) + " |")
            if "mark_recall" in next(iter(row["edits"].values())):
                cells = [f"{m['mark_recall']:.3f} / {m.get('false_marks_absent', 0):.3f}" for m in row["edits"].values()]
                print(f"| {name} | {order}: mark recall / false marks, original out | | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
