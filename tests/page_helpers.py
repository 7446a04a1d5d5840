"""Small generated image data for the search-page tests: a class-folder tree of PNGs and a
run trained on it in a few seconds."""

import io
from pathlib import Path

import numpy as np
from PIL import Image

COLORS = {"blue": (40, 60, 200), "green": (40, 180, 60), "red": (200, 40, 40), "yellow": (220, 200, 40)}


def noisy(rng, color, shape=(32, 32)) -> np.ndarray:
    return np.clip(np.array(color)[None, None] + rng.normal(0, 25, (*shape, 3)), 0, 255).astype(np.uint8)


def make_image_tree(root: Path, train: int = 12, test: int = 3, seed: int = 0) -> Path:
    """train/<color>/NNN.png and test/<color>/NNN.png: 32x32 noisy single-colour images."""
    rng = np.random.default_rng(seed)
    for split, per in (("train", train), ("test", test)):
        for name, color in COLORS.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(per):
                Image.fromarray(noisy(rng, color)).save(folder / f"{k:03d}.png")
    return root


def train_tiny_run(tree: Path, out: Path, epochs: int = 2) -> Path:
    """A CSQ run of 16 bits on the tree (a CIFAR ResNet-8; a few seconds on a CPU)."""
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    RunDirectory(out).train(TrainConfig(data=f"images:{tree}", epochs=epochs, method="csq", bits=16, backbone="resnet8",
                      image_size=32, transform="cifar-augment", protocol="given", centers="hadamard", lr_step=0,
                      progress=False, batch_size=16))
    return out


def png_bytes(img: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt)
    return buf.getvalue()


def decoded(blob: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(blob)) as im:
        return np.array(im.convert("RGB"))
