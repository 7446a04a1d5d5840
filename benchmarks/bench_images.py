"""Images/s of training and encoding for every image backbone, against the code before the
pixel store (issue 18), measured in the same run.

    python benchmarks/bench_images.py                     # both parts, on CIFAR-10 JPEGs
    python benchmarks/bench_images.py --part backbones --backbones smallcnn,resnet20
    python benchmarks/bench_images.py --part targets      # 60,000 28x28 gray images, smallcnn

Inputs are built from the real CIFAR-10 JPEGs (../shared/data/cifar10-jpg.tar.gz) as
`image-array:` files: 32x32 RGB as they are, and 28x28 grayscale (ITU-R 601 luma, resized
with antialiasing), the MNIST shape.

Part `backbones`: for each backbone and input, one `lbhash train` run (CSQ, 32 bits, the
cifar-augment transform at the native size, protocol per-class:T,Q, 2 epochs) with the
current code, and the same run with the baseline code (`--baseline`, default the commit
before the pixel store, extracted with `git archive` and run in a subprocess with that
source on PYTHONPATH). A backbone the baseline lacks (smallcnn) is compared with the
baseline's default, resnet20: what the same command gave before. Old and new alternate per backbone, so both see the same machine
load. Training images/s = training items / seconds of the last epoch (the first warms up);
encoding images/s = the query and database items / the final encoding's seconds.

Part `targets`: 60,000 28x28 grayscale images (the 60,000 CIFAR-10 images, gray) trained
for one epoch with protocol `given` and encoded, with the current code and smallcnn.

Prints a markdown table and writes it with the raw numbers (JSON) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from _smoke import parse_args, skip  # beside this script

REPO = Path(__file__).resolve().parents[1]
TARBALL = REPO.parent / "shared" / "data" / "cifar10-jpg.tar.gz"
BASELINE = "776e773"  # main before the pixel store
WORK = REPO / "runs" / "bench-images"
# the runs' LBHASH_CACHE_DIR (None: in --work); --smoke keeps it in WORK, where the baseline's class centers
# (some 25 s to draw at 32 bits) are drawn once, not in every smoke run
CACHE: Path | None = None
OLD_DEFAULT = "resnet20"  # the baseline's default image backbone
BACKBONES = ("smallcnn", "resnet8", "resnet14", "resnet20", "resnet32", "resnet56", "resnet50", "alexnet")
INPUTS = ("gray28", "rgb32")


def build_inputs(tarball: Path, folder: Path) -> dict[str, Path]:
    """gray28.npz / rgb32.npz (3,000 images, 300 per class) and gray28-60k.npz (all 60,000)."""
    paths = {name: folder / f"{name}.npz" for name in (*INPUTS, "gray28-60k")}
    if all(p.is_file() for p in paths.values()):
        return paths
    import torch
    import torch.nn.functional as F
    from lbhash.data import load_cifar10

    ds = load_cifar10(tarball)
    ds.preload(progress=True)
    rgb, labels = np.asarray(ds.pixels), ds.labels.argmax(1).astype(np.uint8)
    x = torch.from_numpy(rgb).permute(0, 3, 1, 2).float()
    luma = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None]
    gray = F.interpolate(luma, size=(28, 28), mode="bilinear", antialias=True, align_corners=False)
    gray = gray[:, 0].round().clamp(0, 255).to(torch.uint8).numpy()
    pick = np.concatenate([np.flatnonzero(labels == c)[:300] for c in range(10)])
    np.savez(paths["rgb32"], images=rgb[pick], labels=labels[pick])
    np.savez(paths["gray28"], images=gray[pick], labels=labels[pick])
    np.savez(paths["gray28-60k"], x_train=gray, y_train=labels, x_test=gray[pick[::3]], y_test=labels[pick[::3]])
    return paths


def synthetic_inputs(folder: Path, per_class: int) -> dict[str, Path]:
    """--smoke: the same three files from random pixels with a class pattern, `per_class` images of
    each class (the 60,000-image file too), so that no tarball is decoded."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10, dtype=np.uint8), per_class)
    rgb = np.clip(rng.uniform(0, 255, (10, 32, 32, 3))[labels] * 0.6 + rng.uniform(0, 100, (len(labels), 32, 32, 3)),
                  0, 255).astype(np.uint8)
    gray = rgb[:, 2:30, 2:30].mean(-1).astype(np.uint8)
    paths = {name: folder / f"{name}.npz" for name in (*INPUTS, "gray28-60k")}
    np.savez(paths["rgb32"], images=rgb, labels=labels)
    np.savez(paths["gray28"], images=gray, labels=labels)
    np.savez(paths["gray28-60k"], x_train=gray, y_train=labels, x_test=gray[::3], y_test=labels[::3])
    return paths


