"""Encoding rates of bench_service.py: a small run's model through PyTorch (`RunEncoder`) and
through ONNX Runtime (`ExportedEncoder` of `lbhash export`), the same rows, in one process.

Two runs trained here in seconds: a 32-bit CSQ run on the digits features (64 inputs, one
hidden layer of 64), and a 16-bit CSQ run of a CIFAR ResNet-8 on 32 px generated PNGs. Each
encoder encodes the same rows in batches of `batch`; the rate is rows (or images) per second
of wall time, best of 3 rounds, and the codes of both must agree.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PIL import Image


def _tree(root: Path, per: int = 12) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name, color in {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(per if split == "train" else 3):
                pixels = np.clip(np.array(color) + rng.normal(0, 25, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{k:03d}.png")
    return root


def _rate(encode, rows: np.ndarray, batch: int) -> tuple[float, np.ndarray]:
    best, codes = 0.0, None
    for _ in range(3):
        start = time.perf_counter()
        codes = np.concatenate([encode(rows[i:i + batch]) for i in range(0, len(rows), batch)])
        best = max(best, len(rows) / (time.perf_counter() - start))
    return best, codes


def encode_rates(tmp: Path, rows: int = 20_000, images: int = 512) -> list[str]:
    """Lines reporting rows/s (features) and images/s of PyTorch and ONNX Runtime."""
    from lbhash.data import load_data
    from lbhash.encoders.exported import ExportedEncoder
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig
    from lbhash.runs.encoder import RunEncoder

    feature_run, image_run = tmp / "digits-run", tmp / "image-run"
    RunDirectory(feature_run).train(TrainConfig(data="digits", method="csq", bits=32, epochs=1, hidden=(64,), centers="hadamard",
                      progress=False))
    RunDirectory(image_run).train(TrainConfig(data=f"images:{_tree(tmp / 'imgs')}", epochs=1, method="csq", bits=16, backbone="resnet8",
                      image_size=32, transform="cifar-augment", protocol="given", centers="hadamard", lr_step=0,
                      progress=False, batch_size=16))
    x = load_data("digits", labels_required=False).x
    feature_rows = x[np.arange(rows) % len(x)]
    pngs = sorted((tmp / "imgs" / "train").rglob("*.png"))
    pixels = np.stack([np.array(Image.open(pngs[i % len(pngs)]).convert("RGB")) for i in range(images)])
    lines = []
    for what, run, data, batch, unit in (("digits features, 32-bit MLP", feature_run, feature_rows, 1024, "rows"),
                                         ("32 px images, 16-bit ResNet-8", image_run, pixels, 64, "images")):
        torch_rate, torch_codes = _rate(RunEncoder.load(run).encode, data, batch)
        onnx_rate, onnx_codes = _rate(ExportedEncoder.load(RunDirectory(run).export()).encode, data, batch)
        agree = float((torch_codes == onnx_codes).all(axis=1).mean())
        lines.append(f"encoding {what}, batches of {batch}: PyTorch {torch_rate:,.0f} {unit}/s, ONNX Runtime "
                     f"{onnx_rate:,.0f} {unit}/s (x{onnx_rate / torch_rate:.2f}; codes equal for {agree:.1%})")
    return lines
