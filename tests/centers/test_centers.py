import functools
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
from click.testing import CliRunner

from lbhash.centers import (
    CENTER_KINDS,
    bch_centers,
    cache_dir,
    center_report,
    generate_centers,
    plotkin_bound,
    select_centers,
)
from helpers import cli
from lbhash import _io
from lbhash.centers import _generate, _simple
from lbhash.centers._greedy import enumerate_code, greedy_max_min
from lbhash.cli.reproduce import centers as centers_command
from lbhash.cli.common import LbhashGroup

# Reference table (docs/centers.md): (bits, classes) -> min distance of eBCH, RS GF(16), random, Plotkin.
REFERENCE_TABLE = {
    (16, 10): dict(bch=8, rs=6, random=6, plotkin=8),
    (16, 100): dict(bch=6, rs=4, random=2, plotkin=8),
    (32, 10): dict(bch=16, rs=12, random=12, plotkin=17),
    (32, 100): dict(bch=12, rs=11, random=7, plotkin=16),
    (48, 100): dict(bch=18, rs=17, random=13, plotkin=24),
    (64, 100): dict(bch=32, rs=None, random=20, plotkin=32),
}


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    """Never touch the user's cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(path))
    return path / "centers"


def brute_distances(codes):
    a = np.asarray(codes, dtype=np.int64)
    return (a.shape[1] - a @ a.T) // 2


def brute_min(codes):
    d = brute_distances(codes)
    return int(d[~np.eye(len(d), dtype=bool)].min())


@functools.lru_cache(maxsize=None)
def generated(bits, classes, kind):
    """generate_centers(bits, classes, kind=kind, cache=False), made once in this module for the tests
    that only read it (read-only): it is deterministic (test_shape_values_and_determinism), and the
    random kind's 1,000 draws, which auto makes too, take about a second at 100 classes."""
    codes = generate_centers(bits, classes, kind=kind, cache=False)
    codes.setflags(write=False)
    return codes


def check_center_array(codes, bits, classes):
    assert codes.dtype == np.int8 and codes.shape == (classes, bits)
    assert np.all((codes == 1) | (codes == -1))
    assert len(np.unique(codes, axis=0)) == classes


# --- the reference table ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bch", "auto"])
@pytest.mark.parametrize("bits, classes", list(REFERENCE_TABLE))
def test_reaches_ebch_column(bits, classes, kind):
    codes = generated(bits, classes, kind)
    check_center_array(codes, bits, classes)
    assert brute_min(codes) >= REFERENCE_TABLE[bits, classes]["bch"]


@pytest.mark.parametrize("bits, classes", [k for k, v in REFERENCE_TABLE.items() if v["rs"]])
def test_reed_solomon_reaches_rs_column(bits, classes):
    codes = generate_centers(bits, classes, kind="reed_solomon", cache=False)
    check_center_array(codes, bits, classes)
    assert brute_min(codes) >= REFERENCE_TABLE[bits, classes]["rs"]


@pytest.mark.parametrize("bits, classes", list(REFERENCE_TABLE))
def test_random_is_near_random_column(bits, classes):
    codes = generated(bits, classes, "random")
    check_center_array(codes, bits, classes)
    # A different draw may land one below the reference value.
    assert brute_min(codes) >= REFERENCE_TABLE[bits, classes]["random"] - 1


@pytest.mark.parametrize("bits, classes", list(REFERENCE_TABLE))
def test_plotkin_bound_matches_table_and_caps_every_set(bits, classes):
    assert plotkin_bound(bits, classes) == REFERENCE_TABLE[bits, classes]["plotkin"]
    assert plotkin_bound(bits, classes) == (bits * classes) // (2 * (classes - 1))
    codes = generated(bits, classes, "auto")
    report = center_report(codes)
    assert report.min_distance <= report.plotkin_bound
    assert report.mean_distance <= bits * classes / (2 * (classes - 1))  # before the floor


