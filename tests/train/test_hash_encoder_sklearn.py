"""HashEncoder as a scikit-learn transformer: scikit-learn's own estimator checks, run on a tiny
config (CSQ, one epoch, 8 bits, an 8-unit hidden layer) so that its ~45 checks take seconds."""

import inspect

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from lbhash import HashEncoder

if "expected_failed_checks" not in inspect.signature(parametrize_with_checks).parameters:
    pytest.skip("scikit-learn < 1.6 has no expected_failed_checks", allow_module_level=True)

# Checks whose rules do not apply to HashEncoder, and why. Each one refuses the input as the
# check wants (a ValueError: lbhash.InputError), but words it as the rest of lbhash does, which
# its tests assert; the checks match scikit-learn's own wording.
NOT_APPLICABLE = {
    "check_do_not_raise_errors_in_init_or_set_params": "the check passes the name of `**options` ('options') "
                                                       "to set_params, which refuses unknown names with a "
                                                       "ValueError, as scikit-learn's own set_params does",
    "check_n_features_in_after_fitting": "a wrong feature width is refused by the run's input contract, "
                                         "whose message names the run ('3 features per row, but the run was "
                                         "trained on 4'), not scikit-learn's 'X has 3 features, but ...'",
    "check_estimators_nan_inf": "transform refuses NaN with the input contract's message ('holds nan at row "
                                "r, column c'), which the check's case-sensitive 'NaN' does not match",
    "check_fit2d_predict1d": "1-D X is refused ('features must be a non-empty 2-D array'), not with 'Reshape "
                             "your data'",
    "check_estimators_empty_data_messages": "X with no feature columns is refused ('input_dim must be a "
                                            "positive integer, got 0'), not with scikit-learn's wording",
    "check_complex_data": "complex X is refused as a non-numeric array, not with 'Complex data not supported'",
    "check_dtype_object": "features must have a numeric dtype: object arrays (of numbers or strings) are "
                          "refused, never converted",
    "check_requires_y_none": "y=None with a supervised method is refused with a message that lists the "
                             "methods that learn without labels (distill, itq, lsh, pca)",
}

TINY = HashEncoder(method="csq", bits=8, epochs=1, hidden=[8], centers="hadamard", lr_step=0)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


# about 40 fits: make test-slow; tests/train/test_hash_encoder.py covers get/set_params, clone and fit_transform fast
@pytest.mark.slow
@parametrize_with_checks([TINY], expected_failed_checks=lambda estimator: NOT_APPLICABLE)
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)
