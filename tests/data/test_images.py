"""Image data sets: every source format, caching, bad input, DataLoader (list files: test_image_lists.py)."""

import io
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest
import torch
from conftest import shared_data_dir
from helpers import make_list_set, one_line_message, raises, write_image_lists
from PIL import Image
from torch.utils.data import DataLoader

from lbhash.data import (
    ImageDataset,
    build_transforms,
    check_images,
    load_cifar10,
    load_data,
    load_image_folder,
    load_image_lists,
    make_split,
)
from lbhash.data import pixel_cache

CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
TRAIN_PER_CLASS, TEST_PER_CLASS = 3, 1


# --- real images: the shared CIFAR-10 tarball, read once -------------------------------------

@pytest.fixture(scope="module")
def real_cifar():
    path = shared_data_dir() / "cifar10-jpg.tar.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found (set LBHASH_SHARED_DATA)")
    return load_data(f"cifar10:{path}")


@pytest.fixture(scope="module")
def sample(real_cifar):
    """10 classes x (3 train + 1 test) real JPEGs: [(split, class, member name, jpeg bytes, pixels)]."""
    out = []
    ids = real_cifar.labels.argmax(axis=1)
    for test, per in ((False, TRAIN_PER_CLASS), (True, TEST_PER_CLASS)):
        for c, name in enumerate(CIFAR_NAMES):
            for i in np.flatnonzero((ids == c) & (real_cifar.is_test == test))[:per]:
                data = real_cifar.source.read(i)
                member = real_cifar.where(i).rsplit(":", 1)[1]
                with Image.open(io.BytesIO(data)) as im:  # PIL directly: the expected pixels
                    out.append(("test" if test else "train", name, member, data, np.asarray(im.convert("RGB"))))
    return out


@pytest.fixture(scope="module")
def trees(sample, tmp_path_factory):
    """The sample written in every supported format."""
    base = tmp_path_factory.mktemp("trees")
    png, jpg = base / "png", base / "jpg"
    for split, cls, member, data, px in sample:
        stem = os.path.splitext(os.path.basename(member))[0]
        (png / split / cls).mkdir(parents=True, exist_ok=True)
        (jpg / split / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(px).save(png / split / cls / f"{stem}.png")  # lossless copy
        (jpg / split / cls / f"{stem}.jpg").write_bytes(data)        # the same JPEG bytes
    # pickles in CIFAR's format: bytes keys, (N, 3072) uint8 rows of R, G, B planes
    batches = base / "cifar-10-batches-py"
    batches.mkdir()
    train = [s for s in sample if s[0] == "train"]
    chunks = np.array_split(np.arange(len(train)), 5)
    for k, chunk in enumerate(chunks, 1):
        write_batch(batches / f"data_batch_{k}", [train[j] for j in chunk], protocol=2)
    write_batch(batches / "test_batch", [s for s in sample if s[0] == "test"], protocol=4)
    with open(batches / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [n.encode() for n in CIFAR_NAMES], b"num_vis": 3072}, fh, protocol=2)
    # tarballs, members in reverse order (the loader sorts), one inside a wrapping folder
    tar_gz, tar_plain = base / "png.tar.gz", base / "jpg.tar"
    with tarfile.open(tar_gz, "w:gz") as tf:
        for f in sorted(png.rglob("*.png"), reverse=True):
            tf.add(f, arcname="cifar/" + f.relative_to(png).as_posix())
    with tarfile.open(tar_plain, "w") as tf:
        for f in sorted(jpg.rglob("*.jpg"), reverse=True):
            tf.add(f, arcname=f.relative_to(jpg).as_posix())
    with tarfile.open(base / "cifar-10-python.tar.gz", "w:gz") as tf:
        tf.add(batches, arcname="cifar-10-batches-py")
    return base


def write_batch(path, items, protocol):
    data = np.stack([px.transpose(2, 0, 1).reshape(3072) for *_, px in items]).astype(np.uint8)
    labels = [CIFAR_NAMES.index(cls) for _, cls, *_ in items]
    with open(path, "wb") as fh:
        pickle.dump({b"batch_label": b"test", b"labels": labels, b"data": data,
                     b"filenames": [m.encode() for _, _, m, *_ in items]}, fh, protocol=protocol)


