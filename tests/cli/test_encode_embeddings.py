"""`lbhash encode --embeddings`: each item's embedding from the forward pass that makes its code,
kept by `lbhash index build` and `index add` from the codes file, as a build from the run keeps them."""

import numpy as np
from sklearn.datasets import load_digits

from helpers import cli
from lbhash.index import CodeIndex
from lbhash.index.rescore import unit_rows


def one_line(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and all(f in lines[0] for f in fragments), result.output


def test_an_encoded_file_builds_the_index_the_run_builds(tmp_path, runs):
    run = runs.path("csq")  # CSQ on digits' feature rows, only read
    encoded = tmp_path / "db.npz"
    assert cli("encode", run, "--part", "database", "--embeddings", "--real", "--out", encoded,
               "--no-progress").exit_code == 0
    with np.load(encoded) as f:
        codes, ids, real, emb = f["codes"], f["ids"], f["real"], f["embeddings"]
    # a feature run's embedding is its input row (digits need no input contract), from the same pass as the code
    np.testing.assert_array_equal(emb, load_digits().data[ids].astype(np.float32))
    np.testing.assert_array_equal(np.packbits(real >= 0, axis=1, bitorder="little"), codes)
    from_file, from_run = tmp_path / "file-ix", tmp_path / "run-ix"
    assert cli("index", "build", encoded, "--out", from_file).exit_code == 0
    assert cli("index", "build", run, "--part", "database", "--out", from_run).exit_code == 0
    a, b = CodeIndex.load(from_file), CodeIndex.load(from_run)
    np.testing.assert_array_equal(a.ids(), b.ids())
    np.testing.assert_array_equal(a.get_embeddings(ids), b.get_embeddings(ids))
    np.testing.assert_array_equal(a.get_embeddings(ids), unit_rows(emb))
    bare = cli("index", "build", encoded, "--out", tmp_path / "bare", "--no-embeddings")
    assert bare.exit_code == 0 and CodeIndex.load(tmp_path / "bare").embedding_dim is None


def test_index_add_takes_the_embeddings_of_the_file_and_refuses_a_file_without(tmp_path, runs):
    run = runs.path("csq")
    first, second, plain = tmp_path / "q.npz", tmp_path / "db.npz", tmp_path / "plain.npz"
    for part, out, extra in (("query", first, ["--embeddings"]), ("database", second, ["--embeddings"]),
                             ("database", plain, [])):
        assert cli("encode", run, "--part", part, *extra, "--out", out, "--no-progress").exit_code == 0
    ix = tmp_path / "ix"
    assert cli("index", "build", first, "--out", ix).exit_code == 0
    one_line(cli("index", "add", ix, plain), str(ix), "64-dimensional embedding", str(plain),
             "lbhash encode --embeddings")
    assert CodeIndex.load(ix).ntotal == 300  # nothing added
    assert cli("index", "add", ix, second).exit_code == 0
    index = CodeIndex.load(ix)
    with np.load(second) as f:
        ids, emb = f["ids"], f["embeddings"]
    assert index.ntotal == 300 + len(ids)
    np.testing.assert_array_equal(index.get_embeddings(ids), unit_rows(emb))


def test_a_codes_file_with_bad_embeddings_is_refused_in_one_line(tmp_path):
    codes = np.zeros((3, 2), np.uint8)
    for name, emb, words in (("rows.npz", np.ones((2, 4), np.float32), "'embeddings' must have 3 rows"),
                             ("nan.npz", np.array([[1.0, np.nan]] * 3), "non-finite"),
                             ("ints.npz", np.ones((3, 4), np.int64), "must be finite floats")):
        np.savez(tmp_path / name, codes=codes, bits=np.int64(16), embeddings=emb)
        one_line(cli("index", "build", tmp_path / name, "--out", tmp_path / f"{name}-ix"), str(tmp_path / name), words)
        assert not (tmp_path / f"{name}-ix").exists()
