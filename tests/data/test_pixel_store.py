"""The decoded-pixel store and the batched transforms.

References: the per-image pipeline (lbhash.data.transforms on one CHW image, PIL decoding)
for the pixels of every data kind; a brute-force search over every crop offset and flip for
the training augmentation; a second process for concurrent cache builds.
"""

import io
import json
import logging
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from conftest import REPO, shared_data_dir
from PIL import Image

from lbhash.data import load_data, load_image_arrays, pixel_cache
from lbhash.data.augment import BatchTransform
from lbhash.data.base import EpochShard, InputOptions
from lbhash.data.transforms import Resize, build_transforms

CLASSES = 3


@pytest.fixture(scope="module")
def real_images():
    """24 real CIFAR-10 JPEGs (bytes, decoded pixels, class) from the shared tarball."""
    path = shared_data_dir() / "cifar10-jpg.tar.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found (set LBHASH_SHARED_DATA)")
    out = []
    with tarfile.open(path) as tf:
        for member in tf:
            if member.isfile() and member.name.endswith(".jpg") and "/train/" in f"/{member.name}":
                data = tf.extractfile(member).read()
                out.append((data, np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))))
                if len(out) == 24:
                    break
    return out


def write_tree(root, images, kind="jpg"):
    for k, (data, px) in enumerate(images):
        folder = root / f"c{k % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "jpg":
            (folder / f"{k:03d}.jpg").write_bytes(data)
        else:
            Image.fromarray(px).save(folder / f"{k:03d}.png")
    return root


def per_image_inputs(ds, preset, size):
    """The reference: the per-image transform on each decoded image."""
    t = build_transforms(preset, size, train=False)
    return torch.stack([t(torch.from_numpy(ds.image(i)).permute(2, 0, 1)) for i in range(len(ds))])


def store_inputs(ds, preset, size):
    batches = ds.encode_batches(None, InputOptions(size, preset, 0, True), batch_size=7)
    return torch.cat(list(batches))


@pytest.fixture(scope="module")
def sources(real_images, tmp_path_factory):
    """The same images as a folder, a tarball, a list file, CIFAR pickles and an image array."""
    base = tmp_path_factory.mktemp("kinds")
    tree = write_tree(base / "tree", real_images)
    with tarfile.open(base / "tree.tar.gz", "w:gz") as tf:
        tf.add(tree, arcname="tree")
    names = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.jpg"))
    lists = base / "lists"
    lists.mkdir()
    for fname in ("train.txt", "test.txt", "database.txt"):
        (lists / fname).write_text("".join(f"{n} {' '.join('1' if c == int(n[1]) else '0' for c in range(CLASSES))}\n"
                                           for n in names))
    pixels = np.stack([px for _, px in real_images])
    labels = np.arange(len(pixels)) % CLASSES
    np.savez(base / "arrays.npz", images=pixels, labels=labels)
    batches = base / "cifar-10-batches-py"
    batches.mkdir()
    rows = pixels.transpose(0, 3, 1, 2).reshape(len(pixels), -1)
    for k in range(1, 6):
        part = slice((k - 1) * 4, k * 4)
        with open(batches / f"data_batch_{k}", "wb") as fh:
            pickle.dump({b"labels": [int(v) for v in labels[part]], b"data": rows[part]}, fh, protocol=2)
    with open(batches / "test_batch", "wb") as fh:
        pickle.dump({b"labels": [int(v) for v in labels[20:]], b"data": rows[20:]}, fh, protocol=2)
    with open(batches / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [f"c{c}".encode() for c in range(10)]}, fh, protocol=2)
    return {"images": f"images:{tree}", "tarball": f"images:{base / 'tree.tar.gz'}?cache=disk",
            "list": f"list:{lists}?root={tree}", "cifar-pickles": f"cifar10:{base}",
            "image-array": f"image-array:{base / 'arrays.npz'}"}


@pytest.mark.parametrize("kind", ["images", "tarball", "list", "cifar-pickles", "image-array"])
@pytest.mark.parametrize("preset,size", [("cifar-augment", 32), ("cifar", 40), ("imagenet", 24)])
def test_every_kind_gives_the_per_image_pipelines_pixels(sources, kind, preset, size):
    ds = load_data(sources[kind])
    got = store_inputs(ds, preset, size)
    assert ds.pixels is not None  # through the store
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got, per_image_inputs(ds, preset, size))


def test_store_holds_the_decoded_images(sources, real_images):
    expect = np.stack([px for _, px in real_images])
    order = np.argsort([k % CLASSES for k in range(len(expect))], kind="stable")  # class folders, then names
    for kind in ("images", "tarball"):
        ds = load_data(sources[kind])
        assert ds.preload()
        np.testing.assert_array_equal(ds.pixels, expect[order])