def expected(sample):
    """Pixels, class ids and test flags in the documented order: train, then test, by class."""
    return (np.stack([s[4] for s in sample]), np.array([CIFAR_NAMES.index(s[1]) for s in sample]),
            np.array([s[0] == "test" for s in sample]))


def pixels(ds):
    return np.stack([ds.image(i) for i in range(len(ds))])


def test_every_format_loads_the_same_images(sample, trees):
    px, ids, is_test = expected(sample)
    specs = [f"cifar10:{trees / 'cifar-10-batches-py'}", f"cifar10:{trees}",
             f"cifar10:{trees / 'cifar-10-python.tar.gz'}",
             f"cifar10:{trees / 'png'}", f"images:{trees / 'png'}", f"images:{trees / 'jpg'}",
             f"images:{trees / 'png.tar.gz'}", f"images:{trees / 'jpg.tar'}?cache=off"]
    for spec in specs:
        ds = load_data(spec)
        assert isinstance(ds, ImageDataset) and len(ds) == 40, spec
        np.testing.assert_array_equal(ds.labels.argmax(axis=1), ids, err_msg=spec)
        np.testing.assert_array_equal(ds.is_test, is_test, err_msg=spec)
        assert ds.class_names == CIFAR_NAMES and ds.num_classes == 10 and not ds.multi_label
        assert ds.parts is None and ds.topk is None
        np.testing.assert_array_equal(pixels(ds), px, err_msg=spec)  # lossless: pixel-identical
    assert load_data(specs[0]).name == "cifar10" and load_data(specs[4]).name == "images:png"


def test_cifar_pickles_are_cached_and_tar_members_named(trees):
    ds = load_cifar10(trees / "cifar-10-batches-py")
    assert ds.pixels.shape == (40, 32, 32, 3) and ds.source is None and not ds.pixels.flags.writeable
    tar = load_image_folder(trees / "jpg.tar")
    assert tar.where(0).endswith("jpg.tar:train/airplane/" + os.path.basename(tar.where(0)))
    ok, bad = check_images(tar)
    np.testing.assert_array_equal(ok, np.arange(40))
    assert bad == 0 and tar.pixels.shape == (40, 32, 32, 3)  # checking filled the cache


