"""The input contract (lbhash.data.input_form): each cell of the rule table in docs/data.md."""

import json

import numpy as np
import pytest

from lbhash.data import load_features
from lbhash.data.input_form import InputForm, conform_dataset, conform_features

QUANT = InputForm("features", "uint8", 3, quantization=(0.5, 2.0), normalize="zscore")
FLOAT = InputForm("features", "float32", 3)
RAW_INT = InputForm("features", "uint8", 3)
STORED = np.array([[2, 4, 255], [0, 3, 10]], dtype=np.uint8)
EXPECTED = (STORED.astype(np.float32) - 2.0) * 0.5  # (x - zero_point) * scale, by hand


def test_stored_integers_are_dequantised_by_the_run():
    np.testing.assert_array_equal(conform_features(QUANT, STORED, "q"), EXPECTED)
    # any integer dtype holding the stored values is the same rows (e.g. a .npy saved as int64)
    np.testing.assert_array_equal(conform_features(QUANT, STORED.astype(np.int64), "q"), EXPECTED)


def test_feature_values_pass_and_a_float_copy_of_stored_values_is_refused():
    np.testing.assert_array_equal(conform_features(QUANT, EXPECTED, "q"), EXPECTED)
    with pytest.raises(ValueError, match=r"q: feature values 0\.\.255 lie outside -1\.\.126\.5"):
        conform_features(QUANT, STORED.astype(np.float32), "q")


def test_integers_outside_the_stored_range_are_refused():
    with pytest.raises(ValueError, match=r"stored values -1\.\.3 lie outside the uint8 range 0\.\.255"):
        conform_features(QUANT, np.array([[-1, 0, 3]]), "q")


def test_float_runs_refuse_integers_unless_they_came_from_json():
    with pytest.raises(ValueError, match="uint8 values, but the run was trained on float32 features"):
        conform_features(FLOAT, STORED, "X")
    np.testing.assert_array_equal(conform_features(FLOAT, STORED.astype(np.int64), "X", json_numbers=True),
                                  STORED.astype(np.float32))
    np.testing.assert_array_equal(conform_features(RAW_INT, STORED, "X"), STORED.astype(np.float32))


@pytest.mark.parametrize("rows, message", [
    (np.ones((2, 4), np.float32), "4 features per row, but the run was trained on 3"),
    (np.array([[0.0, np.nan, 1.0]]), "holds nan at row 0, column 1"),
    (np.ones((0, 3)), "non-empty 2-D array"),
    (np.array(["a", "b", "c"])[None], "non-empty 2-D array of numbers"),
])
def test_bad_rows_are_one_line_errors(rows, message):
    with pytest.raises(ValueError, match=message):
        conform_features(FLOAT, rows, "X")


def test_a_file_with_its_own_scale_is_read_as_values(tmp_path):
    path = tmp_path / "q.npz"
    np.savez(path, feat=STORED, scale=0.5, zero_point=2.0)
    ds = load_features(path, labels_required=False)
    assert ds.num_classes == 0 and ds.raw_dtype == "uint8" and ds.quantization == (0.5, 2.0)
    np.testing.assert_array_equal(conform_dataset(QUANT, ds, "q.npz").x, EXPECTED)
    np.save(tmp_path / "raw.npy", STORED)  # stored values, no scale: the run's rule
    np.testing.assert_array_equal(conform_dataset(QUANT, load_features(tmp_path / "raw.npy", labels_required=False),
                                                  "raw.npy").x, EXPECTED)


def test_form_round_trips_through_json_and_refuses_garbage():
    again = InputForm.from_dict(json.loads(json.dumps(QUANT.to_dict())), "input.json")
    assert again == QUANT
    with pytest.raises(ValueError, match="input.json: not a readable input contract"):
        InputForm.from_dict({"format": "lbhash-input/1", "kind": "features", "dtype": "nonsense", "width": 3},
                            "input.json")


def test_rows_far_off_the_training_scale_draw_a_warning():
    """Issue 87: queries scaled 0..1 for a run trained on 0..6 were encoded silently (10 of 30 hits right).
    A run records its training rows' median length; rows whose median is over 3x off draw a warning."""
    import warnings

    from lbhash.data import ArrayDataset
    from lbhash.data.input_form import form_of
    from lbhash.errors import LbhashWarning

    rows = np.abs(np.random.default_rng(0).standard_normal((50, 3))) * 2 + 1
    form = form_of(ArrayDataset(rows.astype(np.float32), np.zeros(50, np.int64), None, "rows"), None, None)
    assert form.row_norm == pytest.approx(float(np.median(np.linalg.norm(rows, axis=1))), rel=1e-6)
    assert InputForm.from_dict(json.loads(json.dumps(form.to_dict())), "input.json") == form
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conform_features(form, rows[:5] * 2.5, "q")  # within 3x: no warning
        conform_features(FLOAT, rows[:5] / 100, "q")  # an older run records no length: nothing to compare
    with pytest.warns(LbhashWarning, match=r"q: the rows' median length is .*, the training features'"):
        conform_features(form, rows[:5] / rows.max(), "q")  # scaled to 0..1
    with pytest.warns(LbhashWarning, match="training data's scale"):
        conform_features(form, rows[:5] * 10, "q")
