import functools
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lbhash.cli.common import LbhashGroup
from lbhash.cli.reproduce import toy_mvb
from lbhash.surrogate import BlockSurrogate, pattern_indices
from lbhash.reproduce.stats import kl_divergence
from lbhash.reproduce.toy import (
    ToyConfig,
    block_marginals,
    format_table,
    histogram,
    random_mvb,
    run_toy,
    sample_codes,
    surrogate_joint,
)

SMALL8 = dict(bits=8, train_samples=3000, epochs=10, eval_samples=(20000,), seed=3)
SMALL16 = dict(bits=16, train_samples=2000, epochs=2, eval_samples=(500,), seed=1)


@pytest.fixture(scope="module")
def small8():
    return run_toy(**SMALL8)


@pytest.fixture(scope="module")
def small16():
    return run_toy(**SMALL16)


def test_kl_hand_computed():
    # 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln 2 + 0.5 ln(2/3)
    assert kl_divergence([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.1438410362258904, abs=1e-12)
    # zero entries of p contribute nothing, even where q is zero
    assert kl_divergence([1.0, 0.0], [0.5, 0.5]) == pytest.approx(math.log(2))
    assert kl_divergence([0.5, 0.5, 0.0], [0.5, 0.5, 0.0]) == 0.0


def test_kl_of_a_distribution_with_itself_is_zero(rng):
    p = rng.dirichlet(np.ones(50))
    assert kl_divergence(p, p) == pytest.approx(0.0, abs=1e-15)


def test_kl_rejects_bad_input():
    with pytest.raises(ValueError):
        kl_divergence([0.5, 0.5], [1.0])
    with pytest.raises(ValueError):
        kl_divergence([0.5, 0.5], [1.5, -0.5])


def test_histogram_floor_infinite_when_code_unseen_finite_when_smoothed():
    real = np.array([0.5, 0.25, 0.25])
    index = np.array([0, 0, 1])  # code 2 has real mass but is never seen
    assert kl_divergence(real, histogram(index, 3)) == math.inf
    smoothed = histogram(index, 3, pseudocount=0.5)
    np.testing.assert_allclose(smoothed, [2.5 / 4.5, 1.5 / 4.5, 0.5 / 4.5])
    expected = 0.5 * math.log(0.5 * 4.5 / 2.5) + 0.25 * math.log(0.25 * 4.5 / 1.5) \
        + 0.25 * math.log(0.25 * 4.5 / 0.5)
    assert kl_divergence(real, smoothed) == pytest.approx(expected)


def test_sampled_codes_follow_the_bit_order(rng):
    real = random_mvb(8, rng)
    index, signs = sample_codes(real, 500, rng)
    assert signs.shape == (500, 8) and set(np.unique(signs)) <= {-1, 1}
    np.testing.assert_array_equal(pattern_indices(signs), index)
    # bit k of the code is bit k of the index
    assert all((signs[i, k] > 0) == bool(index[i] >> k & 1) for i in range(20) for k in range(8))


def test_random_mvb_is_a_distribution(rng):
    p = random_mvb(16, rng)
    assert p.shape == (65536,) and (p > 0).all() and p.sum() == pytest.approx(1.0)


def test_surrogate_joint_is_the_mean_of_per_sample_block_products(rng):
    torch.manual_seed(0)
    model = BlockSurrogate(16, block_size=8).eval()
    l = rng.standard_normal((7, 16)).astype(np.float32)
    got = surrogate_joint(model, l, chunk=3)  # chunks of 3, 3, 1
    probs = model.block_probs(torch.from_numpy(l)).double().numpy()
    # code index = i0 + 256 * i1: block 1 is the slow (outer) factor
    expected = np.mean([np.kron(probs[n, 1], probs[n, 0]) for n in range(7)], axis=0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-12)  # float32 forward passes


def test_block_marginals_by_loop(rng):
    real = random_mvb(16, rng)
    got = block_marginals(real, 16, 8)
    low, high = np.zeros(256), np.zeros(256)
    for code, p in enumerate(real):
        low[code % 256] += p
        high[code // 256] += p
    np.testing.assert_allclose(got, [low, high])


def test_surrogate_far_below_naive_at_8_bits(small8):
    row = small8.kl[20000]
    # the naive product cannot represent the dependence between bits
    assert row["naive"] > 0.2
    assert row["surrogate"] < 0.25 * row["naive"]
    assert small8.train["final_epoch_pattern_accuracy"] > 0.5  # dropout 0.5 is on in training


def test_true_marginal_product_kl_independently(small8, small16):
    for result in (small8, small16):
        bits, real = result.config.bits, result.real
        grid = real.reshape((2,) * bits)  # C order: axis 0 is the highest bit
        p_plus = [grid.sum(axis=tuple(a for a in range(bits) if a != bits - 1 - k))[1] for k in range(bits)]
        factors = [np.array([1 - p_plus[k], p_plus[k]]) for k in reversed(range(bits))]
        product = functools.reduce(np.multiply.outer, factors).ravel()
        expected = sum(p * math.log(p / q) for p, q in zip(real, product))
        assert result.true_marginal_product_kl == pytest.approx(expected, rel=1e-9)
    assert small8.true_block_product_kl is None


def test_true_block_product_kl_independently(small16):
    real = small16.real
    grid = real.reshape(256, 256)  # [high block, low block]
    product = np.einsum("i,j->ij", grid.sum(1), grid.sum(0)).ravel()
    expected = float(np.sum(real * np.log(real / product)))
    assert small16.true_block_product_kl == pytest.approx(expected, rel=1e-9)
    # a single product of blocks loses only cross-block dependence: below the bitwise product
    assert 0 < small16.true_block_product_kl < small16.true_marginal_product_kl


def test_16_bit_estimate_is_a_distribution(small16):
    est = small16.estimates[500]["surrogate"]
    assert est.shape == (65536,) and (est > 0).all()
    assert est.sum() == pytest.approx(1.0, abs=1e-9)
    assert math.isfinite(small16.kl[500]["surrogate"])
    # 500 samples of 65536 codes: most codes are unseen, so the raw histogram floor is infinite
    assert small16.kl[500]["histogram"] == math.inf
    assert math.isfinite(small16.kl[500]["histogram_jeffreys"])


def test_same_seed_same_numbers_and_global_state_untouched():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    cfg = ToyConfig(bits=8, train_samples=500, epochs=1, eval_samples=(300,), seed=7)
    a, b = run_toy(cfg), run_toy(cfg)
    assert torch.rand(1) == before  # training ran on a forked RNG
    assert torch.get_num_threads() == threads
    assert a.kl == b.kl
    np.testing.assert_array_equal(a.estimates[300]["surrogate"], b.estimates[300]["surrogate"])
    c = run_toy(cfg, seed=8)
    assert c.kl[300]["surrogate"] != a.kl[300]["surrogate"]


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(bits=12), "not a positive multiple of the block size 8"),
    (dict(bits=24), "bits must be <= 16"),
    (dict(train_samples=0), "train_samples"),
    (dict(eval_samples=(100, -5)), "eval_samples"),
    (dict(noise=-0.1), "noise"),
    (dict(epochs=0), "epochs"),
    (dict(seed=-1), "seed"),
])
def test_bad_config(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        ToyConfig(**kwargs)


def _invoke(*args):
    group = LbhashGroup()
    group.add_command(toy_mvb)
    return CliRunner().invoke(group, ["toy-mvb", *args])


def test_cli_writes_png_json_and_prints_tables(tmp_path):
    out = tmp_path / "toy"
    result = _invoke("--bits", "both", "--train-samples", "500", "--epochs", "1",
                     "--eval-samples", "100,2000", "--out", str(out))
    assert result.exit_code == 0, result.output
    for bits in (8, 16):
        png = out / f"toy_mvb_{bits}bit.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "toy_mvb.json").read_text())
    assert set(record) == {"8", "16"}
    # 100 samples cannot cover 256 codes: the unsmoothed floor is infinite, stored as "inf"
    assert record["8"]["kl_real_vs"]["100"]["histogram"] == "inf"
    assert record["8"]["kl_real_vs"]["2000"]["floor_asymptotic"] == pytest.approx(255 / 4000)
    assert record["16"]["true_block_product_kl"] > 0
    assert "KL(real || estimate)" in result.output and "N=2000" in result.output
    assert "surrogate: mean of block products" in result.output
    assert "paper 0.008" in result.output and "paper 0.1084" in result.output
    assert "sampling floor" in result.output
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_format_table_rows(small8):
    text = format_table(small8)
    assert "N=20000" in text and "true marginal product" in text and "add-1/2" in text


def test_cli_help():
    result = _invoke("--help")
    assert result.exit_code == 0 and "--eval-samples" in result.output


@pytest.mark.parametrize("args, fragment", [
    (["--bits", "12"], "--bits must be 8, 16 or both"),
    (["--train-samples", "0"], "train_samples"),
    (["--eval-samples", "100,0"], "eval_samples"),
    (["--eval-samples", "abc"], "--eval-samples"),
    (["--noise", "-1"], "noise"),
])
def test_cli_bad_values_one_line_exit_2(args, fragment, tmp_path):
    result = _invoke(*args, "--out", str(tmp_path / "x"))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert not (tmp_path / "x").exists()
