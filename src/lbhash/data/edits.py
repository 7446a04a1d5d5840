"""The edits a near-duplicate evaluation makes of an indexed photo (docs/search.md, "Finding the picture"):
each takes a uint8 (H, W, 3) image and gives the edited copy at the same size, deterministically.

- `jpeg`: re-encoded as JPEG at quality 50 (Pillow's encoder);
- `flip`: mirrored left to right;
- `crop`: the central 81% of each side (26 of 32 pixels) scaled back to the full size (bilinear);
- `colour`: brightness x1.25, then contrast x0.8 (Pillow's ImageEnhance);
- `resize`: scaled to three quarters of each side and back (bilinear).
"""

from __future__ import annotations

import io

import numpy as np

from lbhash.errors import InputError

JPEG_QUALITY = 50
CROP_SHARE = 26 / 32
BRIGHTNESS, CONTRAST = 1.25, 0.8
RESIZE_SHARE = 0.75


def _pil(img: np.ndarray):
    from PIL import Image

    return Image.fromarray(np.ascontiguousarray(img, np.uint8), "RGB")


def _jpeg(img: np.ndarray) -> np.ndarray:
    from PIL import Image

    out = io.BytesIO()
    _pil(img).save(out, "JPEG", quality=JPEG_QUALITY)
    with Image.open(io.BytesIO(out.getvalue())) as im:
        return np.asarray(im.convert("RGB"))


def _flip(img: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(img[:, ::-1])


def _crop(img: np.ndarray) -> np.ndarray:
    from PIL import Image

    h, w = img.shape[:2]
    ch, cw = max(1, round(h * CROP_SHARE)), max(1, round(w * CROP_SHARE))
    top, left = (h - ch) // 2, (w - cw) // 2
    part = _pil(img[top:top + ch, left:left + cw])
    return np.asarray(part.resize((w, h), Image.BILINEAR))


def _colour(img: np.ndarray) -> np.ndarray:
    from PIL import ImageEnhance

    bright = ImageEnhance.Brightness(_pil(img)).enhance(BRIGHTNESS)
    return np.asarray(ImageEnhance.Contrast(bright).enhance(CONTRAST))


def _resize(img: np.ndarray) -> np.ndarray:
    from PIL import Image

    h, w = img.shape[:2]
    small = _pil(img).resize((max(1, round(w * RESIZE_SHARE)), max(1, round(h * RESIZE_SHARE))), Image.BILINEAR)
    return np.asarray(small.resize((w, h), Image.BILINEAR))


EDITS = {"jpeg": _jpeg, "flip": _flip, "crop": _crop, "colour": _colour, "resize": _resize}


def check_edits(names) -> list[str]:
    """Edit names, each known, in the order given (none repeated)."""
    names = list(names)
    unknown = [n for n in names if n not in EDITS]
    if unknown or not names or len(set(names)) != len(names):
        raise InputError(f"edits must be distinct names among {', '.join(EDITS)}, got {', '.join(map(str, names)) or 'none'}")
    return names


def edited(img: np.ndarray, name: str) -> np.ndarray:
    """The copy of uint8 (H, W, 3) `img` under edit `name` (uint8, same size)."""
    arr = np.asarray(img)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise InputError(f"an edit takes a uint8 (H, W, 3) image, got {arr.dtype} {arr.shape}")
    out = EDITS[check_edits([name])[0]](arr)
    return np.ascontiguousarray(out, np.uint8)