def test_pickles_written_by_numpy_1(tmp_path, trees, sample):
    # the official files name numpy 1's module; numpy 2 writes numpy._core
    d = tmp_path / "cifar-10-batches-py"
    shutil.copytree(trees / "cifar-10-batches-py", d)
    raw = (d / "data_batch_1").read_bytes()
    assert b"numpy._core.multiarray\n_reconstruct" in raw  # protocol 2 names globals in text
    (d / "data_batch_1").write_bytes(raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    np.testing.assert_array_equal(load_cifar10(d).pixels, expected(sample)[0])


def test_pickles_refuse_foreign_globals(tmp_path, trees):
    marker = tmp_path / "marker"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bad = tmp_path / "cifar-10-batches-py"
    shutil.copytree(trees / "cifar-10-batches-py", bad)
    with open(bad / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": Evil()}, fh, protocol=2)
    with raises("data_batch_3", "not a CIFAR-10 python batch", "is not allowed") as exc:
        load_cifar10(bad)
    one_line_message(exc)
    assert not marker.exists()
    shutil.copy(trees / "cifar-10-batches-py" / "data_batch_3", bad)
    (bad / "test_batch").unlink()
    with raises("test_batch", "cannot read"):
        load_cifar10(tmp_path)  # the parent of cifar-10-batches-py works too (and fails here)


def test_cifar10_kind_needs_ten_classes(trees, tmp_path):
    shutil.copytree(trees / "png", tmp_path / "png")
    shutil.rmtree(tmp_path / "png" / "train" / "truck")
    shutil.rmtree(tmp_path / "png" / "test" / "truck")
    with raises("png", "10 classes, found 9"):
        load_data(f"cifar10:{tmp_path / 'png'}")
    assert load_data(f"images:{tmp_path / 'png'}").num_classes == 9


# --- the real tarball ---------------------------------------------------------------------------

def test_real_cifar10_tarball(real_cifar):
    ds = real_cifar
    assert len(ds) == 60000 and ds.num_classes == 10 and ds.class_names == CIFAR_NAMES
    assert ds.is_test.sum() == 10000 and not ds.is_test[:50000].any() and ds.pixels is None  # not decoded
    np.testing.assert_array_equal(ds.labels.sum(axis=0), [6000] * 10)
    ids = ds.labels.argmax(axis=1)
    s = make_split(ds, "cifar10", seed=0)
    np.testing.assert_array_equal(np.bincount(ids[s.train]), [500] * 10)
    np.testing.assert_array_equal(np.bincount(ids[s.query]), [100] * 10)
    np.testing.assert_array_equal(np.bincount(ids[s.database]), [5400] * 10)
    assert s.topk == 54000
    s2 = make_split(ds, "cifar10-2", seed=0)
    assert (len(s2.train), len(s2.query), len(s2.database)) == (50000, 10000, 50000)
    for i in np.linspace(0, 59999, 300).astype(int):  # a subset: the full decode is measured in the docs
        img = ds.image(i)
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8


def test_real_tarball_order_matches_the_feature_file(real_cifar):
    path = shared_data_dir() / "cifar10-mobilenetv1-features.npz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with np.load(path, allow_pickle=False) as raw:
        labels, is_test = raw["labels"], raw["is_test"]
    np.testing.assert_array_equal(real_cifar.labels.argmax(axis=1), labels)  # class order, then file order
    np.testing.assert_array_equal(real_cifar.is_test, is_test)


# --- list files -----------------------------------------------------------------------------------

def test_list_files_load_the_same_images(sample, trees, tmp_path):
    rel = [f"png/{s[0]}/{s[1]}/{os.path.splitext(os.path.basename(s[2]))[0]}.png" for s in sample]
    rows = [(r, {CIFAR_NAMES.index(s[1])}) for r, s in zip(rel, sample)]
    train = [r for r, s in zip(rows, sample) if s[0] == "train"]
    test = [r for r, s in zip(rows, sample) if s[0] == "test"]
    lists = write_image_lists(tmp_path / "lists", {"train.txt": train[:10], "test.txt": test,
                                             "database.txt": [("./" + p, c) for p, c in train]})
    for spec in (f"list:{lists}?root={trees}", f"list:{lists}?root={trees / 'lists.tar'}"):
        if spec.endswith(".tar"):
            with tarfile.open(trees / "lists.tar", "w") as tf:
                tf.add(trees / "png", arcname="png")
        ds = load_data(spec)
        assert len(ds) == 40 and ds.name == "list:lists" and ds.class_names is None
        assert ds.topk is None and ds.declared_multi_label is None and not ds.multi_label
        # an item in train.txt and database.txt is one item; order: train, test, database
        np.testing.assert_array_equal(ds.parts["train"], np.arange(10))
        np.testing.assert_array_equal(ds.parts["query"], np.arange(10, 20))
        np.testing.assert_array_equal(ds.parts["database"], np.r_[0:10, 20:40])
        order = [rel.index(p) for p in [r[0] for r in train[:10] + test + train[10:]]]
        px, ids, _ = expected(sample)
        np.testing.assert_array_equal(pixels(ds), px[order])
        np.testing.assert_array_equal(ds.labels.argmax(axis=1), ids[order])
        np.testing.assert_array_equal(np.flatnonzero(ds.is_test), np.arange(10, 20))


# --- bad images ---------------------------------------------------------------------------------

def folder(tmp_path, sizes=((8, 8),) * 6, name="imgs"):
    root = tmp_path / name
    for k, size in enumerate(sizes):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (10 * k, 20, 30)).save(root / f"c{k % 2}" / f"{k}.png")
    return root


@pytest.mark.parametrize("sizes", [((8, 8),) * 6, ((8, 8), (9, 7), (8, 8), (5, 8), (8, 8), (8, 8))])
def test_missing_and_corrupt_images(tmp_path, sizes):
    root = folder(tmp_path, sizes)
    ds = load_image_folder(root)  # items: c0/0, c0/2, c0/4, c1/1, c1/3, c1/5
    assert ds.is_test is None and [ds.where(i)[-8:] for i in (0, 3)] == ["c0/0.png", "c1/1.png"]
    (root / "c0" / "2.png").write_bytes(b"not an image at all")
    data = (root / "c1" / "3.png").read_bytes()
    (root / "c1" / "3.png").write_bytes(data[:len(data) // 2])  # truncated
    with raises(str(root / "c0" / "2.png"), "cannot decode image", "skip_bad=True") as exc:
        check_images(ds)
    one_line_message(exc)
    ok, bad = check_images(ds, skip_bad=True)
    np.testing.assert_array_equal(ok, [0, 2, 3, 5])
    assert bad == 2
    ok, bad = check_images(ds, [5, 0, 3])  # only these need to be readable; order kept
    np.testing.assert_array_equal(ok, [5, 0, 3])
    assert bad == 0
    with raises(str(root / "c1" / "3.png"), "cannot decode image"):
        ds.image(4)
    assert (ds.pixels is not None) == (len(set(sizes)) == 1)  # same sizes: checking filled the cache


def test_truncated_jpeg_lazy_check(tmp_path):
    root = tmp_path / "big"
    (root / "a").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for k in range(3):
        Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(root / "a" / f"{k}.jpg", quality=90)
    data = (root / "a" / "1.jpg").read_bytes()
    (root / "a" / "1.jpg").write_bytes(data[:len(data) * 2 // 3])
    ds = load_data(f"images:{root}?cache=off")  # validated by reduced-scale decoding in threads
    with raises("1.jpg", "cannot decode image"):
        check_images(ds)
    assert check_images(ds, skip_bad=True, workers=2)[1] == 1 and ds.pixels is None


def test_modes_are_converted_to_rgb(tmp_path):
    root = tmp_path / "modes" / "x"
    root.mkdir(parents=True)
    Image.new("L", (4, 3), 77).save(root / "a_gray.png")
    Image.new("RGBA", (4, 3), (10, 20, 30, 0)).save(root / "b_rgba.png")
    pal = Image.new("P", (4, 3), 1)
    pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    pal.save(root / "c_pal.gif")
    Image.new("LA", (4, 3), (5, 9)).save(root / "d_la.png")
    Image.new("CMYK", (4, 3), (0, 0, 0, 0)).save(root / "e_cmyk.jpg")
    ds = load_image_folder(tmp_path / "modes")
    want = [(77, 77, 77), (10, 20, 30), (200, 100, 50), (5, 5, 5), None]  # alpha is dropped
    for i, rgb in enumerate(want):
        img = ds.image(i)
        assert img.shape == (3, 4, 3) and img.dtype == np.uint8
        if rgb is not None:
            np.testing.assert_array_equal(img.reshape(-1, 3), [rgb] * 12)
    assert ds.preload() and ds.pixels.shape == (5, 3, 4, 3)


def test_truncated_tarballs(trees, tmp_path):
    for name in ("png.tar.gz", "jpg.tar"):
        data = (trees / name).read_bytes()
        cut = tmp_path / name
        cut.write_bytes(data[:len(data) // 2])
        with raises(str(cut), "truncated or corrupt tarball") as exc:
            load_data(f"images:{cut}")
        one_line_message(exc)
    with raises("no such file or directory"):
        load_data(f"images:{tmp_path / 'none.tar.gz'}")


@pytest.mark.parametrize("name,data", [("x.tar.gz", b"\x1f\x8b" + bytes(range(256)) * 4), ("x.tar", b"junk" * 300),
                                       ("x.tgz", b"")])
def test_corrupt_tarballs(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)
    with raises(str(tmp_path / name), "truncated or corrupt tarball") as exc:
        load_data(f"images:{tmp_path / name}")
    one_line_message(exc)


def test_class_tree_rules(tmp_path):
    root = folder(tmp_path, name="t")
    (root / "notes.txt").write_text("ignored")
    (root / "c0" / "._0.png").write_bytes(b"macOS metadata, ignored")
    assert len(load_image_folder(root)) == 6
    for split in ("train", "val"):
        shutil.copytree(root / "c0", tmp_path / "s" / split / "c0")
    ds = load_image_folder(tmp_path / "s")
    np.testing.assert_array_equal(ds.is_test, [False] * 3 + [True] * 3)
    shutil.copytree(root / "c0", tmp_path / "s" / "test" / "c0")
    with raises("both test/ and val/"):
        load_image_folder(tmp_path / "s")
    Image.new("RGB", (2, 2)).save(tmp_path / "t" / "loose.png")
    with raises("'loose.png' is not inside a class folder"):
        load_image_folder(root)


def test_empty_class_in_per_class_protocol(tmp_path):
    root = folder(tmp_path, ((4, 4),) * 7, name="few")
    (root / "c1" / "1.png").unlink()
    (root / "c1" / "3.png").unlink()  # c1 keeps one image
    with raises("class 1 ('c1')", "has 1 items", "needs at least 4"):
        make_split(load_image_folder(root), "per-class:2,1", 0)
    d = make_list_set(tmp_path, labels=[{0}, {1}] * 3)  # label column 2 is never used
    with raises("class 2 of list:lists", "has 0 items"):
        make_split(load_image_lists(d), "per-class:1,1", 0)


# --- caching ------------------------------------------------------------------------------------

def test_caching_rule(tmp_path, monkeypatch):
    same = load_image_folder(folder(tmp_path, name="same"))
    assert same.preload() and same.pixels.shape == (6, 8, 8, 3)
    assert not load_data(f"images:{tmp_path / 'same'}?cache=off").preload()
    mixed = folder(tmp_path, ((8, 8), (8, 8), (6, 8)), name="mixed")
    ds = load_image_folder(mixed)
    assert not ds.preload() and ds.pixels is None and ds.image(1).shape == (8, 6, 3)
    with raises("2.png", "is 6x8", "cache=on", "8x8"):
        load_data(f"images:{mixed}?cache=on").preload()
    with raises("option cache must be one of", "'maybe'"):
        load_data(f"images:{mixed}?cache=maybe")
    monkeypatch.setattr(pixel_cache, "memory_budget", lambda: 6 * 8 * 8 * 3 - 1)
    big = load_image_folder(tmp_path / "same")  # above the memory bound: memory-mapped from disk
    assert big.preload() and isinstance(big.pixels, np.memmap)
    np.testing.assert_array_equal(big.pixels, same.pixels)
    monkeypatch.setattr(pixel_cache, "memory_budget", lambda: 1 << 30)
    on_disk = load_data(f"images:{tmp_path / 'same'}?cache=disk")  # the entry just built, read into memory
    assert on_disk.preload() and not isinstance(on_disk.pixels, np.memmap)
    np.testing.assert_array_equal(on_disk.pixels, same.pixels)


# --- torch datasets and DataLoader workers -----------------------------------------------------

def test_torch_dataset_items(trees):
    ds = load_image_folder(trees / "png")
    tds = ds.torch_dataset(np.array([39, 5, 0]), build_transforms("cifar", 40, train=False))
    img, y, k = tds[1]
    assert img.shape == (3, 40, 40) and img.dtype == torch.float32 and k == 1
    assert y.dtype == torch.float32 and y.tolist() == ds.labels[5].astype(float).tolist()
    raw, _, _ = ds.torch_dataset([5])[0]
    assert raw.dtype == torch.uint8 and torch.equal(raw, torch.from_numpy(ds.image(5)).permute(2, 0, 1))
    assert ds.pixels is not None  # small and same-sized: decoded once


@pytest.mark.parametrize("name,cache", [("t.tar", "off"), ("t.tar.gz", "off"), ("t.tar.gz", "auto")])
def test_dataloader_workers(tmp_path, name, cache):
    rng = np.random.default_rng(0)  # self-contained: runs without the shared data too
    for k in range(14):
        (tmp_path / "t" / f"c{k % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(
            tmp_path / "t" / f"c{k % 3}" / f"{k}.{'jpg' if k % 2 else 'png'}")
    with tarfile.open(tmp_path / name, "w:gz" if name.endswith("gz") else "w") as tf:
        tf.add(tmp_path / "t", arcname="t")
    ds = load_data(f"images:{tmp_path / name}?cache={cache}")
    assert len(ds) == 14 and ds.pixels is None  # nothing decoded at load time
    tds = ds.torch_dataset(np.arange(0, 14, 2), build_transforms("cifar-augment", 32, train=False))
    assert (ds.pixels is None) == (cache == "off")  # torch_dataset preloads when allowed
    expect = torch.stack([tds[k][0] for k in range(len(tds))])
    batches = list(DataLoader(tds, batch_size=4, num_workers=2))
    np.testing.assert_array_equal(torch.cat([b[2] for b in batches]), np.arange(len(tds)))
    assert torch.equal(torch.cat([b[0] for b in batches]), expect)
    again = pickle.loads(pickle.dumps(tds))  # what a spawn-started worker receives
    assert torch.equal(again[3][0], expect[3])


def test_what_the_data_line_knows_of_image_sizes(tmp_path):
    """One size is said once the images are decoded, varying sizes only once decoding met
    another size, and before decoding the first image's size alone (issue 60, item 7: 32x32
    images of one size were reported as "images of varying size")."""
    from lbhash.data import load_data
    from lbhash.train.summary import describe_data

    def folder(name, sides):
        for k, side in enumerate(sides):
            (tmp_path / name / "a").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (side, side), (k * 20, 0, 0)).save(tmp_path / name / "a" / f"{k}.png")
        return load_data(f"images:{tmp_path / name}", labels_required=False)

    def line(sizes):
        summary = {"kind": "images", "items": 3, "classes": 1, "multi_label": False, "image_size": 64,
                   "stored_size": sizes.get("stored_size"), **sizes,
                   "split": {"protocol": "all-train", "train": 3, "validation": 0, "query": 0, "database": 3}}
        return describe_data({"data": "d", **summary})

    same = folder("same", [32, 32, 32])
    assert same.sizes() == {"first_size": [32, 32]} and "images, the first 32x32 -> 64x64" in line(same.sizes())
    assert same.preload() and same.sizes() == {"stored_size": [32, 32]}
    assert "32x32 images -> 64x64" in line(same.sizes())
    mixed = folder("mixed", [32, 40, 32])
    assert not mixed.preload() and mixed.sizes() == {"varying": True}
    assert "images of varying size -> 64x64" in line(mixed.sizes())


@pytest.mark.parametrize("preset, size", [("cifar", 32), ("imagenet", 64)])
def test_a_1x1_image_becomes_a_flat_colour_at_the_models_size_without_a_warning(preset, size):
    """The contract of docs/data.md (settled, issue 69): a 1x1 image is neither refused nor warned of;
    the run's transform resizes it like any other, to a flat colour: every input pixel is the one
    pixel's normalised value."""
    import warnings

    from lbhash.data.eval_images import eval_inputs
    from lbhash.data.image_sources import decode_image

    buf = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 30, 90)).save(buf, format="PNG")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pixels = decode_image(buf.getvalue(), "dot.png")
        x = eval_inputs(pixels[None], preset, size, mean, std)
    assert pixels.shape == (1, 1, 3) and x.shape == (1, 3, size, size)
    want = (np.array([200, 30, 90], np.float32) / np.float32(255) - np.float32(mean)) / np.float32(std)
    np.testing.assert_array_equal(x[0], np.broadcast_to(want[:, None, None], (3, size, size)))
