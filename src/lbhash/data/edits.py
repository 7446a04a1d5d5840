"""The edits that copies of a photo undergo (docs/instance-codes.md, "The edit family"): named, fixed edits that an
evaluation makes of indexed photos, and `random_edit`, the seeded random chains of the same kinds that a
learned instance code trains on (lbhash.train.instance_head). Each takes a uint8 (H, W, 3) image and gives
the edited copy at the same size.

The named edits (the evaluation's; `EDITS`):
- `jpeg`, `jpeg30`: re-encoded as JPEG at quality 50, 30 (Pillow's encoder);
- `flip`: mirrored left to right;
- `crop`: the central 81% of each side (26 of 32 pixels) scaled back to the full size (bilinear);
- `colour`: brightness x1.25, then contrast x0.8 (Pillow's ImageEnhance);
- `resize`: scaled to three quarters of each side and back (bilinear): a blur;
- `rotate`: turned 5 degrees counter-clockwise about the centre, the corners black;
- `border`: the photo shrunk to 75% of each side inside a white frame;
- `letterbox`: the photo squeezed to 70% of its height between black bars above and below;
- `grayscale`: Pillow's luminance, in three equal channels;
- `overlay`: a logo (a red square with a white bar, a fifth of the side) pasted in the lower right corner.
"""

from __future__ import annotations

import io

import numpy as np

from lbhash.errors import InputError

JPEG_QUALITY = 50
LOW_JPEG_QUALITY = 30
CROP_SHARE = 26 / 32
BRIGHTNESS, CONTRAST = 1.25, 0.8
RESIZE_SHARE = 0.75
ROTATE_DEGREES = 5.0
BORDER_SHARE = 0.75      # the photo's share of each side inside the frame
LETTERBOX_SHARE = 0.7    # the photo's share of the height between the bars
LOGO_SHARE = 0.2         # the logo's side, a share of the photo's shorter side
TEXT_MIN_SIDE = 96       # a caption (about 11 pixels high) only on photos at least this big


def _pil(img: np.ndarray):
    from PIL import Image

    return Image.fromarray(np.ascontiguousarray(img, np.uint8), "RGB")


def _size(n: float) -> int:
    return max(1, int(round(n)))


def jpeg(img: np.ndarray, quality: int = JPEG_QUALITY) -> np.ndarray:
    from PIL import Image

    out = io.BytesIO()
    _pil(img).save(out, "JPEG", quality=int(quality))
    with Image.open(io.BytesIO(out.getvalue())) as im:
        return np.asarray(im.convert("RGB"))


def crop(img: np.ndarray, top: float, left: float, height: float, width: float) -> np.ndarray:
    """The part at (top, left) of (height, width), each a share of the side, scaled back (bilinear)."""
    from PIL import Image

    h, w = img.shape[:2]
    ch, cw = _size(h * height), _size(w * width)
    y, x = min(h - ch, int(round(h * top))), min(w - cw, int(round(w * left)))
    return np.asarray(_pil(img[y:y + ch, x:x + cw]).resize((w, h), Image.BILINEAR))


def enhanced(img: np.ndarray, brightness: float = 1.0, contrast: float = 1.0, saturation: float = 1.0) -> np.ndarray:
    from PIL import ImageEnhance

    out = _pil(img)
    for kind, factor in ((ImageEnhance.Brightness, brightness), (ImageEnhance.Contrast, contrast),
                         (ImageEnhance.Color, saturation)):
        if factor != 1.0:
            out = kind(out).enhance(factor)
    return np.asarray(out)


def rescaled(img: np.ndarray, share: float) -> np.ndarray:
    """Scaled to `share` of each side and back (bilinear)."""
    from PIL import Image

    h, w = img.shape[:2]
    small = _pil(img).resize((_size(w * share), _size(h * share)), Image.BILINEAR)
    return np.asarray(small.resize((w, h), Image.BILINEAR))


def rotated(img: np.ndarray, degrees: float, fill=(0, 0, 0)) -> np.ndarray:
    from PIL import Image

    return np.asarray(_pil(img).rotate(degrees, resample=Image.BILINEAR, fillcolor=tuple(int(c) for c in fill)))


