"""Image transforms: shapes, value ranges, exact pixels, randomness and DataLoader workers."""

import numpy as np
import pytest
import torch
from helpers import raises
from torch.utils.data import DataLoader, Dataset

from lbhash.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    TRANSFORM_PRESETS,
    CenterCrop,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    Resize,
    ToFloat,
    build_transforms,
)

MEAN = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
STD = torch.tensor(IMAGENET_STD).view(3, 1, 1)


def grid(h, w, channels=3):
    """uint8 CHW image whose pixels are all different (value = row * w + col, per channel offset)."""
    base = torch.arange(h * w, dtype=torch.int64).view(h, w)
    return torch.stack([(base + 50 * c) % 256 for c in range(channels)]).to(torch.uint8)


def white(h, w):
    return torch.full((3, h, w), 255, dtype=torch.uint8)


@pytest.mark.parametrize("preset,size,shapes", [
    ("imagenet", 224, [(32, 32), (200, 300), (500, 375)]),
    ("imagenet", 96, [(32, 32), (120, 80)]),
    ("cifar", 224, [(32, 32), (40, 50)]),
    ("cifar-augment", 32, [(32, 32), (28, 28)]),
])
@pytest.mark.parametrize("train", [True, False])
def test_output_shape_dtype_and_white(preset, size, shapes, train):
    t = build_transforms(preset, size, train=train)
    top = (1 - MEAN) / STD
    for h, w in shapes:
        out = t(white(h, w))
        assert out.shape == (3, size, size) and out.dtype == torch.float32
        if preset == "cifar-augment" and train:  # pad-4 crops may show the zero border
            bottom = (0 - MEAN) / STD
            assert torch.isclose(out, top.expand_as(out), atol=1e-5).logical_or(
                torch.isclose(out, bottom.expand_as(out), atol=1e-5)).all()
        else:
            torch.testing.assert_close(out, top.expand_as(out), atol=1e-5, rtol=0)


def test_value_range_and_cifar_augment_eval_is_only_normalisation():
    img = grid(32, 32)
    out = build_transforms("cifar-augment", 32, train=False)(img)
    torch.testing.assert_close(out, (img.float() / 255 - MEAN) / STD)
    for preset in TRANSFORM_PRESETS:
        out = build_transforms(preset, 64, train=True)(grid(32, 32))
        lo, hi = (0 - MEAN) / STD, (1 - MEAN) / STD
        assert (out >= lo - 1e-5).all() and (out <= hi + 1e-5).all()
    x = ToFloat()(grid(5, 5))
    assert x.dtype == torch.float32 and x.min() == 0 and abs(float(x.max()) - 124 / 255) < 1e-7


def test_resize():
    x = grid(200, 300)
    assert Resize(100)(x).shape == (3, 100, 150)             # shorter side, aspect kept
    assert Resize(100)(grid(300, 200)).shape == (3, 150, 100)
    assert Resize(7)(grid(9, 10)).shape == (3, 7, 7)          # 7 * 10 / 9 = 7.8 -> 7 (truncated)
    assert Resize((20, 30))(x).shape == (3, 20, 30)
    out = Resize(100)(x)
    assert out.dtype == torch.uint8
    assert Resize(200)(x) is x and Resize((200, 300))(x) is x  # same size: untouched
    # antialiasing: 1-pixel stripes every 4th column shrunk 4x average to 0.25 (plain bilinear
    # samples between the stripes and gives 0); columns at the border see a one-sided kernel
    stripes = (torch.arange(16) % 4 == 0).float().expand(3, 16, 16)
    out = Resize((16, 4))(stripes)
    torch.testing.assert_close(out[:, :, 1:3], torch.full((3, 16, 2), 0.25))
    assert (out[:, :, [0, 3]] - 0.25).abs().max() < 0.08
    flat = torch.full((3, 32, 32), 0.3)
    torch.testing.assert_close(Resize(224)(flat), torch.full((3, 224, 224), 0.3))


