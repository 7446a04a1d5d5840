"""Asymmetric ranking against a brute-force reference written here, tie order included."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from lbhash.cli import main
from lbhash.codes_file import save_codes_file
from lbhash.errors import InputError
from lbhash.evaluate import asymmetric_map, evaluate_codes, mean_average_precision, rank_asymmetric


def reference_ranking(real, db):
    """Score of every pair in Python floats, in the documented order (inside each byte of the
    code from its lowest bit up, then the byte sums from byte 0 up), then sorted by (-score,
    database index)."""
    out = []
    for row in real:
        scores = []
        for code in db:
            score = 0.0
            for start in range(0, len(code), 8):
                part = 0.0
                for r, b in zip(row[start:start + 8].tolist(), code[start:start + 8].tolist()):
                    part += float(r) * b
                score += part
            scores.append(score)
        out.append(sorted(range(len(db)), key=lambda k: (-scores[k], k)))
    return np.array(out)


def reference_metrics(ranking, ql, dl, topk, ks):
    aps, precision, recall, with_rel = [], np.zeros(len(ks)), np.zeros(len(ks)), 0
    for order, label in zip(ranking, ql):
        relevant = [int(dl[k] == label) for k in order]
        hits, total = 0, 0.0
        for rank, rel in enumerate(relevant[:topk], 1):
            if rel:
                hits += 1
                total += hits / rank
        aps.append(total / hits if hits else 0.0)
        all_rel = sum(relevant)
        for i, k in enumerate(ks):
            k = min(k, len(order))
            precision[i] += sum(relevant[:k]) / k
            if all_rel:
                recall[i] += sum(relevant[:k]) / all_rel
        with_rel += all_rel > 0
    return np.mean(aps), precision / len(ranking), recall / with_rel


@pytest.fixture(params=[8, 20])
def tied(request):
    """Few distinct values and repeated database codes: most scores are tied. 20 bits: three
    bytes, the last one padded."""
    rng = np.random.default_rng(3)
    bits = request.param
    db = rng.choice([-1, 1], size=(12, bits))[rng.integers(0, 12, 60)]
    real = rng.choice([-1.0, -0.5, 0.25, 0.5, 1.0], size=(15, bits))
    ql, dl = rng.integers(0, 3, 15), rng.integers(0, 3, 60)
    return real, db, ql, dl


@pytest.mark.parametrize("kind", ["tied", "random"])
@pytest.mark.parametrize("topk", [None, 7])
def test_ranking_and_metrics_match_the_brute_force_reference(tied, kind, topk):
    real, db, ql, dl = tied
    if kind == "random":
        real = np.random.default_rng(5).normal(size=real.shape).astype(np.float32)
    ranking = reference_ranking(real, db)
    np.testing.assert_array_equal(rank_asymmetric(real, db), ranking)
    np.testing.assert_array_equal(rank_asymmetric(real, db, topk=5), ranking[:, :5])
    query_codes = np.where(real >= 0, 1, -1)
    ks = [1, 5, 10, 100]
    metrics = evaluate_codes(query_codes, db, ql, dl, topk=topk, ks=ks, query_real=real)["asymmetric"]
    ap, precision, recall = reference_metrics(ranking, ql, dl, topk or len(db), ks)
    assert metrics["map"] == pytest.approx(ap, abs=1e-12)
    np.testing.assert_allclose(metrics["precision_at_k"]["precision"], precision, atol=1e-12)
    np.testing.assert_allclose(metrics["precision_at_k"]["recall"], recall, atol=1e-12)
    assert asymmetric_map(real, db, ql, dl, topk=topk) == pytest.approx(ap, abs=1e-12)


def test_the_query_code_as_its_real_output_gives_the_hamming_ranking(tied):
    """score = bits - 2 * Hamming distance: the same order, ties by index, the same mAP."""
    _, db, ql, dl = tied
    q = np.random.default_rng(8).choice([-1, 1], size=(20, db.shape[1]))
    ql = np.random.default_rng(9).integers(0, 3, 20)
    sym = mean_average_precision(q, db, ql, dl)
    assert asymmetric_map(q.astype(float), db, ql, dl) == pytest.approx(sym, abs=1e-12)
    distances = (q[:, None, :] != db[None]).sum(-1)
    expected = np.array([sorted(range(len(db)), key=lambda k: (d[k], k)) for d in distances])
    np.testing.assert_array_equal(rank_asymmetric(q, db), expected)


def test_multi_label_relevance_and_bad_input(tied):
    real, db, _, _ = tied
    rng = np.random.default_rng(1)
    ql, dl = rng.random((15, 4)) < 0.4, rng.random((60, 4)) < 0.4
    ranking = reference_ranking(real, db)
    got = evaluate_codes(np.where(real >= 0, 1, -1), db, ql, dl, query_real=real)["asymmetric"]["map"]
    aps = []
    for order, labels in zip(ranking, ql):
        rel = [bool((dl[k] & labels).any()) for k in order]
        hits = np.cumsum(rel)
        aps.append(sum(hits[i] / (i + 1) for i in range(len(rel)) if rel[i]) / hits[-1] if hits[-1] else 0.0)
    assert got == pytest.approx(np.mean(aps), abs=1e-12)
    q = np.where(real >= 0, 1, -1)
    with pytest.raises(InputError, match=rf"query_real must have shape \(15, {db.shape[1]}\)"):
        evaluate_codes(q, db, ql, dl, query_real=real[:, :4])
    bad = real.copy()
    bad[2, 1] = np.nan
    with pytest.raises(InputError, match="query_real holds NaN or inf in row 2"):
        evaluate_codes(q, db, ql, dl, query_real=bad)


def test_evaluate_command_ranks_asymmetrically_when_asked(tied, tmp_path):
    real, db, ql, dl = tied
    path = tmp_path / "codes.npz"
    save_codes_file(path, np.where(real >= 0, 1, -1), db, ql, dl, query_real=real)
    out = str(tmp_path / "metrics.json")
    result = CliRunner().invoke(main, ["evaluate", str(path), "--asymmetric", "tanh", "--out", out])
    assert result.exit_code == 0, result.output
    assert "(asymmetric)" in result.output
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["asymmetric"]["map"] == pytest.approx(asymmetric_map(np.tanh(real), db, ql, dl))
    plain = tmp_path / "plain.npz"
    save_codes_file(plain, np.where(real >= 0, 1, -1), db, ql, dl)
    result = CliRunner().invoke(main, ["evaluate", str(plain), "--asymmetric", "raw"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "needs the queries' real-valued outputs (the query part's `real`" in result.output


def test_a_run_saves_the_queries_real_outputs_and_reports_asymmetric_metrics(runs):
    import torch

    from lbhash.codes import unpack
    from lbhash.codes_file import load_codes_file
    from lbhash.data import load_data, load_split
    from lbhash.runs import HashEncoder

    run = runs.path("itq")  # ITQ at 16 bits on digits; only read
    metrics = json.loads((run / "metrics.json").read_text())
    codes = load_codes_file(run / "codes.npz")
    real = codes["query_real"]
    # the real outputs are the model's, and their signs are the saved query codes
    split = load_split(run / "split.npz")
    model = HashEncoder.load(run).model_
    with torch.no_grad():
        u = model(torch.from_numpy(load_data("digits").x[split.query]).float()).numpy()
    np.testing.assert_allclose(real, u, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.where(real >= 0, 1, -1), unpack(codes["query_codes"], 16))
    expected = asymmetric_map(real, codes["db_codes"], codes["query_labels"], codes["db_labels"], bits=16)
    assert metrics["asymmetric"]["map"] == pytest.approx(expected, abs=1e-12)