def baseline_source(commit: str, folder: Path) -> Path:
    """The baseline's src/ (git archive of `commit`), for PYTHONPATH."""
    out = folder / f"baseline-{commit}"
    if not (out / "src" / "lbhash").is_dir():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tf:
            tf.extractall(out, filter="data")
    shim = out / "src" / "lightning" / "__init__.py"
    if not shim.exists():
        shim.parent.mkdir(exist_ok=True)
        shim.write_text(LIGHTNING_SHIM)
    return out / "src"


# older lbhash imported `lightning.fabric` from the whole `lightning` package, which lbhash no longer installs
# (lightning-fabric alone): beside a baseline's source, `lightning.fabric.X` is `lightning_fabric.X`
LIGHTNING_SHIM = """import importlib
import importlib.abc
import importlib.util
import sys


class _Fabric(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "lightning.fabric" or name.startswith("lightning.fabric."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("lightning_fabric" + spec.name[len("lightning.fabric"):])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Fabric())
"""


def measure(data: str, backbone: str, protocol: str, epochs: int, image_size: int, out: str) -> dict:
    """One training run with whichever lbhash is importable; its images/s (runs in a subprocess)."""
    from lbhash.train import TrainConfig

    try:
        from lbhash.runs import RunDirectory

        def train(cfg, out):
            return RunDirectory(out).train(cfg)
    except ImportError:  # an older commit compared against: lbhash.runs.train, or lbhash.train's before it
        try:
            from lbhash.runs import train
        except ImportError:
            from lbhash.train import train

    start = time.perf_counter()
    metrics = train(TrainConfig(data=data, protocol=protocol, method="csq", bits=32, epochs=epochs, validation=0.0, backbone=backbone,
                                image_size=image_size, transform="cifar-augment", lr_step=0, eval_every=0,
                                progress=False), out)
    log = [json.loads(line) for line in Path(out, "log.jsonl").read_text().splitlines()]
    run, split = metrics["run"], np.load(Path(out, "split.npz"))
    encoded = len(split["query"]) + len(split["database"])
    return {"train_images_per_s": run["n_train"] / log[-1]["seconds"], "epoch_seconds": log[-1]["seconds"],
            "n_train": run["n_train"], "encode_images_per_s": encoded / run["encode_seconds"],
            "encode_seconds": run["encode_seconds"], "n_encoded": encoded, "map": metrics["map"],
            "wall_seconds": time.perf_counter() - start}


def run_measure(src: Path | None, folder: Path, **kwargs) -> dict:
    """`measure` in a fresh interpreter, with `src` (None: this checkout's) first on PYTHONPATH."""
    out = Path(tempfile.mkdtemp(dir=folder, prefix="run-")) / "run"
    env = {**os.environ, "PYTHONPATH": str(src or REPO / "src"), "LBHASH_CACHE_DIR": str(CACHE or folder / "cache")}
    args = json.dumps({**kwargs, "out": str(out)})
    proc = subprocess.run([sys.executable, __file__, "--worker", args], env=env, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torchvision_ok() -> str | None:
    proc = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["does not import"])[-1]


def part_backbones(args, inputs, folder: Path) -> list[dict]:
    # with --smoke the baseline's source stays in --work's default folder: its numba kernels compile
    # into it once, not in every smoke run
    old_src = baseline_source(args.baseline, WORK if args.smoke else folder)
    missing_tv = torchvision_ok()
    rows = []
    for backbone in args.backbones:
        for kind in args.inputs:
            row = {"backbone": backbone, "input": kind}
            if backbone in ("resnet50", "alexnet") and missing_tv:
                row["skipped"] = f"torchvision does not import ({missing_tv})"
                rows.append(row)
                print(row, flush=True)
                continue
            per_class = args.per_class or (100 if backbone == "smallcnn" else 64)
            common = dict(data=f"image-array:{inputs[kind]}", backbone=backbone, epochs=2,
                          protocol=f"per-class:{per_class},{args.queries}", image_size=28 if kind == "gray28" else 32)
            row["old"] = run_measure(old_src, folder, **common)
            if "unknown backbone" in row["old"].get("error", ""):  # new here: against the old default
                row["old_backbone"] = OLD_DEFAULT
                row["old"] = run_measure(old_src, folder, **{**common, "backbone": OLD_DEFAULT})
            row["new"] = run_measure(None, folder, **common)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def part_targets(inputs, folder: Path) -> dict:
    return run_measure(None, folder, data=f"image-array:{inputs['gray28-60k']}", backbone="smallcnn", epochs=1,
                       protocol="given", image_size=28)


