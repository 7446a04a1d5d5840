"""The closed-form baselines (lsh, pca, itq, linear) against independent references, and
through every entry point: `lbhash train`, HashEncoder (with and without labels), save/load,
`lbhash index build`, reproduce's grid."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lbhash import HashEncoder
from lbhash.cli import main
from lbhash.codes import pack, unpack
from lbhash.codes_file import load_codes_file
from lbhash.errors import InputError
from lbhash.methods import create_method
from lbhash.methods.projections import itq_rotation


def blobs(n=120, d=10, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(classes, d))[y] * 2 + rng.normal(size=(n, d))
    return x.astype(np.float32), y


# --- LSH and PCA: projections checked by hand on tiny cases -----------------------------------

def test_lsh_is_a_seeded_gaussian_projection_through_the_mean():
    x = np.array([[1, 2], [3, 0], [-1, 1], [1, -3]], np.float32)   # mean (1, 0)
    fit = create_method("lsh", 3, 0).fit_projection(x, np.zeros((4, 0), bool), seed=7)
    w = np.random.default_rng(7).standard_normal((2, 3)).T          # 3 hyperplanes in 2-D
    np.testing.assert_array_equal(fit.weight, w)
    np.testing.assert_allclose(fit.bias, -w[:, 0])                   # -W (1, 0)
    # the point (1, 0) is the mean: u = 0 for every bit, so bin(u) = +1 everywhere
    np.testing.assert_allclose(fit.weight @ [1, 0] + fit.bias, 0, atol=1e-12)
    assert not np.array_equal(create_method("lsh", 3, 0).fit_projection(x, None, seed=8).weight, w)


def test_pca_projects_on_the_principal_axes_with_fixed_signs():
    # centred points along a = (0.6, 0.8) (spread 3) and b = (-0.8, 0.6) (spread 1), shifted by m
    a, b, m = np.array([0.6, 0.8]), np.array([-0.8, 0.6]), np.array([5.0, -2.0])
    x = np.array([3 * a, -3 * a, b, -b]) + m
    fit = create_method("pca", 2, 0).fit_projection(x.astype(np.float32), None, seed=0)
    # first axis a; second axis b with its largest-magnitude entry made positive: (0.8, -0.6)
    expected = np.array([[0.6, 0.8], [0.8, -0.6]])
    np.testing.assert_allclose(fit.weight, expected, atol=1e-6)
    np.testing.assert_allclose(fit.bias, -expected @ m, atol=1e-5)
    # the first point, m + 3a, projects to (a . 3a, (0.8, -0.6) . 3a) = (3, 0): codes (+1, +1)
    np.testing.assert_allclose(fit.weight @ x[0] + fit.bias, [3, 0], atol=1e-5)
    # the seed plays no part
    np.testing.assert_array_equal(fit.weight, create_method("pca", 2, 0).fit_projection(
        x.astype(np.float32), None, seed=5).weight)


# --- ITQ: monotone objective and a numpy reference written here ------------------------------

def reference_itq(x, bits, seed, iterations):
    """Gong and Lazebnik's ITQ, written independently: PCA from the SVD of the centred data,
    the same seeded starting rotation, B = sgn(VR), then R from the SVD of V^T B."""
    xc = x.astype(np.float64) - x.astype(np.float64).mean(0)
    _, _, vt = np.linalg.svd(xc, full_matrices=False)
    pcs = vt[:bits].T
    for j in range(bits):  # sign: largest-magnitude entry of each axis positive
        if pcs[np.argmax(np.abs(pcs[:, j])), j] < 0:
            pcs[:, j] = -pcs[:, j]
    v = xc @ pcs
    g = np.random.default_rng(seed).standard_normal((bits, bits))
    q, r = np.linalg.qr(g)
    rot = q @ np.diag(np.sign(np.diag(r)))
    errors = []
    for _ in range(iterations):
        bmat = np.sign(v @ rot)
        bmat[bmat == 0] = 1
        s, _, ut = np.linalg.svd(v.T @ bmat)   # max tr(R^T V^T B): R = S U^T
        rot = s @ ut
        errors.append(np.mean((bmat - v @ rot) ** 2))
    return pcs @ rot, x.astype(np.float64).mean(0), errors


def test_itq_matches_the_reference_and_its_error_never_increases():
    x, _ = blobs(200, 12)
    fit = create_method("itq", 8, 0).fit_projection(x, None, seed=4)
    directions, mean, errors = reference_itq(x, 8, 4, 50)
    np.testing.assert_allclose(fit.weight, directions.T, atol=1e-9)
    np.testing.assert_allclose(fit.bias, -directions.T @ mean, atol=1e-9)
    history = np.array(fit.history["quantization"])
    np.testing.assert_allclose(history, errors, rtol=1e-10)
    assert len(history) == 50 and (np.diff(history) <= 1e-12).all() and history[-1] < history[0]


def test_itq_steps_are_exact_minimisers():
    """The rotation step is the best orthogonal matrix for its B: no random rotation beats it."""
    rng = np.random.default_rng(1)
    v = rng.normal(size=(60, 4))
    rot, _ = itq_rotation(v, np.eye(4), 1)
    b = np.where(v >= 0, 1.0, -1.0)
    best = ((b - v @ rot) ** 2).sum()
    for _ in range(200):
        q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
        assert ((b - v @ q) ** 2).sum() >= best - 1e-9


@pytest.mark.parametrize("method", ["pca", "itq"])
def test_more_bits_than_feature_dimensions_is_an_input_error(method):
    x, y = blobs(50, 6)
    with pytest.raises(InputError, match=f"method {method}: bits=8 exceeds the 6 feature dimensions"):
        HashEncoder(method=method, bits=8).fit(x, y)


def test_random_projections_take_more_bits_than_feature_dimensions():
    x, _ = blobs(50, 6)
    assert HashEncoder(method="lsh", bits=8).fit(x).encode(x).shape == (50, 1)


# --- linear: ridge against a least-squares reference --------------------------------------------

def test_linear_is_the_ridge_regression_onto_the_class_centers():
    x, y = blobs(90, 7)
    centers = torch.where(torch.randn(3, 8, generator=torch.Generator().manual_seed(0)) >= 0, 1.0, -1.0)
    labels = np.eye(3, dtype=bool)[y]
    labels[:10, 1] = True  # multi-label rows: their target is the mean of their centers
    method = create_method("linear", 8, 3, centers=centers, ridge=0.5)
    fit = method.fit_projection(x, labels, seed=0)
    t = labels.astype(float) @ centers.numpy() / labels.sum(1, keepdims=True)
    # reference: augmented least squares [1 x; 0 sqrt(n ridge) I] [b; W^T] = [t; 0], intercept free
    n, d = x.shape
    a = np.block([[np.ones((n, 1)), x.astype(float)], [np.zeros((d, 1)), np.sqrt(n * 0.5) * np.eye(d)]])
    sol, *_ = np.linalg.lstsq(a, np.vstack([t, np.zeros((d, 8))]), rcond=None)
    np.testing.assert_allclose(fit.bias, sol[0], atol=1e-8)
    np.testing.assert_allclose(fit.weight, sol[1:].T, atol=1e-8)
    with pytest.raises(InputError, match="ridge must be a positive finite number, got 0"):
        create_method("linear", 8, 3, centers=centers, ridge=0)


# --- every entry point ------------------------------------------------------------------------

def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_deterministic_loadable_and_indexable(method, first, second, tmp_path):
    """Two runs of `lbhash train --data digits --method METHOD --bits 16 --seed 3`: the same codes,
    the metrics and log of one closed-form epoch, HashEncoder.load and `lbhash index build`."""
    codes = load_codes_file(first / "codes.npz")
    again = load_codes_file(second / "codes.npz")
    np.testing.assert_array_equal(codes["db_codes"], again["db_codes"])
    metrics = json.loads((first / "metrics.json").read_text())
    assert metrics["run"]["variant"] == method and metrics["run"]["epochs"] == 1 and 0 < metrics["map"] <= 1
    log = [json.loads(line) for line in (first / "log.jsonl").read_text().splitlines()]
    assert len(log) == 1 and log[0]["epoch"] == 1 and "total" in log[0]["loss"]
    # HashEncoder.load rebuilds the same map: the run's database codes, bit for bit
    from lbhash.data import load_data
    from lbhash.data.protocols import load_split

    enc = HashEncoder.load(first)
    split = load_split(first / "split.npz")
    db = load_data("digits").x[split.database]
    np.testing.assert_array_equal(enc.encode(db), pack(unpack(codes["db_codes"], 16)))
    result = run("index", "build", first, "--out", tmp_path / "idx")
    assert result.exit_code == 0, result.output
    assert run("train", "--out", first, "--resume").exit_code == 0  # finished: left as it is


def train_cli(method, out):
    result = run("train", "--data", "digits", "--method", method, "--bits", 16, "--seed", 3, "--out", out,
                 "--no-progress")
    assert result.exit_code == 0, result.output
    return out


def test_itq_runs_are_deterministic_loadable_and_indexable(tmp_path, runs):
    # the bank's "itq" is that command's run, made by RunDirectory.train
    first = train_cli("itq", tmp_path / "a")
    assert_deterministic_loadable_and_indexable("itq", first, runs.path("itq"), tmp_path)


@pytest.mark.slow  # ITQ's case, the fast one, is above
@pytest.mark.parametrize("method", ["lsh", "pca", "linear"])
def test_baseline_runs_are_deterministic_loadable_and_indexable(method, tmp_path):
    first, second = train_cli(method, tmp_path / "a"), train_cli(method, tmp_path / "b")
    assert_deterministic_loadable_and_indexable(method, first, second, tmp_path)


# one fit fast: the methods share HashEncoder's unsupervised path, and each one's projection is checked above
@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) for m in ("lsh", "pca")] + ["itq"])
def test_unsupervised_baselines_fit_without_labels_and_refuse_the_d_objective(method, tmp_path):
    x, y = blobs(150, 20)
    enc = HashEncoder(method=method, bits=16, seed=1).fit(x)
    codes = enc.encode(x)
    assert codes.shape == (150, 2)
    # labels make no difference to an unsupervised fit
    np.testing.assert_array_equal(HashEncoder(method=method, bits=16, seed=1).fit(x, y).encode(x), codes)
    enc.save(tmp_path / "saved")
    np.testing.assert_array_equal(HashEncoder.load(tmp_path / "saved").encode(x), codes)
    with pytest.raises(InputError, match=f"method {method} is an unsupervised baseline .*--lbhash"):
        HashEncoder(method=method, bits=16, lbhash=True).fit(x)
    result = run("train", "--data", "digits", "--method", method, "--lbhash", "--out", tmp_path / "r")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_supervised_methods_need_labels():
    x, _ = blobs(60, 20)
    for method in ("linear", "csq"):
        with pytest.raises(InputError, match=f"method {method} learns from labels, but arrays has none "
                                             r"\(methods without labels: distill, itq, lsh, pca\)"):
            HashEncoder(method=method, bits=16).fit(x)


def test_baselines_refuse_images():
    images = np.random.default_rng(0).integers(0, 255, (20, 16, 16), dtype=np.uint8)
    with pytest.raises(InputError, match="method lsh fits a linear map of feature vectors"):
        HashEncoder(method="lsh", bits=8).fit(images, np.arange(20) % 2)


def test_baselines_join_the_grid_without_d_variants_or_epochs():
    from lbhash.reproduce.experiments import Context, GridSpec

    ctx = Context(data="digits", out=None, overrides={"epochs": 3})
    cells = GridSpec(methods=("csq", "itq"), bits=(16,), seeds=(0,)).cells(ctx)
    assert [c.name for c in cells] == ["csq-16bits-seed0", "csq_D-16bits-seed0", "itq-16bits-seed0"]
    assert cells[0].config["epochs"] == 3 and "epochs" not in cells[2].config
    assert "itq" not in GridSpec().methods  # the paper's grid stays the six deep methods
