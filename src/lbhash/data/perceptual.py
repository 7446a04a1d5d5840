"""A photo's perceptual hash: pHash's 64 bits (Zauner 2010, in the form of the `imagehash` package's
`phash`): the luminance shrunk to 32 x 32 px, its two-dimensional DCT-II, and of the 8 x 8 lowest
frequencies which lie above their median. It barely moves under JPEG, blur, brightness, colour and
grayscale, where a CNN's embedding moves most, and fails under mirroring, crops and frames, where the
embedding holds: `lbhash duplicates FOLDER` scores a pair by both (lbhash.indexes.folder_copies).
`perceptual_codes` are the 128 bits a perceptual instance code keeps beside its learned ones
(lbhash.instance.InstanceTransform.perceptual_bits): pHash of the photo, and of the photo less its one-colour
margins (which a frame or letterbox bars then leave alone) turned to face one way so that a mirrored copy
hashes alike (`phash_bits`' `facing`); two photos are compared by the least distance of any hash of one to
any of the other's (lbhash.instance.perceptual_distances: a framed copy's trimmed hash meets its photo's
own where the photo has a margin of its own; docs/instance-codes.md, "Perceptual bits").
Numpy and Pillow only; the bits equal imagehash's but where a coefficient ties with the median.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from lbhash.codes import pack
from lbhash.data.edits import trimmed

SIDE, LOW = 32, 8  # the shrunk luminance's side; the lowest frequencies kept per axis (LOW x LOW bits)
BITS = LOW * LOW
PERCEPTUAL_BITS = 2 * BITS  # `perceptual_codes`: the photo's pHash, then its trimmed copy's facing one way
# a photo faces one way where the first FACING_ROWS vertical frequencies of its lowest horizontal one sum to 0 or
# more (it is brighter on the left): mirroring changes the sign of every odd horizontal frequency, so a photo and
# its mirror image face the same way once turned (docs/results/copies.md, "A mirrored copy's hash")
FACING_ROWS = 3
_MIRRORED = (-1.0) ** np.arange(LOW)  # the factor mirroring puts on each horizontal frequency


def _dct_matrix(n: int) -> np.ndarray:
    """The DCT-II of length n as a matrix (unnormalised: only signs against a median are read)."""
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    return np.cos(np.pi * k * (2 * i + 1) / (2 * n))


_DCT = _dct_matrix(SIDE)[:LOW]  # (LOW, SIDE): the rows the kept frequencies need


def phash_bits(img: np.ndarray, facing: bool = False) -> np.ndarray:
    """The 64 pHash bits (bool, row by row of the 8 x 8 frequencies) of a uint8 (H, W, 3) photo; `facing`: of
    the photo or its mirror image, whichever faces the FACING_ROWS way (the same bits for both)."""
    luma = Image.fromarray(np.asarray(img, np.uint8)).convert("L").resize((SIDE, SIDE), Image.Resampling.LANCZOS)
    low = _DCT @ np.asarray(luma, np.float64) @ _DCT.T
    if facing and low[:FACING_ROWS, 1].sum() < 0:
        low = low * _MIRRORED  # (the mirror image's coefficients)
    return (low > np.median(low)).ravel()


def phash_signs(images, facing: bool = False) -> np.ndarray:
    """float32 (n, 64) of +1 and -1 (a bit set: +1): `phash_bits` of each uint8 (H, W, 3) photo."""
    if not len(images):
        return np.empty((0, BITS), np.float32)
    return np.where(np.stack([phash_bits(img, facing) for img in images]), 1.0, -1.0).astype(np.float32)


def perceptual_codes(images) -> np.ndarray:
    """Packed uint8 (n, PERCEPTUAL_BITS // 8), in the layout of lbhash.codes.pack: each uint8 (H, W, 3) photo's
    pHash bits, then those of the photo less its one-colour margins (lbhash.data.edits.trimmed) facing one
    way."""
    if not len(images):
        return np.empty((0, PERCEPTUAL_BITS // 8), np.uint8)
    return pack(np.hstack([phash_signs(images), phash_signs([trimmed(img) for img in images], facing=True)]),
                "perceptual bits")