def test_auto_is_the_best_kind_and_equals_its_winner():
    codes, kind = select_centers(48, 100, cache=False)
    assert kind in CENTER_KINDS[1:]
    best = brute_min(codes)
    for other in ("bch", "reed_solomon", "random"):
        assert brute_min(generated(48, 100, other)) <= best
    assert np.array_equal(codes, generated(48, 100, kind))


# --- hadamard ------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [4, 16, 64])
def test_hadamard_rows_are_at_half_distance_or_negated(bits):
    codes = generate_centers(bits, 2 * bits, kind="hadamard", cache=False, canonical=True)
    check_center_array(codes, bits, 2 * bits)
    h = scipy.linalg.hadamard(bits)
    assert np.array_equal(codes, np.concatenate([h, -h]))
    d = brute_distances(codes)
    i, j = np.meshgrid(np.arange(2 * bits), np.arange(2 * bits), indexing="ij")
    expected = np.where(i == j, 0, np.where(abs(i - j) == bits, bits, bits // 2))
    assert np.array_equal(d, expected)


def test_hadamard_prefix_for_fewer_classes():
    codes = generate_centers(32, 10, kind="hadamard", cache=False, canonical=True)
    assert np.array_equal(codes, scipy.linalg.hadamard(32)[:10])
    assert center_report(codes).min_distance == 16


# --- general properties --------------------------------------------------------------------

@pytest.mark.parametrize("kind", CENTER_KINDS)
def test_shape_values_and_determinism(kind):
    a = generate_centers(16, 20, kind=kind, cache=False)
    check_center_array(a, 16, 20)
    assert np.array_equal(a, generate_centers(16, 20, kind=kind, cache=False))
    report = center_report(a, kind)
    assert (report.bits, report.classes, report.kind) == (16, 20, kind)
    assert report.min_distance == brute_min(a)
    d = brute_distances(a)
    assert report.mean_distance == pytest.approx(d.sum() / (20 * 19))


def test_random_seeds_differ():
    a = generate_centers(32, 10, kind="random", seed=0, cache=False)
    b = generate_centers(32, 10, kind="random", seed=1, cache=False)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["hadamard", "bch", "reed_solomon"])
@pytest.mark.parametrize("seed", [0, 7])
def test_every_seed_relabels_without_changing_distances(kind, seed):
    a = generate_centers(16, 10, kind=kind, cache=False, canonical=True)
    b = generate_centers(16, 10, kind=kind, seed=seed, cache=False)
    check_center_array(b, 16, 10)
    assert not np.array_equal(a, b)  # seed 0 is relabelled too, unless canonical centers are asked for
    assert sorted(brute_distances(a).ravel()) == sorted(brute_distances(b).ravel())
    assert np.array_equal(b, generate_centers(16, 10, kind=kind, seed=seed, cache=False))
    assert not np.array_equal(b, generate_centers(16, 10, kind=kind, seed=seed + 1, cache=False))


@pytest.mark.parametrize("bits, classes", [(12, 10), (24, 100), (128, 100), (13, 1000), (8, 100), (1, 2), (3, 5)])
def test_other_sizes(bits, classes):
    codes, kind = select_centers(bits, classes, cache=False)
    check_center_array(codes, bits, classes)
    assert brute_min(codes) >= 1
    assert brute_min(codes) <= plotkin_bound(bits, classes)


def test_many_classes_on_few_bits_use_even_weight_code():
    # 1000 distinct codes of 12 bits can keep distance 2 (even-weight code has 2048 words).
    codes = generate_centers(12, 1000, kind="bch", cache=False)
    check_center_array(codes, 12, 1000)
    assert brute_min(codes) == 2


def test_greedy_pick_reports_the_true_min_distance(rng):
    words = enumerate_code(rng.integers(0, 2, size=(10, 40)))
    picked, dist = greedy_max_min(words, 30)
    assert len(set(picked.tolist())) == 30
    bitsets = np.unpackbits(words[picked].view(np.uint8), axis=1, bitorder="little")[:, :40]
    signs = bitsets.astype(np.int64) * 2 - 1
    assert dist == brute_min(signs)
    assert greedy_max_min(words, 30, stop_at=dist) is None


def test_enumerate_code_spans_all_combinations():
    gen = np.array([[1, 0, 0, 1, 1], [0, 1, 0, 1, 0], [0, 0, 1, 0, 1]], dtype=np.uint8)
    words = enumerate_code(gen)
    bitsets = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :5]
    messages = (np.arange(8)[:, None] >> np.arange(3)) & 1
    assert np.array_equal(bitsets, messages @ gen % 2)


