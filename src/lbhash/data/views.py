"""The blurred view that an index embeds each photo with (docs/instance-codes.md, "Item views").

An index keeps, per photo, the unit embedding of the photo plus `VIEW_WEIGHT` times that of its blurred
view (a Gaussian of `BLUR_SIGMA` pixels at the photo's own resolution); queries are embedded as they
come. An edited copy that lost fine detail (scaled down and back) then lies nearer its original: on
validation photos, the exact cosine found the original first for 0.935 of copies scaled to 3/4 and
back with the photo's embedding alone, 1.000 with the view, and the same as alone under the other
edits (docs/instance-codes.md, "Item views"). It costs a second forward pass per indexed photo.
Numpy only, so that a server without torch blurs the photos it adds exactly as a run does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from lbhash.data.images import ImageDataset
from lbhash.instance import unit_vectors

BLUR_SIGMA = 0.8     # pixels of the photo, and the view's weight: chosen on validation photos (docs/search.md)
VIEW_WEIGHT = 0.5
ITEM_VIEW = f"gaussian-blur-{BLUR_SIGMA}"  # what an index records (`item_view` in its metadata)


def _kernel(sigma: float) -> np.ndarray:
    half = int(np.ceil(3 * sigma))
    taps = np.exp(-np.arange(-half, half + 1) ** 2 / (2 * sigma * sigma))
    return (taps / taps.sum()).astype(np.float32)


def blurred(img: np.ndarray, sigma: float = BLUR_SIGMA) -> np.ndarray:
    """uint8 (H, W, 3) `img` through a separable Gaussian of `sigma` pixels (3 sigma each side, the edge
    pixels repeated past the border), rounded to uint8."""
    taps = _kernel(sigma)
    half = len(taps) // 2
    out = np.asarray(img, np.float32)
    for axis in (0, 1):
        pad = [(0, 0)] * 3
        pad[axis] = (half, half)
        padded = np.pad(out, pad, mode="edge")
        n = out.shape[axis]
        out = sum(w * np.take(padded, np.arange(t, t + n), axis=axis) for t, w in enumerate(taps))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


@dataclass(eq=False)
class BlurredImages(ImageDataset):
    """An image data set whose items are the blurred views of another's (decoded item by item: the
    pixel store, if any, holds the unblurred pixels and is never built here)."""

    def image(self, i: int) -> np.ndarray:
        return blurred(super().image(i))

    def preload(self, progress: bool | None = None) -> bool:
        return False


def blurred_view(dataset: ImageDataset) -> BlurredImages:
    """The blurred view of `dataset` (its items, labels and order)."""
    given = {f.name: getattr(dataset, f.name) for f in fields(dataset) if f.init}
    if dataset.pixels is not None and (dataset.source is None or getattr(dataset, "_bad", None) is None):
        given["source"] = None  # the decoded store holds every item
    else:
        given["pixels"] = None
    return BlurredImages(**given)


def item_embedding(photo: np.ndarray, view: np.ndarray) -> np.ndarray:
    """What an index keeps per photo: the unit rows of the photo's embeddings (n, d) plus VIEW_WEIGHT
    times those of its blurred view's, over 1 + VIEW_WEIGHT, float32."""
    return ((unit_vectors(np.asarray(photo, np.float64)) + VIEW_WEIGHT * unit_vectors(np.asarray(view, np.float64)))
            / (1 + VIEW_WEIGHT)).astype(np.float32)