def test_center_crop_exact_pixels():
    x = grid(6, 7)
    out = CenterCrop((2, 3))(x)
    assert torch.equal(out, x[:, 2:4, 2:5])                    # top (6-2)//2 = 2, left (7-3)//2 = 2
    assert torch.equal(CenterCrop(4)(grid(8, 8)), grid(8, 8)[:, 2:6, 2:6])
    with raises("CenterCrop 9x9", "larger than the image 8x8"):
        CenterCrop(9)(grid(8, 8))


def find_window(big: torch.Tensor, small: torch.Tensor):
    h, w = small.shape[-2:]
    hits = [(t, l) for t in range(big.shape[-2] - h + 1) for l in range(big.shape[-1] - w + 1)
            if torch.equal(big[:, t:t + h, l:l + w], small)]
    assert len(hits) == 1
    return hits[0]


def test_random_crop_positions_within_bounds():
    x = grid(10, 10)
    torch.manual_seed(0)
    seen = {find_window(x, RandomCrop(4)(x)) for _ in range(400)}
    assert seen == {(t, l) for t in range(7) for l in range(7)}   # every position, none outside
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    seen = {find_window(padded, RandomCrop(10, padding=2)(x)) for _ in range(300)}
    assert seen == {(t, l) for t in range(5) for l in range(5)}
    with raises("RandomCrop 11x11", "larger"):
        RandomCrop(11)(x)


def test_flip_correctness():
    x = grid(3, 4)
    out = RandomHorizontalFlip(p=1.0)(x)
    for col in range(4):
        assert torch.equal(out[:, :, col], x[:, :, 3 - col])
    assert RandomHorizontalFlip(p=0.0)(x) is x
    torch.manual_seed(1)
    flips = [not torch.equal(RandomHorizontalFlip()(x), x) for _ in range(400)]
    assert 150 < sum(flips) < 250


def test_determinism_and_rngs():
    t = build_transforms("imagenet", 64, train=True)
    x = grid(80, 90)
    torch.manual_seed(5)
    a = [t(x) for _ in range(5)]
    torch.manual_seed(5)
    b = [t(x) for _ in range(5)]
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not all(torch.equal(a[0], p) for p in a[1:])
    np_state = np.random.get_state()[1].copy()
    torch.manual_seed(5)
    first = RandomCrop(4, generator=torch.Generator().manual_seed(9))(x)
    flip = RandomHorizontalFlip(generator=torch.Generator().manual_seed(9))(x)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))  # an explicit generator leaves the global RNG alone
    assert torch.equal(first, RandomCrop(4, generator=torch.Generator().manual_seed(9))(x))
    assert torch.equal(flip, RandomHorizontalFlip(generator=torch.Generator().manual_seed(9))(x))
    np.testing.assert_array_equal(np.random.get_state()[1], np_state)  # numpy's RNG never used


def test_bad_arguments():
    with raises("unknown transform preset 'vit'", "imagenet, cifar, cifar-augment"):
        build_transforms("vit", 224, True)
    for size in (0, 3.5, True, None):
        with raises("image_size", repr(size)):
            build_transforms("imagenet", size, True)
    with raises("float tensor", "ToFloat"):
        Normalize()(grid(2, 2))
    with raises("padding"):
        RandomCrop(4, padding=-1)
    with raises("Resize size"):
        Resize(0)


class Constant(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, k):
        return build_transforms("imagenet", 16, train=True)(grid(20, 24)), k


def test_random_transforms_in_dataloader_workers():
    def run():
        torch.manual_seed(3)  # the training loop seeds torch per epoch; DataLoader seeds workers from it
        return torch.cat([x for x, _ in DataLoader(Constant(), batch_size=2, num_workers=2)])

    a, b = run(), run()
    assert a.shape == (8, 3, 16, 16) and torch.equal(a, b)
    assert not all(torch.equal(a[0], a[k]) for k in range(1, 8))  # workers draw different crops