def test_no_kind_imports_galois_or_numba():
    # BCH and Reed-Solomon codes are built in numpy: no JIT compile, no numba threading layer
    code = ("import sys; from lbhash.centers import generate_centers\n"
            "for kind in ('hadamard', 'random', 'bch', 'reed_solomon', 'auto'):\n"
            "    generate_centers(16, 10, kind=kind, cache=False)\n"
            "print(sorted({'galois', 'numba'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(bits=48, num_classes=100, kind="hadamard"), ["hadamard", "bits=48", "classes=100"]),
    (dict(bits=16, num_classes=40, kind="hadamard"), ["hadamard", "bits=16", "classes=40"]),
    (dict(bits=64, num_classes=70000, kind="bch"), ["bch", "bits=64", "classes=70000"]),
    (dict(bits=64, num_classes=70000, kind="reed_solomon"), ["reed_solomon", "bits=64", "classes=70000"]),
    (dict(bits=16, num_classes=1), ["classes", "1"]),
    (dict(bits=0, num_classes=10), ["bits", "0"]),
    (dict(bits=16.0, num_classes=10), ["bits", "16.0"]),
    (dict(bits=16, num_classes=10, seed=-1), ["seed", "-1"]),
    (dict(bits=16, num_classes=10, kind="rs"), ["kind", "'rs'"]),
    (dict(bits=4, num_classes=17), ["bits=4", "classes=17"]),
])
def test_bad_input_names_the_values(kwargs, words):
    with pytest.raises(ValueError) as err:
        generate_centers(**kwargs, cache=False)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_bch_names_its_largest_length(monkeypatch):
    # GF(2^16) is the largest field with a default primitive polynomial (Matlab's)
    with pytest.raises(ValueError, match="bch centers need bits <= 65536, got bits=70000, classes=10"):
        bch_centers(70000, 10)
    # generate_centers takes codes of at most MAX_BITS (4096), checked before any work (issue 60, item 9)
    with pytest.raises(ValueError, match="^bits must be an integer from 1 to 4096, got 70000$"):
        generate_centers(70000, 10, kind="bch", cache=False)
    # the widest codes are taken: a few random draws say so (the default 1,000 took 8 s at 4,096 bits)
    monkeypatch.setattr(_simple, "_RANDOM_MAX_DRAWS", 3)
    assert generate_centers(4096, 2, kind="random", cache=False).shape == (2, 4096)
    assert generate_centers(2048, 3, kind="random", cache=False).shape == (3, 2048)


def test_report_rejects_bad_shape():
    with pytest.raises(ValueError, match="shape"):
        center_report(np.ones((1, 8)))


# --- cache ---------------------------------------------------------------------------------

def _fail(*args, **kwargs):
    raise AssertionError("generator called although the set is cached")


@pytest.mark.parametrize("kind", ["random", "auto"])
def test_second_call_loads_from_disk(kind, cache_in_tmp, monkeypatch):
    first, made_by = select_centers(16, 10, kind=kind, seed=3)
    assert len(list(cache_in_tmp.glob(f"{kind}-*.npz"))) == 1
    monkeypatch.setattr(_generate, "_build", _fail)
    second, made_by_again = select_centers(16, 10, kind=kind, seed=3)
    assert np.array_equal(first, second) and made_by == made_by_again
    with pytest.raises(AssertionError):  # another key is not cached
        select_centers(16, 10, kind=kind, seed=4)


