"""The feature cache keeps a row per photo (issue 89, item 5: "adding 10 photos to a folder recomputes
the cached features of all 500"): a folder of real CIFAR-10 JPEGs that grew computes only its new
photos, a changed photo (same name, other bytes) is computed again, a corrupt shard is removed with a
warning and only its photos computed again, and a space read from many shards is merged into one
that holds the folder's photos as they are now. The features are checked against the backbone's own
outputs on the evaluation transform, computed here in one batch: a photo's features do not depend on
the other photos beside it (eval mode: BatchNorm's running statistics), but the CPU's kernels round
differently at another batch size (about 1e-5 on the features, which the first test of
test_feature_cache.py tolerates too), so the comparison allows that."""

import functools
import logging
import shutil

import numpy as np
import pytest
import torch

from lbhash.data import InputOptions, feature_cache, feature_shards, load_data
from lbhash.data.feature_cache import backbone_features, space_key
from lbhash.data.pixel_cache import cache_root
from lbhash.data.views import blurred, view_of
from lbhash.models import create_image_model

OPTIONS = InputOptions(32, "cifar", 0, True)
CLASSES = ("airplane", "cat", "frog", "ship")


@pytest.fixture(scope="module")
def backbone():
    torch.manual_seed(0)
    return create_image_model("resnet8", 16).backbone.eval()


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of each test's own: the session's holds other tests' shards of the same photos."""
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


class Seen:
    """The images a backbone's forward passes take (a pre-hook: every path to it counts), and the
    files `feature_cache._compute` sent through it."""

    def __init__(self, backbone, monkeypatch):
        self.images, self.files, real = 0, [], feature_cache._compute
        handle = backbone.register_forward_pre_hook(lambda module, args: setattr(self, "images",
                                                                                 self.images + len(args[0])))
        monkeypatch.setattr(feature_cache, "_compute", lambda ds, bb, idx, *a: self.files.extend(
            s.rsplit("/", 2)[-2] + "/" + s.rsplit("/", 1)[-1] for s in ds.item_sources(idx)) or real(ds, bb, idx, *a))
        self.remove = handle.remove


def folder(cifar_sample, out, per_class: int, start: int = 0):
    """`per_class` training JPEGs of each of CLASSES from the sample, from its `start`-th on, copied
    into `out`/CLASS/ by their names."""
    for name in CLASSES:
        (out / name).mkdir(parents=True, exist_ok=True)
        for jpg in sorted((cifar_sample / "train" / name).glob("*.jpg"))[start:start + per_class]:
            shutil.copyfile(jpg, out / name / jpg.name)
    return out


def direct(backbone, data) -> np.ndarray:
    """The backbone's outputs on every item's evaluation transform, in one batch: the expectation."""
    with torch.no_grad():
        return torch.cat([backbone(x) for x in data.encode_batches(None, OPTIONS, batch_size=len(data))]).numpy()


def shards(backbone, data) -> list:
    space = feature_shards.space_dir(cache_root(), space_key(backbone, OPTIONS, False, data))
    return sorted(p for p in space.iterdir() if not p.name.startswith("."))


def test_a_grown_folder_computes_only_its_new_photos(cifar_sample, tmp_path, backbone, monkeypatch, caplog):
    photos = folder(cifar_sample, tmp_path / "photos", 6)
    first = backbone_features(load_data(f"images:{photos}"), backbone, None, OPTIONS)
    folder(cifar_sample, photos, 1, start=6)  # 4 new photos, one in each class folder
    shutil.copyfile(photos / "cat" / "0001.jpg", photos / "cat" / "copy-of-0001.jpg")  # a copy: the same bytes
    grown = load_data(f"images:{photos}")
    names = [s.rsplit("/", 2)[-2] + "/" + s.rsplit("/", 1)[-1] for s in grown.item_sources(None)]
    seen = Seen(backbone, monkeypatch)
    caplog.set_level(logging.INFO, logger="lbhash")
    features = backbone_features(grown, backbone, None, OPTIONS)
    seen.remove()
    new = sorted(f"{c}/{sorted((cifar_sample / 'train' / c).glob('*.jpg'))[6].name}" for c in CLASSES)
    assert seen.images == 4 and sorted(seen.files) == new
    assert "backbone features: 25 of 29 images from the cache, 4 to compute (resnet8)" in caplog.messages
    old = [names.index(n) for n in sorted(set(names) - set(new) - {"cat/copy-of-0001.jpg"})]
    np.testing.assert_array_equal(features[old], first)  # the cached rows, as the first request computed them
    np.testing.assert_array_equal(features[names.index("cat/copy-of-0001.jpg")], features[names.index("cat/0001.jpg")])
    np.testing.assert_allclose(features, direct(backbone, grown), atol=1e-5, rtol=1e-5)
    assert len(shards(backbone, grown)) == 2  # the first 24 photos, the 4 new ones
    np.testing.assert_array_equal(backbone_features(grown, backbone, [3, 27, 1], OPTIONS), features[[3, 27, 1]])
    assert seen.images == 4  # any part of the folder: read


