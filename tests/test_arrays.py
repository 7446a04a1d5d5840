"""The one float32 conversion and the one finite check (lbhash.arrays)."""

import numpy as np

from lbhash.arrays import as_float32, first_nonfinite


def test_as_float32_copies_only_when_needed():
    x = np.ones((3, 2), np.float32)
    assert as_float32(x) is x
    with np.errstate(over="ignore"):
        y = as_float32(np.array([[1e300, 1.0]]))  # beyond float32's range: infinite
    assert y.dtype == np.float32 and y.flags.c_contiguous and np.isinf(y[0, 0])
    assert as_float32(np.asfortranarray(np.ones((3, 2)))).flags.c_contiguous


def test_first_nonfinite_finds_the_first_bad_value_in_row_order():
    x = np.zeros((5, 3), np.float32)
    assert first_nonfinite(x) is None
    x[1, 0] = 3e38
    x[1, 1] = 3e38  # the row sum overflows, the values are finite
    assert first_nonfinite(x) is None
    x[3, 2], x[4, 0] = np.nan, np.inf
    assert first_nonfinite(x) == (3, 2)
    assert first_nonfinite(x, np.array([4, 0, 3])) == (4, 0)  # in the order of the rows asked for
    assert first_nonfinite(x, np.array([0, 1, 2])) is None
