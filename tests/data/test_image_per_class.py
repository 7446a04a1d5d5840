"""The `per-class=` option of image data specs: the first N images of each class (or a fraction
of each), per part, from a folder, a plain tarball, a compressed tarball (which then holds only
the chosen members) and CIFAR-10 pickles; bad values in one line."""

import pickle
import tarfile
import warnings

import numpy as np
import pytest
from helpers import cli, one_line_error, one_line_message
from PIL import Image

from lbhash.data import load_data
from lbhash.data.per_class import FewerImagesWarning
from lbhash.errors import InputError

# images per (part, class) of the test tree
COUNTS = {("train", "a"): 5, ("train", "b"): 3, ("train", "c"): 1,
          ("test", "a"): 2, ("test", "b"): 2, ("test", "c"): 1}


def color(part, cls, k):
    return (100 * (part == "test") + k, ord(cls), 7)


def write_tree(root, counts=COUNTS):
    """PNGs named 00.png, 01.png, ... whose one colour says (part, class, k)."""
    for (part, cls), n in counts.items():
        (root / part / cls).mkdir(parents=True)
        for k in range(n):
            Image.new("RGB", (4, 4), color(part, cls, k)).save(root / part / cls / f"{k:02d}.png")
    return root


def write_tarballs(root, base):
    """The tree as a plain .tar and a .tar.gz, members in reverse name order (the loader sorts)."""
    files = sorted((f for f in root.rglob("*.png")), reverse=True)
    out = []
    for name, mode in (("t.tar", "w"), ("t.tar.gz", "w:gz")):
        with tarfile.open(base / name, mode) as tf:
            for f in files:
                tf.add(f, arcname="wrap/" + f.relative_to(root).as_posix())
        out.append(base / name)
    return out


def chosen(quota):
    """(part, class, k) kept when each (part, class) keeps quota(its count), in data-set order."""
    return [(part, cls, k) for part in ("train", "test") for cls in "abc"
            for k in range(quota(COUNTS[part, cls]))]


def colors(ds):
    return [tuple(int(v) for v in ds.image(i)[0, 0]) for i in range(len(ds))]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("per_class")
    root = write_tree(base / "tree")
    return [root, *write_tarballs(root, base)]


