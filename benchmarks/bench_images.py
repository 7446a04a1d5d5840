"""End-to-end image training benchmarks: a CPU run of the small CNN, and the GPU runs.

    # CPU: the small CIFAR ResNet on CIFAR-10 pixels, protocol cifar10, CSQ vs CSQ_D at 32 bits
    python benchmarks/bench_images.py cpu [--epochs 10]

    # GPU (needs a CUDA device; torchvision for ResNet-50):
    python benchmarks/bench_images.py gpu-resnet50 [--epochs 3]   # images/s and s/epoch at 224
    python benchmarks/bench_images.py gpu-scratch [--epochs 30]   # cifar10-2, CSQ vs CSQ_D, 64 bits

Every run is an ordinary `lbhash train` run directory under --out; the script prints the
training seconds per epoch, images per second, the encoding time and mAP at the protocol's R.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARBALL = REPO.parent / "shared" / "data" / "cifar10-jpg.tar.gz"

SETTINGS = {
    # the small CNN from scratch on 32x32 pixels, standard CIFAR augmentation
    "cpu": dict(protocol="cifar10", bits=32, backbone="resnet20", transform="cifar-augment",
                image_size=32, accelerator="cpu", variants=(False, True), epochs=10),
    # ResNet-50 at 224 (the paper's CIFAR transform: Resize(224)), bf16 autocast, channels_last
    "gpu-resnet50": dict(protocol="cifar10", bits=64, backbone="resnet50", transform="cifar",
                         image_size=224, accelerator="gpu", precision="bf16-mixed", num_workers=8,
                         variants=(False,), epochs=3),
    # a from-scratch ResNet on the 50,000 training images at 32x32
    "gpu-scratch": dict(protocol="cifar10-2", bits=64, backbone="resnet32", transform="cifar-augment",
                        image_size=32, accelerator="gpu", precision="bf16-mixed", num_workers=8,
                        variants=(False, True), epochs=30, batch_size=256),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("setting", choices=sorted(SETTINGS))
    p.add_argument("--data", default=f"cifar10:{TARBALL}")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--pretrained", default=None, help="backbone weights: a file, or 'torchvision'")
    p.add_argument("--out", default=None)
    args = p.parse_args()

    from lbhash.train import TrainConfig, train

    settings = dict(SETTINGS[args.setting])
    variants = settings.pop("variants")
    epochs = args.epochs or settings.pop("epochs")
    settings.pop("epochs", None)
    out = Path(args.out or f"runs/bench-images-{args.setting}")
    print(f"{args.setting}: data {args.data}, {settings}, {epochs} epochs")
    for lbhash in variants:
        name = "csq" + ("_D" if lbhash else "")
        run = out / f"{name}-{settings['bits']}bits"
        start = time.perf_counter()
        metrics = train(
            TrainConfig(data=args.data, method="csq", lbhash=lbhash, epochs=epochs, lr_step=0,
                        pretrained=args.pretrained, progress=True, **settings), run, resume=run.exists())
        wall = time.perf_counter() - start
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        seconds = [r["seconds"] for r in log]
        # median of the epochs after the first (warm-up): robust to one slowed by other work
        median = statistics.median(seconds[1:] or seconds)
        n_train = metrics["run"]["n_train"]
        print(f"{name:6s} s/epoch {median:8.2f} (median)  images/s {n_train / median:8.1f}  "
              f"encode {metrics['run']['encode_seconds']:7.1f} s  mAP@{metrics['topk']} {metrics['map']:.4f} "
              f"(tie-averaged {metrics['map_tie_averaged']:.4f})  wall {wall:.0f} s")


if __name__ == "__main__":
    main()