def test_corrupt_or_wrong_cache_file_is_regenerated(cache_in_tmp):
    good = generate_centers(16, 10, kind="random")
    (path,) = cache_in_tmp.glob("random-*.npz")
    path.write_bytes(b"not an npz file")
    assert np.array_equal(generate_centers(16, 10, kind="random"), good)
    np.savez(path, centers=np.zeros((10, 16), dtype=np.int8), kind=np.array("random"))
    assert np.array_equal(generate_centers(16, 10, kind="random"), good)
    np.savez(path, centers=good[:, :8], kind=np.array("random"))
    assert np.array_equal(generate_centers(16, 10, kind="random"), good)
    with np.load(path, allow_pickle=False) as data:  # rewritten with a valid set
        assert np.array_equal(data["centers"], good)


def test_a_damaged_center_cache_is_named_and_regenerated(tmp_path, monkeypatch):
    from lbhash.centers import generate_centers
    from lbhash.centers._cache import cache_file

    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    fresh = generate_centers(16, 4, kind="hadamard", seed=0)
    path = cache_file("hadamard", 16, 4, 0)
    path.write_bytes(path.read_bytes()[:100])
    result = cli("centers", "--bits", "16", "--classes", "4", "--kind", "hadamard", "--out", tmp_path / "c.npy")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "damaged center cache" in line]
    assert len(warnings) == 1 and str(path) in warnings[0], result.output
    assert np.array_equal(np.load(tmp_path / "c.npy"), fresh)
    assert np.array_equal(_io.load_npz(path)["centers"], fresh)  # written again, whole


def test_no_cache_writes_nothing(cache_in_tmp):
    generate_centers(16, 10, kind="random", cache=False)
    assert not cache_in_tmp.exists() or not any(cache_in_tmp.iterdir())


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a" / "centers"
    monkeypatch.delenv("LBHASH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "lbhash" / "centers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "lbhash" / "centers"


# --- command line --------------------------------------------------------------------------

def run(*args):
    group = LbhashGroup()
    group.add_command(centers_command)
    return CliRunner().invoke(group, ["centers", *args])


def test_cli_prints_report_and_writes_npy(tmp_path):
    out = tmp_path / "sub" / "c.npy"
    result = run("--bits", "16", "--classes", "10", "--kind", "hadamard", "--canonical", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "kind: hadamard" in result.output
    assert "min pairwise distance: 8" in result.output
    assert "Plotkin bound on the min distance: 8" in result.output
    saved = np.load(out, allow_pickle=False)
    assert saved.dtype == np.int8
    assert np.array_equal(saved, scipy.linalg.hadamard(16)[:10])


def test_cli_auto_names_the_winner(cache_in_tmp):
    result = run("--bits", "16", "--classes", "100", "--no-cache")
    assert result.exit_code == 0, result.output
    assert "kind: bch (chosen by auto)" in result.output
    assert "min pairwise distance: 6" in result.output
    assert not cache_in_tmp.exists() or not any(cache_in_tmp.iterdir())


@pytest.mark.parametrize("args, words", [
    (["--bits", "48", "--classes", "100", "--kind", "hadamard"], ["bits=48", "classes=100"]),
    (["--bits", "x", "--classes", "10"], ["--bits", "'x'"]),
    (["--bits", "16", "--classes", "1"], ["classes", "1"]),
    (["--bits", "16", "--classes", "10", "--kind", "nope"], ["kind", "'nope'"]),
])
def test_cli_bad_input_exits_2_with_one_line(args, words):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]


def test_cli_help_lists_every_kind():
    result = run("--help")
    assert result.exit_code == 0 and "Usage:" in result.output
    for kind in CENTER_KINDS:
        assert kind in result.output
