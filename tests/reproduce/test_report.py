import csv
import json
import re
import shutil
import statistics

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from scipy import stats as sps

from lbhash.cli.common import LbhashGroup
from lbhash.cli.reproduce import report
from lbhash.reproduce import paper
from lbhash.reproduce.report import SECTIONS, write_report
from lbhash.reproduce.stats import (confidence_band, group_mean, linear_fit, mean_std, spearman,
                                    tsne_embedding)
from lbhash.reproduce.tables import load_tables
from report_fixture import INF_RUN, WORSE_CELL, write_fixture

PNG = b"\x89PNG\r\n\x1a\n"
OPTIONAL = ("grid.csv", "curves.csv", "epochs.csv", "codes_sample.npz", "timing.csv",
            "centers.csv", "bound.csv", "toy.json", "toy_probs.npz", "study.csv", "study_epochs.csv",
            "baselines.csv")


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    return write_fixture(tmp_path_factory.mktemp("tables"))


@pytest.fixture(scope="module")
def built(fixture_dir):
    path = write_report(fixture_dir)
    return path, path.read_text()


def _copy(src, dst, drop=()):
    """A copy of the tables only (no report or figures), without the files in drop."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("figures", "*.md"))
    for name in drop:
        (dst / name).unlink()
    return dst


def _section(text, key):
    """The text of one section, up to the next '## ' header."""
    start = text.index(f"## {SECTIONS[key]}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _md_rows(block):
    """Rows of the first markdown table in block, as {first cell: other cells}."""
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = lines[first:end]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in r.strip("|").split("|")]
                                              for r in rows[1:])}


# ---- the full report ----

def test_report_has_every_section_and_valid_pngs(built):
    path, text = built
    for title in SECTIONS.values():
        assert f"## {title}\n" in text, title
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) == 10
    total = 0
    for rel in images:
        png = path.parent / rel
        assert png.read_bytes()[:8] == PNG, rel
        with Image.open(png) as im:
            im.verify()
        with Image.open(png) as im:
            assert im.format == "PNG" and min(im.size) >= 300
        total += png.stat().st_size
    assert total < 3_000_000  # a few MB at most for the whole report
    assert "nothing was retrained" in text


def test_grid_cells_equal_independent_means(built, fixture_dir):
    _, text = built
    rows = list(csv.DictReader(open(fixture_dir / "grid.csv")))
    table = _md_rows(_section(text, "grid"))
    label = {"hashnet": "HashNet", "greedyhash": "GreedyHash", "csq": "CSQ"}
    checked = 0
    for method, name in label.items():
        for suffix in ("", "_D"):
            for col, bits in enumerate((16, 32)):
                vals = [100 * float(r["map"]) for r in rows if r["variant"] == method + suffix
                        and int(r["bits"]) == bits]
                mean, std = (float(v) for v in table[name + suffix][col].split(" ± "))
                assert mean == pytest.approx(statistics.mean(vals), abs=0.0051)
                assert std == pytest.approx(statistics.stdev(vals), abs=0.0051)
                checked += 1
        for col, bits in enumerate((16, 32)):
            means = [statistics.mean(100 * float(r["map"]) for r in rows
                                     if r["variant"] == method + s and int(r["bits"]) == bits)
                     for s in ("", "_D")]
            delta = table[f"Δ {name}_D − {name}"][col]
            assert float(delta.split()[0]) == pytest.approx(means[1] - means[0], abs=0.0051)
            assert delta.endswith("▼" if (method, bits) == WORSE_CELL else "▲")
    assert checked == 12
    # the paper's CIFAR-10 values sit beside ours, labelled as such
    assert "Paper, CIFAR-10 columns of Table 2" in text and "ResNet-50" in text
    assert "| CSQ_D | 88.7 | 89.2 | 90.3 |" in text


def test_setup_lists_each_experiment_of_an_old_meta_json(built):
    # the fixture's meta.json is of the first format: one data/protocol/seeds/epochs, two commands
    rows = _md_rows(_section(built[1], "setup"))
    assert rows["grid"] == ["cifar10-features", "paper", "0, 1", "6"]
    assert rows["toy"] == ["—", "—", "—", "—"]  # the toy takes no data; no spec recorded its seed


def test_baselines_cells_equal_independent_means(built, fixture_dir):
    block = _section(built[1], "baselines")
    rows = list(csv.DictReader(open(fixture_dir / "baselines.csv")))
    for bits in (16, 32):
        part = block[block.index(f"### {bits} bits"):]
        table = _md_rows(part)
        for variant in ("lsh", "csq", "csq_D"):
            vals = [100 * float(r["map_all"]) for r in rows if r["variant"] == variant and int(r["bits"]) == bits
                    and r["classes"] == "unseen" and r["ranking"] == "asymmetric"]
            # columns: seen sym, asym, @1000 sym, asym, P@H<=2, then unseen mAP@all sym, asym
            mean, std = (float(v) for v in table[variant][6].split(" ± "))
            assert mean == pytest.approx(statistics.mean(vals), abs=0.051)
            assert std == pytest.approx(statistics.stdev(vals), abs=0.051)
    assert "unseen:2:paper" in block and "figures/baselines.png" in block


def test_ratio_section_counts_infinite_runs(built, fixture_dir):
    _, text = built
    block = _section(text, "ratio")
    assert "1 run(s) with an infinite ratio" in block
    rows = [r for r in csv.DictReader(open(fixture_dir / "grid.csv")) if r["run_id"] != INF_RUN]
    x = np.array([float(r["lb_ratio"]) for r in rows])
    y = np.array([100 * float(r["map"]) for r in rows])
    ref = sps.linregress(x, y)
    assert f"slope {ref.slope:.3f}" in block and f"Pearson r = {ref.rvalue:.3f}" in block


def test_agreement_is_derived_from_the_numbers(built):
    _, text = built
    block = _section(text, "agreement")
    # the fixture makes HashNet_D worse at 32 bits while the paper has it better
    assert "✘ HashNet_D" in block
    assert re.search(r"32 bits -\d+\.\d\d here vs \+0\.8 paper \(sign differs\)", block)
    assert "✔ CSQ_D" in block
    assert "same sign in 5 of 6 cells" in block
    assert "surrogate < naive at 2 of 2 N" in block
    # timing agrees when our overhead over BCE stays within the paper's "no significant" +10%
    assert re.search(r"✔ 16 bits: ours vs BCE \+5\.9% time per epoch", block)


@pytest.mark.slow  # renders a whole report (3 s); test_report_has_every_section_and_valid_pngs renders one fast
def test_timing_overhead_beyond_ten_percent_disagrees(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d")
    def slower(rows):
        variant, ratio = rows[0].index("variant"), rows[0].index("ratio")
        for row in rows[1:]:
            if row[variant] == "ours":
                row[ratio] = "1.5"
    _edit_csv(d / "timing.csv", slower)
    block = _section(write_report(d, tsne_points=60).read_text(), "agreement")
    assert re.search(r"✘ 16 bits: ours vs BCE \+50\.0% time per epoch", block)


@pytest.mark.slow  # renders a whole report (3 s) elsewhere
def test_report_elsewhere_names_its_tables(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "tables")
    out = tmp_path / "docs" / "report.md"
    text = write_report(d, out=out, tsne_points=60).read_text()
    assert f"result tables in `{d.as_posix()}`" in text
    assert f"`lbhash report {d.as_posix()} --out {out.as_posix()}`" in text
    assert (tmp_path / "docs" / "figures" / "tsne.png").is_file()


# ---- missing and malformed tables ----

def test_only_meta_gives_setup_only(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d", OPTIONAL)
    text = write_report(d).read_text()
    assert f"## {SECTIONS['setup']}" in text
    assert all(f"## {SECTIONS[k]}" not in text for k in SECTIONS if k != "setup")
    assert not (d / "figures").exists()


def test_without_grid_rows_the_grid_sections_are_omitted(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d", ("toy_probs.npz",))
    _edit_csv(d / "grid.csv", lambda rows: rows.__delitem__(slice(1, None)))  # header only
    text = write_report(d, tsne_points=60).read_text()
    assert "grid.csv has no rows" in text
    for key in ("grid", "curves", "ratio", "convergence"):
        assert f"## {SECTIONS[key]}" not in text
    for key in ("tsne", "bound", "timing", "centers", "toy", "agreement"):
        assert f"## {SECTIONS[key]}" in text
    assert "toy_probs.png" not in text and (d / "figures" / "tsne.png").is_file()


def _edit_csv(path, fn):
    rows = list(csv.reader(open(path)))
    fn(rows)
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


@pytest.mark.parametrize("name, edit, fragments", [
    ("grid.csv", lambda r: [row.pop(5) for row in r], ["grid.csv", "missing column(s) seed"]),
    ("grid.csv", lambda r: r[3].__setitem__(r[0].index("map"), "abc"), ["grid.csv", "line 4", "'map'"]),
    ("grid.csv", lambda r: r[2].__setitem__(r[0].index("map"), "1.5"), ["grid.csv", "'map'"]),
    ("grid.csv", lambda r: r[2].__setitem__(r[0].index("lbhash"), "maybe"), ["grid.csv", "'lbhash'"]),
    ("grid.csv", lambda r: r.append(r[1]), ["grid.csv", "duplicate run_id"]),
    ("curves.csv", lambda r: r[1].__setitem__(1, "roc"), ["curves.csv", "'curve'"]),
    ("timing.csv", lambda r: r[1].__setitem__(0, "adam"), ["timing.csv", "'variant'"]),
    ("bound.csv", lambda r: r[1].__setitem__(r[0].index("lb_ratio"), "-1"), ["bound.csv", "lb_ratio"]),
    ("centers.csv", lambda r: r[1].pop(), ["centers.csv", "line 2"]),
    ("epochs.csv", lambda r: r[1].__setitem__(1, "2.5"), ["epochs.csv", "'epoch'"]),
    ("baselines.csv", lambda r: r[1].__setitem__(r[0].index("classes"), "both"), ["baselines.csv", "'classes'"]),
])
def test_malformed_csv_is_one_line_error(fixture_dir, tmp_path, name, edit, fragments):
    d = _copy(fixture_dir, tmp_path / "d")
    _edit_csv(d / name, edit)
    with pytest.raises(ValueError) as err:
        write_report(d)
    assert "\n" not in str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_malformed_json_and_npz_name_the_file(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d")
    meta = json.loads((d / "meta.json").read_text())
    del meta["software"]
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"meta\.json: missing key\(s\) software"):
        load_tables(d)
    d = _copy(fixture_dir, tmp_path / "e")
    (d / "toy.json").write_text('{"8": {"kl_real_vs": {"100": {"naive": "lots"}}}}')
    with pytest.raises(ValueError, match=r"toy\.json.*lots"):
        load_tables(d)
    d = _copy(fixture_dir, tmp_path / "f")
    arrays = dict(np.load(d / "codes_sample.npz"))
    arrays.pop(next(k for k in arrays if k.endswith("__labels")))
    np.savez(d / "codes_sample.npz", **arrays)
    with pytest.raises(ValueError, match=r"codes_sample\.npz.*no matching"):
        load_tables(d)


def test_unreadable_csv_names_the_file(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d")
    (d / "timing.csv").write_bytes(b"variant,bits\n\xff\xfe,16\n")
    with pytest.raises(ValueError, match=r"timing\.csv: not a readable CSV file"):
        load_tables(d)


def test_bits_must_be_in_grid(fixture_dir):
    with pytest.raises(ValueError, match="bits=64 is not in grid.csv"):
        write_report(fixture_dir, out=fixture_dir / "never.md", bits=64)


# ---- statistics ----

X = np.array([0.61, 0.72, 0.55, 0.80, 0.93, 0.67, 0.88, 0.74, 0.59, 0.97, 0.70, 0.83])
Y = np.array([52.1, 60.3, 49.8, 66.0, 75.2, 55.9, 70.1, 63.4, 50.2, 79.9, 58.8, 69.5])


def test_linear_fit_matches_linregress_and_statsmodels():
    fit, ref = linear_fit(X, Y), sps.linregress(X, Y)
    assert fit.slope == pytest.approx(ref.slope) and fit.intercept == pytest.approx(ref.intercept)
    assert fit.slope_se == pytest.approx(ref.stderr)
    assert fit.intercept_se == pytest.approx(ref.intercept_stderr)
    assert fit.r == pytest.approx(ref.rvalue) and fit.p_value == pytest.approx(ref.pvalue)
    assert fit.r2 == pytest.approx(ref.rvalue ** 2) and fit.n == 12
    # statsmodels 0.15 OLS(y, add_constant(x)).fit().conf_int(0.05), computed once
    assert fit.slope_ci == pytest.approx((66.42717713, 78.0706124))
    assert fit.intercept_ci == pytest.approx((4.04727583, 12.89979685))


def test_confidence_band_textbook_and_statsmodels():
    fit = linear_fit(X, Y)
    grid = np.array([0.5, 0.75, 1.0])
    lo, hi = confidence_band(fit, grid)
    # textbook: yhat -/+ t * s * sqrt(1/n + (x - xbar)^2 / Sxx)
    n, xbar = len(X), X.mean()
    b1 = np.sum((X - xbar) * (Y - Y.mean())) / np.sum((X - xbar) ** 2)
    b0 = Y.mean() - b1 * xbar
    s = np.sqrt(np.sum((Y - b0 - b1 * X) ** 2) / (n - 2))
    half = sps.t.ppf(0.975, n - 2) * s * np.sqrt(1 / n + (grid - xbar) ** 2 / np.sum((X - xbar) ** 2))
    np.testing.assert_allclose(lo, b0 + b1 * grid - half)
    np.testing.assert_allclose(hi, b0 + b1 * grid + half)
    # statsmodels get_prediction(...).conf_int(alpha=0.05), computed once
    ref = np.array([[42.96279944, 46.233168], [61.90543944, 63.41497539],
                    [79.07863328, 82.36622893]])
    np.testing.assert_allclose(np.stack([lo, hi], 1), ref, rtol=1e-8)
    wide = confidence_band(fit, grid, level=0.99)
    assert (wide[0] < lo).all() and (wide[1] > hi).all()


def test_spearman_against_ranks():
    x = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 7.0])
    y = np.array([1.0, 2.0, 2.0, 3.0, 6.0, 5.0, 5.0])
    rho = spearman(x, y)
    rx, ry = sps.rankdata(x), sps.rankdata(y)  # Pearson correlation of average ranks
    assert rho.rho == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert rho.p_value == pytest.approx(sps.spearmanr(x, y).pvalue) and rho.n == 7
    assert np.isnan(spearman([1, 2, 3], [4, 4, 4]).rho)


def test_stats_reject_bad_input():
    with pytest.raises(ValueError, match="at least 3"):
        linear_fit([1, 2], [1, 2])
    with pytest.raises(ValueError, match="distinct x"):
        linear_fit([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        linear_fit([1, 2, np.inf], [1, 2, 3])


def test_mean_std_and_group_mean():
    assert mean_std([1.0, np.nan, 3.0]) == (2.0, pytest.approx(np.sqrt(2)), 2)
    x, y = group_mean(np.array([2, 1, 2, 1]), np.array([4.0, np.nan, 6.0, np.nan]))
    assert x.tolist() == [1, 2] and np.isnan(y[0]) and y[1] == 5.0


def test_tsne_embedding_small_and_multi_hot():
    rng = np.random.default_rng(0)
    codes = rng.choice(np.array([-1, 1], dtype=np.int8), (40, 16))
    multi = np.zeros((40, 3), dtype=np.uint8)
    multi[np.arange(40), np.arange(40) % 3] = 1
    multi[0] = 0
    xy, classes = tsne_embedding(codes, multi, max_points=30)
    assert xy.shape == (30, 2) and set(classes) <= {-1, 0, 1, 2}


def test_paper_numbers():
    assert len(paper.TABLE2_CIFAR10) == 12
    assert all(sorted(v) == [16, 32, 64] for v in paper.TABLE2_CIFAR10.values())
    assert paper.TOY_KL[8]["surrogate"] == 0.008 and paper.TOY_KL[16]["naive"] == 0.4965
    assert paper.TABLE5_CIFAR10["hadamard"][16] == (88.7, 8)


# ---- command line ----

def _cli(*args):
    group = LbhashGroup()
    group.add_command(report)
    return CliRunner().invoke(group, ["report", *map(str, args)])


def test_cli_writes_report_and_prints_path(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "d", ("curves.csv", "codes_sample.npz", "toy_probs.npz",
                                            "bound.csv", "epochs.csv"))
    result = _cli(d, "--bits", "16")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(d / "report.md") and (d / "report.md").is_file()


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_cli_bad_directory_is_exit_2_one_line(tmp_path, make):
    result = _cli(make(tmp_path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(tmp_path) in lines[0]