@pytest.mark.parametrize("value, quota", [
    ("2", lambda n: min(n, 2)),
    ("0.5", lambda n: -(-n // 2)),      # half of each, rounded up: 5 -> 3, 3 -> 2, 1 -> 1
    ("1", lambda n: 1),
    ("100", lambda n: n),               # more than any class has: everything
])
def test_the_first_images_of_each_class_in_each_part(sources, value, quota):
    expect = chosen(quota)
    for source in sources:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = load_data(f"images:{source}?per-class={value}")
        short = value.isdigit() and any(n < int(value) for n in COUNTS.values())
        assert [w.category for w in caught] == [FewerImagesWarning] * short
        assert colors(ds) == [color(*item) for item in expect], source
        np.testing.assert_array_equal(ds.labels.argmax(1), ["abc".index(c) for _, c, _ in expect])
        np.testing.assert_array_equal(ds.is_test, [p == "test" for p, _, _ in expect])
        assert ds.class_names == ["a", "b", "c"]
        assert [ds.where(i).rsplit("/", 1)[1] for i in range(len(ds))] == [f"{k:02d}.png" for *_, k in expect]


def test_exact_counts(sources):
    for value, n_train, n_test in (("2", 2 + 2 + 1, 2 + 2 + 1), ("0.5", 3 + 2 + 1, 1 + 1 + 1),
                                   ("0.25", 2 + 1 + 1, 1 + 1 + 1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewerImagesWarning)  # class c has one image
            ds = load_data(f"images:{sources[2]}?per-class={value}")
        assert (int((~ds.is_test).sum()), int(ds.is_test.sum())) == (n_train, n_test), value


def test_a_compressed_tarball_holds_only_the_chosen_members(sources):
    root, _, tar_gz = sources
    ds = load_data(f"images:{tar_gz}?per-class=1")
    files = [root / part / cls / "00.png" for part in ("train", "test") for cls in "abc"]
    assert ds.source.blob.nbytes == sum(f.stat().st_size for f in files)
    assert load_data(f"images:{tar_gz}").source.blob.nbytes == sum(f.stat().st_size for f in root.rglob("*.png"))


def test_a_tree_without_parts_is_chosen_by_class(tmp_path):
    root = tmp_path / "flat"
    for cls, n in (("x", 4), ("y", 2)):
        (root / cls).mkdir(parents=True)
        for k in range(n):
            Image.new("RGB", (4, 4), (k, ord(cls), 0)).save(root / cls / f"{k}.png")
    with pytest.warns(FewerImagesWarning, match=r"1 class\(es\) have fewer images and are taken whole: y \(2\)$"):
        ds = load_data(f"images:{root}?per-class=3")
    assert ds.is_test is None and colors(ds) == [(0, 120, 0), (1, 120, 0), (2, 120, 0), (0, 121, 0), (1, 121, 0)]


def test_a_class_with_fewer_images_is_taken_whole_with_a_warning(sources):
    with pytest.warns(FewerImagesWarning) as record:
        ds = load_data(f"images:{sources[0]}?per-class=3")
    assert len(ds) == 3 + 3 + 1 + 2 + 2 + 1
    assert [str(w.message) for w in record] == [
        f"{sources[0]}: per-class=3: 4 class(es) have fewer images and are taken whole: "
        "c train (1), a test (2), b test (2), c test (1)"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_data(f"images:{sources[0]}?per-class=0.5")  # a fraction never asks for more than there is


def write_pickles(folder, rows_per_batch=12):
    """CIFAR-10 python batches: row r of the whole set has colour (r % 256, r // 256, 0) and class
    r % 10 in the train batches, (r * 3) % 10 in the test batch."""
    folder.mkdir()
    names = [f"class{c}" for c in range(10)]
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [n.encode() for n in names]}, fh, protocol=2)
    row = 0
    for batch in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        rows = np.arange(row, row + rows_per_batch)
        pixels = np.zeros((len(rows), 32, 32, 3), np.uint8)
        pixels[..., 0], pixels[..., 1] = (rows % 256)[:, None, None], (rows // 256)[:, None, None]
        labels = (rows * 3 % 10) if batch == "test_batch" else rows % 10
        with open(folder / batch, "wb") as fh:
            pickle.dump({b"data": pixels.transpose(0, 3, 1, 2).reshape(len(rows), 3072),
                         b"labels": labels.tolist()}, fh, protocol=2)
        row += rows_per_batch
    return folder


def test_cifar10_pickles_folder_and_tarball(tmp_path):
    batches = write_pickles(tmp_path / "cifar-10-batches-py")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tf:
        tf.add(batches, arcname="cifar-10-batches-py")
    # train rows 0..59 are class r % 10: the first of class c is row c. Test rows 60..71 are
    # classes 0 3 6 9 2 5 8 1 4 7 0 3: rows 70 and 71 repeat classes 0 and 3 and are left out.
    for path in (batches, tmp_path / "cifar-10-python.tar.gz"):
        ds = load_data(f"cifar10:{path}?per-class=1")
        assert [r + 256 * g for r, g, _ in colors(ds)] == [*range(10), *range(60, 70)], path
        np.testing.assert_array_equal(ds.is_test, [False] * 10 + [True] * 10)
        np.testing.assert_array_equal(ds.labels.argmax(1), [*range(10), 0, 3, 6, 9, 2, 5, 8, 1, 4, 7])


def test_cifar10_kind_on_a_tree_tarball(tmp_path):
    root = write_tree(tmp_path / "tree", {(p, str(c)): 3 for p in ("train", "test") for c in range(10)})
    with tarfile.open(tmp_path / "c.tar.gz", "w:gz") as tf:
        tf.add(root, arcname="cifar10")
    ds = load_data(f"cifar10:{tmp_path / 'c.tar.gz'}?per-class=2")
    assert len(ds) == 40 and int(ds.is_test.sum()) == 20 and ds.name == "cifar10"
    assert ds.source.blob.nbytes == sum(f.stat().st_size for f in root.rglob("0[01].png"))


@pytest.mark.parametrize("value", ["0", "-2", "1.0", "1.5", "0.0", "abc", "1/2", "2e-1", "½"])
def test_bad_values_are_one_line(sources, value):
    spec = f"images:{sources[0]}?per-class={value}"
    with pytest.raises(InputError) as excinfo:
        load_data(spec)
    one_line_message(excinfo, f"data spec {spec!r}", "option per-class must be a whole number of images",
                     f"got {value!r}")


def test_other_kinds_do_not_take_it_and_the_cli_exits_2(sources, tmp_path):
    with pytest.raises(InputError) as excinfo:
        load_data(f"list:{tmp_path}?per-class=2")
    one_line_message(excinfo, "unknown option 'per-class' for 'list'")
    one_line_error(cli("train", "--data", f"images:{sources[0]}?per-class=0", "--out", tmp_path / "run"),
                   "option per-class must be a whole number")
    assert not (tmp_path / "run").exists()
