"""The image-array data kind: uint8 images in an .npz read as an in-memory image data set, checked
against a folder of PNG files written from the same (real) pixels."""

import numpy as np
import pytest
from PIL import Image

from helpers import Killed, cli, stop_before_the_first_epoch
from lbhash.data import load_data
from lbhash.errors import InputError


def digit_images():
    """scikit-learn's bundled digits as real 8x8 uint8 images (0..16 scaled to 0..240)."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    return (raw.images * 15).astype(np.uint8), raw.target.astype(np.int64)


def write_tree(root, images, labels, is_test):
    """train|test/<class>/<index>.png, one PNG per image (mode L or RGB)."""
    for i, (img, label, test) in enumerate(zip(images, labels, is_test)):
        folder = root / ("test" if test else "train") / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(folder / f"{i:05d}.png")


def tree_order(labels, is_test):
    """The item order of a class-folder tree: train then test, by class, then by file name."""
    return np.lexsort((np.arange(len(labels)), labels, is_test))


@pytest.mark.parametrize("color", [False, True])
def test_image_array_file_gives_the_pixels_of_the_png_folder(tmp_path, color):
    images, labels = digit_images()
    images, labels = images[:120], labels[:120]
    if color:  # a real RGB image: three different channels
        images = np.stack([images, 255 - images, images // 2], axis=-1)
    is_test = np.arange(len(images)) % 4 == 0
    order = tree_order(labels, is_test)
    np.savez(tmp_path / "digits.npz", images=images[order], labels=labels[order], is_test=is_test[order])
    write_tree(tmp_path / "tree", images, labels, is_test)

    arrays = load_data(f"image-array:{tmp_path / 'digits.npz'}")
    folder = load_data(f"images:{tmp_path / 'tree'}")
    assert len(arrays) == len(folder) == 120 and arrays.input_kind == folder.input_kind == "images"
    np.testing.assert_array_equal(arrays.is_test, folder.is_test)
    np.testing.assert_array_equal(arrays.labels, folder.labels)
    for i in range(len(arrays)):
        np.testing.assert_array_equal(arrays.image(i), folder.image(i))
    expected = images[order][0] if color else np.repeat(images[order][0][..., None], 3, axis=2)
    np.testing.assert_array_equal(arrays.image(0), expected)


def test_keras_style_train_test_arrays_and_channels_first(tmp_path):
    images, labels = digit_images()
    np.savez(tmp_path / "mnist_like.npz", x_train=images[:100], y_train=labels[:100],
             x_test=images[100:130], y_test=labels[100:130])
    ds = load_data(f"image-array:{tmp_path / 'mnist_like.npz'}")
    assert len(ds) == 130 and ds.is_test.sum() == 30 and ds.num_classes == 10
    np.testing.assert_array_equal(ds.image(100)[..., 1], images[100])
    rgb = np.stack([images[:20]] * 3, axis=1)  # (N, 3, H, W)
    np.savez(tmp_path / "chw.npz", x=rgb, y=labels[:20])
    np.testing.assert_array_equal(load_data(f"image-array:{tmp_path / 'chw.npz'}").image(3)[..., 0], images[3])


@pytest.mark.parametrize("array, fragment", [
    (np.zeros((4, 8, 8), np.float32), "must be uint8"),
    (np.zeros((4, 8), np.uint8), "must have shape (N, H, W)"),
    (np.zeros((4, 8, 8, 5), np.uint8), "must have shape (N, H, W)"),
])
def test_bad_image_arrays_name_the_file(tmp_path, array, fragment):
    np.savez(tmp_path / "bad.npz", images=array, labels=np.zeros(4, np.int64))
    with pytest.raises(InputError) as info:
        load_data(f"image-array:{tmp_path / 'bad.npz'}")
    assert "bad.npz" in str(info.value) and fragment in str(info.value)


def test_feature_kind_points_image_files_to_the_image_array_kind(tmp_path):
    images, labels = digit_images()
    np.savez(tmp_path / "imgs.npz", x=images[:10], labels=labels[:10])
    with pytest.raises(InputError, match="image-array:PATH"):
        load_data(f"features:{tmp_path / 'imgs.npz'}")


def test_an_image_array_file_trains_on_part_of_its_train_split(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imgs.npz", x_train=rng.integers(0, 255, (60, 8, 8), dtype=np.uint8),
             y_train=np.arange(60) % 3, x_test=rng.integers(0, 255, (12, 8, 8), dtype=np.uint8),
             y_test=np.arange(12) % 3)
    stopped = stop_before_the_first_epoch(monkeypatch)  # the run's split and batches, as it is about to train
    result = cli("train", "--data", f"image-array:{tmp_path / 'imgs.npz'}", "--protocol", "given:15", "--bits", 8,
                 "--image-size", 8, "--batch-size", 16, "--epochs", 1, "--out", tmp_path / "run", "--no-progress")
    assert isinstance(result.exception, Killed), result.output
    assert result.output.splitlines()[1] == ("data image-array:" + str(tmp_path / "imgs.npz") + ": images, 72 items, "
                                             "3 classes, 8x8 images -> 8x8 model input; split given:15: 12 train, "
                                             "3 validation, 12 query, 60 database (validation included)")
    # one of each class's 5 training items held out, and still in the database: the whole train part
    split = np.load(tmp_path / "run" / "split.npz")
    held = split["validation"]
    assert len(held) == 3 and set(held) < set(range(60)) and len(set(held % 3)) == 3  # one of each class
    assert sorted(split["query"]) == list(range(60, 72))
    assert sorted(split["database"]) == list(range(60))
    x, labels, _ = next(iter(stopped[0].batches.epoch(0)))  # the 12 training images, 8x8 RGB
    assert x.shape == (12, 3, 8, 8) and labels.shape == (12, 3)
