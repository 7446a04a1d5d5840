"""Searcher: raw inputs through an encoder, then the index; and the training-layer sources."""

import io
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from index_fakes import FakeEncoder
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.serving.searcher import Searcher


@pytest.fixture
def feature_searcher(rng):
    encoder = FakeEncoder(dim=12, bits=32)
    x = rng.standard_normal((300, 12))
    index = CodeIndex(32)
    index.add(encoder.encode(x), labels=rng.integers(0, 3, 300))
    return Searcher(index, encoder), x


def test_features_search_equals_index_search_on_encoded_codes(feature_searcher, rng):
    searcher, x = feature_searcher
    queries = x[:5] + 0.01 * rng.standard_normal((5, 12))
    codes = searcher.encoder.encode(queries)
    for got, expected in zip(searcher.search(queries, 7, labels=[0, 1, 2, 0, 1]),
                             searcher.index.search(codes, 7, labels=[0, 1, 2, 0, 1])):
        np.testing.assert_array_equal(got, expected)
    assert searcher.search(x[:3], 1)[1][:, 0].tolist() == [0, 1, 2] or \
        (searcher.search(x[:3], 1)[0][:, 0] == 0).all()  # an item finds itself (or a twin at 0)
    lims, d, i = searcher.range_search(x[:2], 0)
    assert {0, 1} <= set(i.tolist()) and (d == 0).all()


@pytest.mark.parametrize("bad, fragment", [
    (np.array([[np.nan] * 12]), "holds nan at row 0, column 0"),
    (np.array([[1.0] * 11 + [np.inf]]), "column 11"),
    (np.array(["a"] * 12).reshape(1, 12), "2-D array of numbers"),
    (np.zeros(12), "2-D array of numbers"),
])
def test_bad_features_refused(feature_searcher, bad, fragment):
    searcher, _ = feature_searcher
    with pytest.raises(InputError, match=fragment):
        searcher.search(bad, 3)


def test_encoder_and_index_must_agree():
    with pytest.raises(InputError, match="16-bit codes but the index holds 32-bit"):
        Searcher(CodeIndex(32), FakeEncoder(bits=16))
    encoder = FakeEncoder()
    encoder.input_kind_ = "text"
    with pytest.raises(InputError, match="input_kind_"):
        Searcher(CodeIndex(32), encoder)


def png_bytes(img):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def test_images_of_any_size_and_image_files(rng):
    encoder = FakeEncoder(bits=16, input_kind="images")
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(8, 8), (10, 6), (8, 8)]]
    index = CodeIndex(16)
    index.add(np.concatenate([encoder.encode(img[None]) for img in images]))
    searcher = Searcher(index, encoder)
    expected = np.concatenate([encoder.encode(img[None]) for img in images])
    np.testing.assert_array_equal(searcher.encode(images), expected)
    np.testing.assert_array_equal(searcher.encode(np.stack([images[0], images[2]])), expected[[0, 2]])
    files = [png_bytes(img) for img in images]
    np.testing.assert_array_equal(searcher.encode(searcher.decode_images(files, ["a.png", "b.png", "c.png"])), expected)
    with pytest.raises(InputError, match="broken.jpg: cannot decode image"):
        searcher.decode_images([b"not an image"], ["broken.jpg"])
    with pytest.raises(InputError, match=r"images\[0\] must be uint8 \(H, W, 3\)"):
        searcher.encode([np.zeros((4, 4), np.uint8)])
    with pytest.raises(InputError, match="feature vectors, not images"):
        Searcher(CodeIndex(32), FakeEncoder()).decode_images(files, ["a.png"] * 3)


class BrokenEncoder(FakeEncoder):
    """Breaks the contract of `Encoder._forward`: integer outputs, too few of them."""

    def _forward(self, inputs, embedded, batch_size):
        return np.zeros((len(inputs), 3), np.uint8), None


class RefusingEncoder(FakeEncoder):
    """A model that refuses its batch with a ValueError of two lines."""

    def _forward(self, inputs, embedded, batch_size):
        raise ValueError("the model refuses\n  these rows")


def test_an_encoders_refusal_is_one_input_error_line(rng):
    with pytest.raises(InputError, match="^the model refuses these rows$"):
        Searcher(CodeIndex(32), RefusingEncoder(bits=32)).search(rng.standard_normal((2, 12)), 1)


def test_broken_encoder_is_a_bug_not_input_error(rng):
    with pytest.raises(RuntimeError, match=r"encoder returned real outputs uint8 \(2, 3\)"):
        Searcher(CodeIndex(32), BrokenEncoder(bits=32)).search(rng.standard_normal((2, 12)), 1)


@pytest.mark.slow
def test_sources_of_a_real_trained_run(tmp_path):
    """A small digits run: its encoder reproduces its codes.npz, and run_codes reads it."""
    from lbhash.data import load_data
    from lbhash.indexes.index_inputs import load_encoder, run_codes

    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "lbhash.cli", "train", "--data", "digits", "--bits", "16",
                    "--epochs", "1", "--out", str(run)], check=True, capture_output=True, timeout=300)
    database = run_codes(run, "database")
    encoder = load_encoder(run)
    assert encoder.bits_ == 16 and encoder.input_kind_ == "features"
    x = load_data("digits").x[database["ids"]]
    np.testing.assert_array_equal(encoder.encode(x), database["codes"])
    everything = run_codes(run, "all")
    np.testing.assert_array_equal(everything["codes"][database["ids"]], database["codes"])
    shutil.rmtree(run)