def table(rows: list[dict], targets: dict | None, baseline: str) -> str:
    lines = ["| backbone | input | train img/s old | new | ratio | encode img/s old | new | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r or "error" in r.get("old", {}) or "error" in r.get("new", {}):
            why = r.get("skipped") or r.get("old", {}).get("error") or r["new"]["error"]
            lines.append(f"| {r['backbone']} | {r['input']} | {why} | | | | | |")
            continue
        o, n = r["old"], r["new"]
        name = r["backbone"] + (f" (old: {r['old_backbone']}, the old default)" if "old_backbone" in r else "")
        lines.append(f"| {name} | {r['input']} | {o['train_images_per_s']:.0f} | {n['train_images_per_s']:.0f} "
                     f"| {n['train_images_per_s'] / o['train_images_per_s']:.2f}x | {o['encode_images_per_s']:.0f} "
                     f"| {n['encode_images_per_s']:.0f} | {n['encode_images_per_s'] / o['encode_images_per_s']:.2f}x |")
    text = f"old = commit {baseline}, new = this checkout; {os.cpu_count()} CPU threads\n\n" + "\n".join(lines)
    if targets and "error" not in targets:
        text += (f"\n\nsmallcnn, 28x28 gray: one epoch of {targets['n_train']:,} images in "
                 f"{targets['epoch_seconds']:.1f} s ({targets['train_images_per_s']:.0f} img/s); encoding "
                 f"{targets['n_encoded']:,} images in {targets['encode_seconds']:.1f} s "
                 f"({targets['encode_images_per_s']:.0f} img/s; 60,000 in {60000 / targets['encode_images_per_s']:.1f} s)")
    elif targets:
        text += f"\n\ntargets: {targets['error']}"
    return text


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(measure(**json.loads(sys.argv[2]))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "backbones", "targets"), default="all")
    p.add_argument("--backbones", default=",".join(BACKBONES), type=lambda s: s.split(","))
    p.add_argument("--baseline", default=BASELINE, help="git commit of the code to compare with")
    p.add_argument("--tarball", type=Path, default=TARBALL)
    p.add_argument("--work", type=Path, default=WORK, help="inputs, runs, cache")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench-images" / "result")
    p.add_argument("--per-class", type=int, default=None,
                   help="training images per class of each backbone run (default 100 for smallcnn, else 64)")
    p.add_argument("--queries", type=int, default=10, help="query images per class of each backbone run")
    p.add_argument("--inputs", default=list(INPUTS), type=lambda s: s.split(","), help="of " + ",".join(INPUTS))
    args = parse_args(p, backbones=["smallcnn"], inputs=["gray28"], per_class=6, queries=2)
    if args.smoke:  # synthetic pixels, 12 per class, in a temporary folder; the baseline must be in this clone
        if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{args.baseline}^{{commit}}"],
                          capture_output=True).returncode:
            skip(f"the baseline commit {args.baseline} is not in this clone (git archive extracts it)")
        global CACHE
        CACHE = WORK / "cache"
        args.work = args.out = Path(tempfile.mkdtemp(prefix="bench-images-smoke-"))
        inputs = synthetic_inputs(args.work, 12)
    elif not args.tarball.is_file():
        sys.exit(f"error: {args.tarball}: not found (the CIFAR-10 JPEG tarball)")
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        inputs = build_inputs(args.tarball, args.work)
    rows = part_backbones(args, inputs, args.work) if args.part in ("all", "backbones") else []
    targets = part_targets(inputs, args.work) if args.part in ("all", "targets") else None
    text = table(rows, targets, args.baseline)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_images.md").write_text(text + "\n")
    (args.out / "bench_images.json").write_text(json.dumps({"rows": rows, "targets": targets}, indent=1))
    if args.smoke:
        shutil.rmtree(args.work)


if __name__ == "__main__":
    main()