def test_a_changed_photo_is_computed_again_and_a_corrupt_shard_warns(cifar_sample, tmp_path, backbone, monkeypatch,
                                                                      caplog):
    photos = folder(cifar_sample, tmp_path / "photos", 5)
    backbone_features(load_data(f"images:{photos}"), backbone, None, OPTIONS)
    replaced = photos / "frog" / sorted(p.name for p in (photos / "frog").iterdir())[2]
    other = sorted((cifar_sample / "train" / "frog").glob("*.jpg"))[50]
    shutil.copyfile(other, replaced)  # the same name, another photo's bytes
    data = load_data(f"images:{photos}")
    expected = direct(backbone, data)
    seen = Seen(backbone, monkeypatch)
    features = backbone_features(data, backbone, None, OPTIONS)
    assert seen.images == 1 and seen.files == [f"frog/{replaced.name}"]
    np.testing.assert_allclose(features, expected, atol=1e-5, rtol=1e-5)
    newest = max(shards(backbone, data), key=lambda p: p.stat().st_mtime_ns)
    for broken in ("features.npy", "photos.npy"):  # either file of a shard, its bytes flipped
        with open(newest / broken, "r+b") as fh:
            fh.seek(-8, 2)
            fh.write(b"\x01" * 8)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lbhash"):
            again = backbone_features(data, backbone, None, OPTIONS)
        assert "checksum differs" in caplog.text  # removed, computed again and written again (the same name)
        np.testing.assert_allclose(again, features, atol=1e-5, rtol=1e-5)
    assert seen.images == 3 and seen.files == [f"frog/{replaced.name}"] * 3  # that shard's one photo, each time
    seen.remove()


def test_a_space_of_many_shards_is_merged_into_the_photos_of_now(cifar_sample, tmp_path, backbone, monkeypatch):
    monkeypatch.setattr(feature_shards, "MAX_SHARDS", 2)
    photos = folder(cifar_sample, tmp_path / "photos", 3)
    backbone_features(load_data(f"images:{photos}"), backbone, None, OPTIONS)
    folder(cifar_sample, photos, 1, start=3)  # a second shard
    backbone_features(load_data(f"images:{photos}"), backbone, None, OPTIONS)
    changed = photos / "ship" / sorted(p.name for p in (photos / "ship").iterdir())[0]
    shutil.copyfile(sorted((cifar_sample / "train" / "ship").glob("*.jpg"))[60], changed)
    data = load_data(f"images:{photos}")
    seen = Seen(backbone, monkeypatch)
    features = backbone_features(data, backbone, None, OPTIONS)  # reads 2 shards, computes 1: merged
    assert seen.images == 1
    (merged,) = shards(backbone, data)  # one shard, of the folder's photos now: the changed one's old row is gone
    held = np.load(merged / "photos.npy")
    assert sorted(map(bytes, held)) == sorted(map(bytes, feature_shards.photo_digests(data, np.arange(len(data)))))
    np.testing.assert_array_equal(backbone_features(data, backbone, None, OPTIONS), features)
    assert seen.images == 1
    seen.remove()


def test_a_view_has_a_space_of_its_own_and_so_has_another_blur(cifar_sample, tmp_path, backbone):
    data = load_data(f"images:{folder(cifar_sample, tmp_path / 'photos', 1)}")
    keys = [space_key(backbone, OPTIONS, False, d) for d in
            (data, view_of(data, blurred), view_of(data, functools.partial(blurred, sigma=1.2)))]
    assert "view" not in keys[0] and keys[1]["view"]["name"] == "blurred"
    assert len({feature_shards.space_dir(cache_root(), k) for k in keys}) == 3
    # the photos of a view are keyed by the files they come from: the view is the space's
    np.testing.assert_array_equal(feature_shards.photo_digests(view_of(data, blurred), np.arange(4)),
                                  feature_shards.photo_digests(data, np.arange(4)))


def test_requests_of_new_photos_alone_leave_a_few_shards_a_tier_and_lose_no_row(backbone, monkeypatch, rng):
    """A query's photos are new each time: each request reads no shard and writes one. 70 of them (one
    photo each, the 70th one photo twice) leave fewer than MAX_SHARDS shards of each size tier (8 of one
    row merge into one of 8, 8 of those into one of 64), and every photo's features are still read back."""
    from lbhash.data import ImageDataset

    def photos(pixels):
        return ImageDataset(np.zeros((len(pixels), 0), bool), None, "copies", pixels=pixels)

    pixels = rng.integers(0, 256, (70, 32, 32, 3), dtype=np.uint8)
    pixels[69] = pixels[3]
    one_by_one = np.concatenate([backbone_features(photos(pixels[i:i + 1]), backbone, None, OPTIONS)
                                 for i in range(70)])
    rows = sorted(len(np.load(s / "photos.npy")) for s in shards(backbone, photos(pixels[:1])))
    assert rows == [1, 1, 1, 1, 1, 64]  # 69 photos: 64 merged twice over (1 -> 8 -> 64), 5 single
    seen = Seen(backbone, monkeypatch)
    np.testing.assert_array_equal(backbone_features(photos(pixels), backbone, None, OPTIONS), one_by_one)
    assert seen.images == 0  # (read from the 6 shards: fewer than MAX_SHARDS, so not merged into one)
    seen.remove()