def crops_and_flips(image, size, pad):
    """Every (top, left, flip) window of the zero-padded HWC image, as CHW normalised floats."""
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)))
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    out = {}
    for top in range(padded.shape[0] - size + 1):
        for left in range(padded.shape[1] - size + 1):
            window = padded[top:top + size, left:left + size]
            for flip in (False, True):
                w = window[:, ::-1] if flip else window
                out[(top, left, flip)] = ((w.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)
    return out


def test_training_crops_are_windows_of_the_padded_image_and_cover_them(rng):
    images = rng.integers(0, 256, (64, 8, 8, 3), dtype=np.uint8)
    out = BatchTransform("cifar-augment", 8, train=True)(torch.from_numpy(images), torch.Generator().manual_seed(3))
    seen = set()
    for img, x in zip(images, out.numpy()):
        matches = [key for key, ref in crops_and_flips(img, 8, 4).items() if np.array_equal(ref, x)]
        assert matches, "an output that is no crop/flip of its padded input"
        seen.update(matches)
    assert {flip for *_, flip in seen} == {False, True}
    assert len({(t, l) for t, l, _ in seen}) > 20  # offsets spread over the 9 x 9 possible


def test_imagenet_training_crop_of_resized_batch(rng):
    images = rng.integers(0, 256, (6, 30, 40, 3), dtype=np.uint8)
    t = BatchTransform("imagenet", 14, train=True)
    out = t(torch.from_numpy(images), torch.Generator().manual_seed(0))
    resize = Resize(t.resized_shape(30, 40))  # the per-image resize is the reference
    resized = [resize(torch.from_numpy(img).permute(2, 0, 1)).permute(1, 2, 0).numpy() for img in images]
    for img, x in zip(resized, out.numpy()):
        assert any(np.array_equal(ref, x) for ref in crops_and_flips(img, 14, 0).values())


def test_epochs_are_seeded_and_resume_sees_the_same_batches(sources):
    ds = load_data(sources["image-array"])
    opts = InputOptions(32, "cifar-augment", 0, True)
    a = list(ds.train_batches(np.arange(20), EpochShard(5), options=opts).epoch(11))
    b = list(ds.train_batches(np.arange(20), EpochShard(5), options=opts).epoch(11))
    c = list(ds.train_batches(np.arange(20), EpochShard(5), options=opts).epoch(12))
    assert all(torch.equal(x1, x2) and torch.equal(i1, i2) for (x1, _, i1), (x2, _, i2) in zip(a, b))
    assert not all(torch.equal(x1, x2) for (x1, *_), (x2, *_) in zip(a, c))
    index = torch.cat([i for *_, i in a])
    assert sorted(index.tolist()) == list(range(20))
    labels = torch.cat([y for _, y, _ in a])
    np.testing.assert_array_equal(labels.numpy(), ds.labels[index.numpy()].astype(np.float32))


# --- the disk cache ------------------------------------------------------------------------------

def entry_of(ds):
    return pixel_cache.entry_dir(ds.cache_key, pixel_cache.source_fingerprint(ds.source))


def test_disk_cache_is_reused_without_decoding(real_images, tmp_path, monkeypatch):
    tree = write_tree(tmp_path / "t", real_images[:9])
    first = load_data(f"images:{tree}?cache=disk")
    assert first.preload() and (entry_of(first) / "pixels.npy").is_file()
    from lbhash.data import images as images_module

    monkeypatch.setattr(images_module, "decode_image", lambda *a, **k: pytest.fail("decoded again"))
    again = load_data(f"images:{tree}?cache=disk")
    assert again.preload()
    np.testing.assert_array_equal(again.pixels, first.pixels)


def test_changed_or_truncated_source_gets_a_new_entry(real_images, tmp_path):
    tree = write_tree(tmp_path / "t", real_images[:9], kind="png")
    with tarfile.open(tmp_path / "t.tar", "w") as tf:
        tf.add(tree, arcname="t")
    ds = load_data(f"images:{tmp_path / 't.tar'}?cache=disk")
    old_entry, old = entry_of(ds), ds.preload() and np.array(ds.pixels)
    # rewrite one member with other pixels (same name): a new fingerprint, the new pixels
    Image.fromarray(255 - real_images[0][1]).save(tree / "c0" / "000.png")
    with tarfile.open(tmp_path / "t.tar", "w") as tf:
        tf.add(tree, arcname="t")
    changed = load_data(f"images:{tmp_path / 't.tar'}?cache=disk")
    assert entry_of(changed) != old_entry and changed.preload()
    np.testing.assert_array_equal(changed.pixels[0], 255 - real_images[0][1])
    np.testing.assert_array_equal(changed.pixels[1:], old[1:])
    # a truncated file: also a new entry (and its lost members are unreadable, not stale pixels)
    data = (tmp_path / "t.tar").read_bytes()
    (tmp_path / "t.tar").write_bytes(data[: len(data) // 2])
    try:
        cut = load_data(f"images:{tmp_path / 't.tar'}?cache=disk")
    except ValueError as err:  # the tarball's index already notices
        assert "t.tar" in str(err)
        return
    assert entry_of(cut) not in (old_entry, entry_of(changed))
    with pytest.raises(ValueError, match="t.tar"):
        cut.check_items(np.arange(len(cut)))


@pytest.mark.parametrize("damage", ["flip-byte", "truncate", "meta", "pickle"])
def test_corrupt_entry_is_rebuilt_with_a_warning(real_images, tmp_path, damage, caplog):
    tree = write_tree(tmp_path / "t", real_images[:6])
    ds = load_data(f"images:{tree}?cache=disk")
    ds.preload()
    expect, entry = np.array(ds.pixels), entry_of(ds)
    pixels_file = entry / "pixels.npy"
    if damage == "flip-byte":
        raw = bytearray(pixels_file.read_bytes())
        raw[-5] ^= 0xFF
        pixels_file.write_bytes(bytes(raw))
    elif damage == "truncate":
        pixels_file.write_bytes(pixels_file.read_bytes()[:-100])
    elif damage == "meta":
        (entry / "meta.json").write_text("{not json")
    else:  # an object array (a pickle) with a matching record: np.load must refuse to unpickle it
        np.save(pixels_file, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        meta = json.loads((entry / "meta.json").read_text())
        meta.update(pixels_bytes=pixels_file.stat().st_size, pixels_sha256=pixel_cache.file_sha256(pixels_file))
        (entry / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="lbhash"):
        again = load_data(f"images:{tree}?cache=disk")
        assert again.preload()
    assert str(entry) in caplog.text and "rebuilding" in caplog.text
    np.testing.assert_array_equal(again.pixels, expect)
    assert pixel_cache.open_entry(entry, len(expect)) is not None  # rebuilt and verified


def test_two_processes_building_the_same_entry(real_images, tmp_path):
    tree = write_tree(tmp_path / "t", real_images)
    code = ("import sys, numpy as np; from lbhash.data import load_data; "
            f"ds = load_data({f'images:{tree}?cache=disk'!r}); ds.preload(); "
            "np.save(sys.argv[1], np.asarray(ds.pixels))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"out{k}.npy")], env=env) for k in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ds = load_data(f"images:{tree}?cache=disk")
    entry = entry_of(ds)
    mine = [p.name for p in entry.parent.iterdir() if entry.name in p.name]
    assert mine == [entry.name]  # one entry, no temporaries left
    ds.preload()
    for k in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"out{k}.npy"), ds.pixels)


def test_sets_above_the_memory_bound_are_memory_mapped(real_images, tmp_path, monkeypatch):
    tree = write_tree(tmp_path / "t", real_images[:6])
    small = load_data(f"images:{tree}")
    assert small.preload() and not isinstance(small.pixels, np.memmap)
    assert not entry_of(small).exists()  # fits in memory: nothing written
    monkeypatch.setattr(pixel_cache, "memory_budget", lambda: 100)
    big = load_data(f"images:{tree}")
    assert big.preload() and isinstance(big.pixels, np.memmap)
    np.testing.assert_array_equal(big.pixels, small.pixels)
    got = store_inputs(big, "cifar-augment", 32)
    assert torch.equal(got, per_image_inputs(small, "cifar-augment", 32))


def test_image_arrays_are_a_store_already(tmp_path, rng):
    np.savez(tmp_path / "a.npz", x=rng.integers(0, 256, (10, 28, 28), dtype=np.uint8), y=np.arange(10) % 2)
    ds = load_image_arrays(tmp_path / "a.npz")
    assert ds.pixels.shape == (10, 28, 28, 3) and ds.native_side() == 28


def test_encoding_batches_follow_the_pixel_budget_and_do_not_change_outputs(tmp_path, rng):
    """2^17 pixels per batch on the CPU, 2^20 on a GPU; the batch size never changes an output."""
    from lbhash.data.images import encode_batch_size
    from lbhash.models import create_image_model
    from lbhash.train.forward import ForwardPass, embed

    assert [encode_batch_size(InputOptions(s)) for s in (None, 32, 28, 224)] == [128, 128, 167, 8]
    assert [encode_batch_size(InputOptions(s), "cuda:0") for s in (32, 28)] == [1024, 1337]
    np.savez(tmp_path / "a.npz", x=rng.integers(0, 256, (300, 32, 32, 3), dtype=np.uint8), y=np.arange(300) % 3)
    ds = load_image_arrays(tmp_path / "a.npz")
    opts = InputOptions(32, "cifar", 0, True)
    assert [len(x) for x in ds.encode_batches(None, opts)] == [128, 128, 44]
    torch.manual_seed(0)
    model = create_image_model("smallcnn", 16).to(memory_format=torch.channels_last)
    by_default = embed(model, ds, options=opts)
    whole = embed(model, ds, options=opts, how=ForwardPass(batch_size=300))
    np.testing.assert_allclose(by_default, whole, rtol=1e-4, atol=1e-5)


# --- runs through the store ----------------------------------------------------------------------

IMAGE_RUN = dict(protocol="per-class:8,2", method="csq", bits=16, epochs=2, batch_size=8, eval_every=0, progress=False,
                 centers="hadamard", backbone="smallcnn")


def image_run(data, out, **kwargs):
    from lbhash.runs import RunDirectory
    from lbhash.train import TrainConfig

    return RunDirectory(out).train(TrainConfig(data=data, **IMAGE_RUN, **kwargs))


def test_a_run_without_augmentation_feeds_the_per_image_paths_inputs(real_images, tmp_path):
    """cache=off is the per-image path (DataLoader, per-image transforms) the store replaced: a
    run's experiment on either gives the same training batches, epoch by epoch, and the same
    inputs to encode (the loop is seeded per epoch, so equal inputs train to equal codes:
    end to end below, in make test-slow)."""
    from lbhash.train import TrainConfig
    from lbhash.train.builder import build_experiment, input_options
    from lbhash.train.loop import epoch_seed

    tree = write_tree(tmp_path / "t", real_images * 2)
    store, per_image = (build_experiment(TrainConfig(data=data, transform="cifar", **IMAGE_RUN))
                        for data in (f"images:{tree}", f"images:{tree}?cache=off"))
    np.testing.assert_array_equal(store.split.train, per_image.split.train)
    assert len(store.split.train) == 21  # per-class:8,2 on 3 classes, less 1 of each class's 8 held out
    options = input_options(store.cfg)
    assert options == input_options(per_image.cfg)
    batches = [exp.dataset.train_batches(exp.split.train, EpochShard(8), "cpu", options) for exp in (store, per_image)]
    for epoch in (1, 2):
        pairs = list(zip(*(b.epoch(epoch_seed(0, epoch)) for b in batches), strict=True))
        assert [len(x) for (x, _, _), _ in pairs] == [8, 8, 5]
        for (xa, la, ia), (xb, lb, ib) in pairs:
            torch.testing.assert_close(xa, xb, rtol=0, atol=0)
            assert torch.equal(torch.as_tensor(la), torch.as_tensor(lb)) and torch.equal(torch.as_tensor(ia),
                                                                                     torch.as_tensor(ib))
    for ids in (store.split.query, store.split.database):
        a, b = (torch.cat([batch for batch in exp.dataset.encode_batches(ids, options)]) for exp in (store, per_image))
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.slow  # two trainings; the fast test above compares what they are fed
def test_run_without_augmentation_gives_the_per_image_paths_codes(real_images, tmp_path):
    """cache=off is the per-image path (DataLoader, per-image transforms) the store replaced."""
    from lbhash.codes_file import load_codes_file

    tree = write_tree(tmp_path / "t", real_images * 2)
    image_run(f"images:{tree}", tmp_path / "store", transform="cifar")
    image_run(f"images:{tree}?cache=off", tmp_path / "per-image", transform="cifar")
    a, b = load_codes_file(tmp_path / "store" / "codes.npz"), load_codes_file(tmp_path / "per-image" / "codes.npz")
    for key in ("query_codes", "db_codes"):
        np.testing.assert_array_equal(a[key], b[key])


# end to end in make test-slow; fast: resumed epochs see the same augmented batches
# (test_epochs_are_seeded_and_resume_sees_the_same_batches), and a resumed run equals the
# uninterrupted one (test_train_resume.py)
@pytest.mark.slow
def test_resumed_augmented_image_run_equals_uninterrupted(real_images, tmp_path):
    from helpers import assert_resume_matches
    from lbhash.train import TrainConfig

    tree = write_tree(tmp_path / "t", real_images * 2)
    cfg = TrainConfig(data=f"images:{tree}", protocol="per-class:8,2", method="csq", lbhash=True, bits=16, epochs=3,
                      batch_size=8, eval_every=0, progress=False, centers="hadamard", backbone="smallcnn")
    assert_resume_matches(cfg, tmp_path)