def framed(img: np.ndarray, height: float, width: float, fill=(255, 255, 255), top: float = 0.5,
           left: float = 0.5) -> np.ndarray:
    """The photo shrunk to (height, width) shares of its sides inside a frame of colour `fill`, its
    place within the frame at (top, left) shares of the room left (0.5: centred)."""
    from PIL import Image

    h, w = img.shape[:2]
    ih, iw = _size(h * height), _size(w * width)
    canvas = Image.new("RGB", (w, h), tuple(int(c) for c in fill))
    canvas.paste(_pil(img).resize((iw, ih), Image.BILINEAR), (int(round((w - iw) * left)), int(round((h - ih) * top))))
    return np.asarray(canvas)


def grayscale(img: np.ndarray) -> np.ndarray:
    return np.asarray(_pil(img).convert("L").convert("RGB"))


def overlaid(img: np.ndarray, share: float = LOGO_SHARE, top: float = 1.0, left: float = 1.0,
             colour=(220, 30, 30), text: str | None = None) -> np.ndarray:
    """A logo (a square of `colour`, a fifth of it a white bar) of `share` of the shorter side at (top,
    left) shares of the room left, and `text` (Pillow's default font, white on black) in the upper left of a photo of at least
    TEXT_MIN_SIDE pixels a side."""
    from PIL import ImageDraw

    h, w = img.shape[:2]
    side = _size(min(h, w) * share)
    y, x = int(round((h - side) * top)), int(round((w - side) * left))
    out = _pil(img)
    draw = ImageDraw.Draw(out)
    draw.rectangle((x, y, x + side - 1, y + side - 1), fill=tuple(int(c) for c in colour))
    bar = max(1, side // 5)
    draw.rectangle((x, y + (side - bar) // 2, x + side - 1, y + (side - bar) // 2 + bar - 1), fill=(255, 255, 255))
    if text and min(h, w) >= TEXT_MIN_SIDE:
        draw.text((1, 1), text, fill=(255, 255, 255), stroke_width=1, stroke_fill=(0, 0, 0))
    return np.asarray(out)


EDITS = {
    "jpeg": lambda img: jpeg(img, JPEG_QUALITY),
    "jpeg30": lambda img: jpeg(img, LOW_JPEG_QUALITY),
    "flip": lambda img: np.ascontiguousarray(img[:, ::-1]),
    "crop": lambda img: crop(img, (1 - CROP_SHARE) / 2, (1 - CROP_SHARE) / 2, CROP_SHARE, CROP_SHARE),
    "colour": lambda img: enhanced(img, BRIGHTNESS, CONTRAST),
    "resize": lambda img: rescaled(img, RESIZE_SHARE),
    "rotate": lambda img: rotated(img, ROTATE_DEGREES),
    "border": lambda img: framed(img, BORDER_SHARE, BORDER_SHARE),
    "letterbox": lambda img: framed(img, LETTERBOX_SHARE, 1.0, (0, 0, 0)),
    "grayscale": grayscale,
    "overlay": overlaid,
}
FIRST_EDITS = ("jpeg", "flip", "crop", "colour", "resize")  # the five of the tables before the edit family grew


def check_edits(names) -> list[str]:
    """Edit names, each known, in the order given (none repeated)."""
    names = list(names)
    unknown = [n for n in names if n not in EDITS]
    if unknown or not names or len(set(names)) != len(names):
        raise InputError(f"edits must be distinct names among {', '.join(EDITS)}, got {', '.join(map(str, names)) or 'none'}")
    return names


def _checked(img) -> np.ndarray:
    arr = np.asarray(img)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise InputError(f"an edit takes a uint8 (H, W, 3) image, got {arr.dtype} {arr.shape}")
    return arr


def edited(img: np.ndarray, name: str) -> np.ndarray:
    """The copy of uint8 (H, W, 3) `img` under edit `name` (uint8, same size)."""
    out = EDITS[check_edits([name])[0]](_checked(img))
    return np.ascontiguousarray(out, np.uint8)


# The random chains a learned instance code trains on: each step applies with its probability, in this
# order, with parameters drawn from the ranges below (wider than the named edits', which lie inside them).
STEPS = (
    ("crop", 0.6),       # 45-100% of the area, aspect 3/4-4/3, anywhere, scaled back
    ("flip", 0.5),
    ("rotate", 0.3),     # -10..10 degrees, the corners black, white or the photo's mean colour
    ("colour", 0.6),     # brightness and contrast 0.6-1.4, saturation 0.4-1.6
    ("grayscale", 0.2),
    ("rescale", 0.3),    # to 35-90% of each side and back
    ("frame", 0.35),     # a border (60-95% of each side) or a letterbox/pillarbox (55-90%), any colour
    ("overlay", 0.25),   # a logo of 10-30% of the side anywhere, with a short text half the time
    ("jpeg", 0.5),       # quality 15-90
)


def random_edit(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random chain of `STEPS` applied to uint8 (H, W, 3) `img` (uint8, same size), drawn from `rng`."""
    out = _checked(img)
    for step, p in STEPS:
        if rng.random() >= p:
            continue
        if step == "crop":
            area, aspect = rng.uniform(0.45, 1.0), np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            hh, ww = min(1.0, np.sqrt(area / aspect)), min(1.0, np.sqrt(area * aspect))
            out = crop(out, rng.uniform(0, 1 - hh), rng.uniform(0, 1 - ww), hh, ww)
        elif step == "flip":
            out = np.ascontiguousarray(out[:, ::-1])
        elif step == "rotate":
            fill = [(0, 0, 0), (255, 255, 255), tuple(out.reshape(-1, 3).mean(axis=0))][rng.integers(3)]
            out = rotated(out, rng.uniform(-10, 10), fill)
        elif step == "colour":
            out = enhanced(out, rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4), rng.uniform(0.4, 1.6))
        elif step == "grayscale":
            out = grayscale(out)
        elif step == "rescale":
            out = rescaled(out, rng.uniform(0.35, 0.9))
        elif step == "frame":
            fill = rng.integers(0, 256, 3) if rng.random() < 0.5 else [(0, 0, 0), (255, 255, 255)][rng.integers(2)]
            kind = rng.integers(3)  # a border, a letterbox, a pillarbox
            if kind == 0:
                s = rng.uniform(0.6, 0.95)
                out = framed(out, s, s, fill, rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7))
            else:
                s = rng.uniform(0.55, 0.9)
                out = framed(out, s, 1.0, fill) if kind == 1 else framed(out, 1.0, s, fill)
        elif step == "overlay":
            text = "".join(rng.choice(list("ABCDEFGHJKLMNPRSTUVWXYZ0123456789"), 6)) if rng.random() < 0.5 else None
            out = overlaid(out, rng.uniform(0.1, 0.3), rng.random(), rng.random(), rng.integers(0, 256, 3), text)
        else:
            out = jpeg(out, int(rng.integers(15, 91)))
    return np.ascontiguousarray(out, np.uint8)


# `trimmed` undoes what the frame edits do where it can: a border, letterbox or pillarbox of one colour
FRAME_TOLERANCE = 24  # a frame's pixels within this of its outer row's median colour (JPEG noise, in 0-255)
MIN_CONTENT = 0.25    # trimming that would leave less than this share of a side trims nothing on that axis


def _frame_rows(img: np.ndarray) -> int:
    """The rows at the top of int16 `img` (H, W, 3) that belong to a one-colour frame: those before the
    first with a pixel further than FRAME_TOLERANCE from the median colour of the outermost row."""
    far = np.abs(img - np.median(img[0], axis=0)).max(axis=(1, 2)) > FRAME_TOLERANCE
    return int(np.argmax(far)) if far.any() else img.shape[0]


def trimmed(img: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3) `img` without its one-colour margins (a frame, letterbox bars, a photo's uniform
    sky or backdrop edge too): what a bordered or letterboxed copy and its photo have in common, so that
    both embed alike (lbhash.indexes.folder_copies). An axis whose margins leave less than MIN_CONTENT of it
    is left whole (a photo of one colour stays as it is)."""
    x = _checked(img).astype(np.int16)
    h, w = x.shape[:2]
    top, bottom = _frame_rows(x), _frame_rows(x[::-1])
    left, right = _frame_rows(x.transpose(1, 0, 2)), _frame_rows(x.transpose(1, 0, 2)[::-1])
    if h - top - bottom < MIN_CONTENT * h:
        top = bottom = 0
    if w - left - right < MIN_CONTENT * w:
        left = right = 0
    return np.ascontiguousarray(img[top:h - bottom, left:w - right])
