"""The views that an index embeds each photo with (docs/instance-codes.md, "Item views").

An index keeps, per photo, the unit embedding of the photo plus, for each view of `ITEM_VIEWS[name]`,
its weight times the unit embedding of the photo seen so (over the sum of the weights); queries are
embedded as they come. An edited copy that lost fine detail (scaled down and back), its colour or its
edges to a frame then lies nearer its original: the blurred view (a Gaussian of `BLUR_SIGMA` pixels at the
photo's own resolution, `VIEW_WEIGHT`), the grayscale one (`GRAY_WEIGHT`) and the framed one (the photo
shrunk into a mid-grey frame, `FRAME_WEIGHT`), each chosen on validation photos (docs/instance-codes.md,
"Item views"). Each view costs a forward pass per indexed photo.
An index records the name of its views (`item_view` in its metadata), so that photos added to it
later are embedded as its own were. Numpy and Pillow only, so that a server without torch makes
the views of the photos it adds exactly as a run does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from lbhash.data.edits import framed, grayscale
from lbhash.data.images import ImageDataset
from lbhash.errors import InputError
from lbhash.instance import unit_vectors

BLUR_SIGMA = 0.8     # pixels of the photo, and the views' weights: chosen on validation photos
VIEW_WEIGHT = 0.5
GRAY_WEIGHT = 0.5
FRAME_SHARE = 0.8    # the framed view: the photo shrunk to this share of each side in a mid-grey frame
FRAME_FILL = (128, 128, 128)
FRAME_WEIGHT = 0.5


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


def framed_view(img: np.ndarray) -> np.ndarray:
    """`img` shrunk to FRAME_SHARE of each side, centred in a frame of FRAME_FILL (lbhash.data.edits.framed)."""
    return framed(img, FRAME_SHARE, FRAME_SHARE, FRAME_FILL)


BLUR_VIEW = f"gaussian-blur-{BLUR_SIGMA}"  # what indexes built before the grayscale and framed views record
ITEM_VIEW = f"{BLUR_VIEW}+grayscale-{GRAY_WEIGHT}+frame-{FRAME_SHARE}-{FRAME_WEIGHT}"  # what an index records now
# name -> the views (photo -> view, weight) beside the photo itself (weight 1)
ITEM_VIEWS: dict[str, tuple[tuple[Callable[[np.ndarray], np.ndarray], float], ...]] = {
    BLUR_VIEW: ((blurred, VIEW_WEIGHT),),
    ITEM_VIEW: ((blurred, VIEW_WEIGHT), (grayscale, GRAY_WEIGHT), (framed_view, FRAME_WEIGHT)),
}


def item_views(name: str = ITEM_VIEW) -> tuple[tuple[Callable[[np.ndarray], np.ndarray], float], ...]:
    """The views (photo -> view, weight) of the item view `name` an index records; one this version does
    not know is refused in one line (the index's photos could not be embedded alike)."""
    if name not in ITEM_VIEWS:
        raise InputError(f"the index records item view {name!r}, which this lbhash does not make (it makes "
                         f"{', '.join(map(repr, ITEM_VIEWS))}): build the index again with this version")
    return ITEM_VIEWS[name]


@dataclass(eq=False)
class ViewImages(ImageDataset):
    """An image data set whose items are a view of another's (`view`: photo -> view; decoded item by item:
    the pixel store, if any, holds the photos and is never built here)."""

    view: Callable[[np.ndarray], np.ndarray] | None = None

    def image(self, i: int) -> np.ndarray:
        seen = self.view(super().image(i))
        return seen if seen.flags.writeable else seen.copy()  # (Pillow's arrays are read-only; torch warns)

    def preload(self, progress: bool | None = None) -> bool:
        return False


def view_of(dataset: ImageDataset, view: Callable[[np.ndarray], np.ndarray]) -> ViewImages:
    """`dataset` seen through `view` (its items, labels and order)."""
    given = {f.name: getattr(dataset, f.name) for f in fields(dataset) if f.init}
    if dataset.pixels is not None and (dataset.source is None or getattr(dataset, "_bad", None) is None):
        given["source"] = None  # the decoded store holds every item
    else:
        given["pixels"] = None
    given["view"] = view
    return ViewImages(**given)


def item_embedding(photo: np.ndarray, views: Sequence[np.ndarray], name: str = ITEM_VIEW) -> np.ndarray:
    """What an index keeps per photo: the unit rows of the photo's embeddings (n, d) plus each view's weight
    times the unit rows of that view's embeddings (`views`, in the order of `item_views(name)`), over 1 plus
    the weights, float32."""
    weights = [w for _, w in item_views(name)]
    if len(views) != len(weights):
        raise ValueError(f"item view {name!r} has {len(weights)} views, got {len(views)} embeddings")
    total = unit_vectors(np.asarray(photo, np.float64))
    for w, view in zip(weights, views):
        total = total + w * unit_vectors(np.asarray(view, np.float64))
    return (total / (1 + sum(weights))).astype(np.float32)
