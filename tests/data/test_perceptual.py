"""pHash (lbhash.data.perceptual): its bits against a DCT summed term by term, and what it keeps and loses."""

import math

import numpy as np
import pytest
from PIL import Image

from lbhash.data.edits import edited
from lbhash.data.perceptual import BITS, phash_bits, phash_signs


def reference_low(img: np.ndarray) -> np.ndarray:
    """The luminance at 32 x 32 (Lanczos), its DCT-II summed term by term for the 8 x 8 lowest frequencies."""
    luma = np.asarray(Image.fromarray(img).convert("L").resize((32, 32), Image.Resampling.LANCZOS), np.float64)
    low = np.zeros((8, 8))
    for u in range(8):
        for v in range(8):
            low[u, v] = sum(luma[x, y] * math.cos(math.pi * u * (2 * x + 1) / 64) * math.cos(math.pi * v * (2 * y + 1) / 64)
                            for x in range(32) for y in range(32))
    return low


def reference_bits(img: np.ndarray) -> np.ndarray:
    """pHash by its definition: each of `reference_low` above their median."""
    low = reference_low(img)
    return (low > np.median(low)).ravel()


def photo(rng, size=(48, 40)) -> np.ndarray:
    """A photo-like image: a 6 x 6 grid of random colours, scaled up smoothly (strong low frequencies, as a
    photo has; noise alone has none to hash)."""
    grid = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(grid).resize((size[1], size[0]), Image.Resampling.BILINEAR))


def test_the_bits_are_the_dct_of_the_shrunk_luminance(rng):
    for _ in range(3):
        img = photo(rng)
        np.testing.assert_array_equal(phash_bits(img), reference_bits(img))
    assert phash_bits(img).shape == (BITS,) and phash_bits(img).sum() == BITS // 2  # (half lie above the median)


def test_grayscale_and_jpeg_keep_the_bits_and_mirroring_does_not(rng):
    img = photo(rng, (64, 64))
    bits = phash_bits(img)
    assert (phash_bits(edited(img, "grayscale")) != bits).sum() <= 2
    assert (phash_bits(edited(img, "jpeg")) != bits).sum() <= 4
    assert (phash_bits(img[:, ::-1]) != bits).sum() >= 16  # (the odd horizontal frequencies change sign)


def test_facing_bits_are_those_of_the_photo_or_its_mirror_image_brighter_on_the_left(rng):
    for _ in range(3):
        img = photo(rng, (40, 44))
        mirror = np.ascontiguousarray(img[:, ::-1])
        # the left-hand half weighs + in the lowest horizontal frequency: the one whose three lowest rows sum >= 0
        faces = img if reference_low(img)[:3, 1].sum() >= 0 else mirror
        np.testing.assert_array_equal(phash_bits(img, facing=True), reference_bits(faces))
        np.testing.assert_array_equal(phash_bits(mirror, facing=True), reference_bits(faces))
    sides = [np.array_equal(phash_bits(p, facing=True), phash_bits(p)) for p in (photo(rng) for _ in range(12))]
    assert any(sides) and not all(sides)  # (both ways occur among photos: some left as they are, some turned)


def test_signs_are_the_bits_as_plus_and_minus_one(rng):
    images = [photo(rng) for _ in range(3)]
    signs = phash_signs(images)
    assert signs.dtype == np.float32 and signs.shape == (3, BITS)
    np.testing.assert_array_equal(signs > 0, np.stack([phash_bits(i) for i in images]))
    assert phash_signs([]).shape == (0, BITS)


def test_equals_imagehash_where_installed(rng):
    imagehash = pytest.importorskip("imagehash", reason="imagehash is optional (pip install imagehash)")
    for _ in range(5):
        img = photo(rng, (37, 53))
        np.testing.assert_array_equal(phash_bits(img), imagehash.phash(Image.fromarray(img)).hash.ravel())
