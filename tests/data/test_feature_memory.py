"""Array files too large for memory once loaded (issue 27, item 6): the copies loading makes (the
float32 copy of features, the RGB copy of grayscale images, x_train + x_test concatenated) are
checked with the file's arrays, from their headers, before anything is read: one line naming
the file, shape, dtype, bytes needed and bytes available, exit 2. Files that fit load as before."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
from numpy.lib import format as npy

from helpers import FAST_TRAIN, cli, one_line_error, snapshot
from lbhash import _io
from lbhash.data import load_data, load_features
from lbhash.data.image_arrays import load_image_arrays
from lbhash.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def header_only_npy(path, shape, dtype):
    """An .npy header announcing `shape` with no data behind it: a huge array in a few bytes."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                     "shape": shape})
    path.write_bytes(out.getvalue())
    return path


def free(monkeypatch, n):
    monkeypatch.setattr(_io, "available_memory", lambda: n)


def refused(call, *fragments):
    with pytest.raises(InputError) as exc:
        call()
    message = str(exc.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_the_float32_copy_of_a_large_file_is_counted(tmp_path, monkeypatch):
    """The issue's file: 30 x 20,000,000 uint8 (0.6 GB) fits, its float32 copy (2.4 GB) does not."""
    big = header_only_npy(tmp_path / "big.npy", (30, 20_000_000), np.uint8)
    np.save(tmp_path / "y.npy", np.arange(30) % 2)
    free(monkeypatch, 2 * 10**9)
    refused(lambda: load_features(big, labels_path=tmp_path / "y.npy"), str(big), "shape (30, 20000000)", "uint8",
            "loading needs 3.0 GB", "float32 copy", "(2.4 GB)", "2.0 GB of memory available")
    result = cli("train", "--data", f"features:{big}?labels={tmp_path / 'y.npy'}", "--epochs", "1", "--bits", "16",
                 "--out", tmp_path / "run", "--no-progress")
    one_line_error(result, "big.npy", "(30, 20000000)", "uint8", "3.0 GB", "2.0 GB of memory available")
    assert not (tmp_path / "run").exists()


def test_a_file_larger_than_free_memory_is_refused_from_its_header(input_files, monkeypatch):
    """The issue's (30, 20,000,000) float64 file (4.8 GB) on a machine with 2 GB free."""
    monkeypatch.setattr(_io, "available_memory", lambda: 2 * 10**9)
    before = snapshot(input_files)
    one_line_error(cli("train", *FAST_TRAIN, "--data", f"features:{input_files / 'wide.npz'}",
                       "--out", input_files / "run"),
                   "wide.npz", "'x' has shape (30, 20000000)", "float64, 4.8 GB", "2.0 GB of memory available")
    assert snapshot(input_files) == before


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float64, np.float32])
def test_a_file_that_fits_loads_bit_for_bit(tmp_path, monkeypatch, dtype):
    rng = np.random.default_rng(0)
    x = (rng.random((30, 1000)) * 200).astype(dtype)
    np.savez(tmp_path / "f.npz", x=x, y=np.arange(30) % 3)
    raw = x.nbytes + 30 * 8
    copy = 0 if dtype == np.float32 else x.size * 4
    free(monkeypatch, raw + copy + 1000)  # just enough
    got = load_features(tmp_path / "f.npz")
    np.testing.assert_array_equal(got.x, x.astype(np.float32))
    assert got.x.dtype == np.float32 and got.raw_dtype == np.dtype(dtype).name
    if copy:
        free(monkeypatch, raw + copy - 1000)  # just short
        refused(lambda: load_features(tmp_path / "f.npz"), "f.npz", "array 'x' has shape (30, 1000)",
                np.dtype(dtype).name, "float32 copy")


def test_dequantised_float32_features_count_their_copy(tmp_path, monkeypatch):
    x = np.ones((30, 1000), np.float32)
    np.savez(tmp_path / "q.npz", x=x, y=np.arange(30) % 3, scale=np.float32(0.5), zero_point=np.float32(0))
    free(monkeypatch, x.nbytes + 2000)
    assert load_features(tmp_path / "q.npz", dequantize="off").x.shape == (30, 1000)  # no copy: fits
    refused(lambda: load_features(tmp_path / "q.npz"), "q.npz", "float32 copy")      # dequantised: a copy


def test_x_train_and_x_test_count_their_concatenation(tmp_path, monkeypatch):
    np.savez(tmp_path / "s.npz", x_train=np.zeros((20, 500), np.float32), x_test=np.zeros((10, 500), np.float32),
             y_train=np.zeros(20, int), y_test=np.ones(10, int))
    free(monkeypatch, 30 * 500 * 4 + 300)  # the arrays fit, their concatenation does not
    refused(lambda: load_features(tmp_path / "s.npz"), "s.npz", "'x_train' + 'x_test' has shape (30, 500)",
            "concatenation")


def test_a_mat_file_is_checked_from_its_headers(tmp_path, monkeypatch):
    sio.savemat(tmp_path / "f.mat", {"x": np.ones((30, 1000), np.uint8), "y": np.arange(30) % 3})
    free(monkeypatch, 30 * 1000 * 5 - 1000)
    refused(lambda: load_features(tmp_path / "f.mat"), "f.mat", "array 'x' has shape (30, 1000)", "uint8",
            "float32 copy")
    free(monkeypatch, 30 * 1000 * 5 + 1000)
    np.testing.assert_array_equal(load_features(tmp_path / "f.mat").x, np.ones((30, 1000), np.float32))


def test_grayscale_image_arrays_count_their_rgb_copy(tmp_path, monkeypatch):
    images = np.zeros((50, 28, 28), np.uint8)
    np.savez(tmp_path / "m.npz", x=images, y=np.arange(50) % 2)
    free(monkeypatch, images.nbytes * 4 + 1000)
    assert load_image_arrays(tmp_path / "m.npz").pixels.shape == (50, 28, 28, 3)
    free(monkeypatch, images.nbytes * 4 - 1000)
    refused(lambda: load_data(f"image-array:{tmp_path / 'm.npz'}"), "m.npz", "(50, 28, 28)", "RGB copy")


def test_available_memory_honours_the_process_limit(tmp_path):
    """`ulimit -v`: what the address-space limit leaves above the process's present size."""
    code = ("import resource, sys; from lbhash import _io; "
            "vm = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024; "
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (300 << 20), resource.getrlimit(resource.RLIMIT_AS)[1])); "
            "print(_io.available_memory())")
    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc/self/status here")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert 0 < int(out.stdout) <= 300 << 20
