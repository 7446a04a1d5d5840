"""Issue 68's near-duplicate tables (docs/duplicates.md, "Finding the picture"): CIFAR-10 JPEGs as a
class-folder tree, the README's own-folder recipe, `lbhash index build` with its defaults, then
`lbhash evaluate-copies` (each index's orders, per edit).

    python studies/duplicates_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 0 --seed 0       # validation
    python studies/duplicates_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 2000 --seed 1    # held out

`--start S`: the training JPEGs S to S + 149 of each class (in name order); the defaults were chosen
on `--start 0` (with `--sweep`: looks_like, factor and SIMILARITY_POWER, printed per edit as
recall@1/class P@10) and reported on `--start 2000`. Also builds the index with int8 float rows
(`--embedding-dtype int8`) and without float rows (`--no-embeddings`). About 6 minutes per start on
2 idle cores (features, 30 epochs, three indexes, 1,000 copies encoded each); the sweep about 10 more. `--finetune`: the README's fine-tuning recipe instead
of a frozen backbone (its defaults: a linear probe, then the whole network; at 160 px as the frozen run).

    python studies/duplicates_table.py ../shared/data/cifar10-jpg.tar.gz OUT --start 2000 --seed 1 --finetune

`--items N`: the copies per edit (200 by default); `--start 3000 --seed 2 --items 1500` edits every photo of
a second held-out subset (docs/duplicates.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

PER_CLASS = 150


def lbhash(*args: str, capture: bool = False) -> str:
    """`lbhash ARGS` in a new process (its output returned where `capture`, else printed)."""
    done = subprocess.run([sys.executable, "-m", "lbhash.cli", *args], check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def training_jpegs(tar) -> dict[str, list]:
    """The tarball's training JPEG members by class, each class's in name order."""
    members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".jpg")
                      and m.name.split("/")[-3] == "train"), key=lambda m: m.name)
    by_class: dict[str, list] = {}
    for m in members:
        by_class.setdefault(m.name.split("/")[-2], []).append(m)
    return by_class


def photo_tree(tarball: str, out: Path, start: int) -> None:
    """The training JPEGs start..start + PER_CLASS - 1 of each class, as they are in the tarball."""
    with tarfile.open(tarball) as tar:
        for cls, found in training_jpegs(tar).items():
            (out / cls).mkdir(parents=True, exist_ok=True)
            for m in found[start:start + PER_CLASS]:
                (out / cls / Path(m.name).name).write_bytes(tar.extractfile(m).read())


def sweep(index_dir: Path, run: Path, seed: int) -> None:
    from lbhash.index import CodeIndex, blend
    from lbhash.indexes import index_inputs
    from lbhash.serving.copies_evaluation import make_copies, measure

    index = CodeIndex.load(index_dir)
    copies = make_copies(index, index_inputs.query_encoder(run), 200, seed)

    def line(report: dict) -> str:
        return " ".join(f"{e}:{m['recall@1']:.3f}/{m['class_p@10']:.3f}" for e, m in report.items())

    print("hamming", line(measure(index, copies, "hamming")), flush=True)
    for power in (1, 2, 3):
        blend.SIMILARITY_POWER = power
        for factor in (4, 16):
            for looks_like in (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95):
                for order in ("codes", "blend"):
                    print(f"power {power} factor {factor} looks_like {looks_like} {order}",
                          line(measure(index, copies, order, looks_like, factor)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tarball")
    parser.add_argument("out", type=Path)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--finetune", action="store_true", help="fine-tune the backbone (the README's recipe)")
    parser.add_argument("--items", type=int, default=200, help="indexed photos edited per edit (1,500 at most)")
    args = parser.parse_args()
    out = args.out
    photos, run = out / "photos", out / "run"
    if not photos.exists():
        photo_tree(args.tarball, photos, args.start)
    if not (run / "metrics.json").exists():
        how = () if args.finetune else ("--freeze-backbone", "--epochs", "30")
        lbhash("train", "--data", f"images:{photos}", "--protocol", "all-train", "--backbone", "efficientnet_lite0",
               "--pretrained", "imagenet", *how, "--image-size", "160", "--method", "csq",
               "--bits", "64", "--seed", "0", "--out", str(run))
    for name, extra in (("idx", ()), ("idx-int8", ("--embedding-dtype", "int8")), ("idx-codes", ("--no-embeddings",))):
        if not (out / name).exists():
            lbhash("index", "build", str(run), "--out", str(out / name), *extra)
        lbhash("index", "info", str(out / name))
        lbhash("evaluate-copies", str(out / name), "--run", str(run), "--items", str(args.items), "--seed", str(args.seed))
    if args.sweep:
        sweep(out / "idx", run, args.seed)


if __name__ == "__main__":
    main()
