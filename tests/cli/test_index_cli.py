"""`lbhash index ...`, `lbhash search`: results, and bad input as one line with exit 2."""

import io
import json
import os
import re
import socket

import click
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from helpers import cli as lbhash_cli, one_line_error
from index_fakes import FakeEncoder
from index_reference import hamming, random_codes, top_k
from lbhash.cli.common import LbhashGroup
from lbhash.cli.index import index
from lbhash.cli.search import search
from lbhash.cli.serve import serve
from lbhash.index import CodeIndex
from lbhash.limits import MAX_K


@click.group(cls=LbhashGroup)
def cli():
    pass


for command in (index, search, serve):
    cli.add_command(command)


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def encoded(tmp_path, rng):
    """An `lbhash encode` output: codes, bits, ids, labels."""
    codes = random_codes(rng, 120, 32)
    ids = np.arange(1000, 1120)
    labels = rng.integers(0, 4, 120)
    path = tmp_path / "enc.npz"
    np.savez(path, codes=codes, bits=np.int64(32), ids=ids, labels=labels)
    return path, codes, ids, labels


def test_build_info_search(tmp_path, encoded):
    path, codes, ids, labels = encoded
    out = tmp_path / "ix"
    result = run("index", "build", path, "--out", out)
    assert result.exit_code == 0, result.output
    assert "indexed 120 32-bit codes (faiss flat)" in result.output
    info = json.loads(run("index", "info", out, "--json").output)
    assert info["ntotal"] == 120 and info["kind"] == "flat" and info["bytes_on_disk"] > 120 * 4
    np.save(tmp_path / "q.npy", codes[:3])
    result = run("search", out, "--codes", tmp_path / "q.npy", "-k", "4", "--json")
    assert result.exit_code == 0, result.output
    ref_d, ref_i = top_k(codes[:3], codes, ids, 4)
    got = json.loads(result.output)
    assert [r["ids"] for r in got] == ref_i.tolist() and [r["distances"] for r in got] == ref_d.tolist()
    row_of = {int(i): r for r, i in enumerate(ids)}
    assert got[0]["labels"] == [[int(labels[row_of[i]])] for i in ref_i[0]]
    text = run("search", out, "--codes", tmp_path / "q.npy", "-k", "2").output
    assert text.splitlines()[0] == "query 0 (row 0): 2 results" and f"id {ids[0]}" in text
    result = run("search", out, "--codes", tmp_path / "q.npy", "--radius", "3", "--filter-labels", "1,2", "--json")
    for q, r in enumerate(json.loads(result.output)):
        assert all(lab[0] in (1, 2) for lab in r["labels"]) and all(d <= 3 for d in r["distances"])


def test_build_from_a_run_directory_and_kinds(tmp_path, rng):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    codes = random_codes(rng, 2000, 16)
    np.savez(run_dir / "codes.npz", query_codes=codes[:5], db_codes=codes, query_labels=np.zeros(5, int),
             db_labels=rng.integers(0, 3, 2000), bits=np.int64(16), query_index=np.arange(5),
             db_index=np.arange(5, 2005))
    result = run("index", "build", run_dir, "--kind", "ivf", "--nlist", "8", "--nprobe", "8", "--out", tmp_path / "ivf")
    assert result.exit_code == 0, result.output
    loaded = CodeIndex.load(tmp_path / "ivf")
    assert loaded.kind == "ivf" and loaded.is_trained and loaded.ids()[0] == 5
    result = run("index", "build", run_dir, "--kind", "multihash", "--nhash", "2", "--out", tmp_path / "mh")
    assert result.exit_code == 0 and CodeIndex.load(tmp_path / "mh").params == {"nhash": 2, "nflip": 2}
    result = run("index", "build", run_dir, "--kind", "ivf", "--out", tmp_path / "small")
    assert result.exit_code == 0 and "once it holds 39936 codes" in result.output


def test_untrained_ivf_info_says_what_build_said(tmp_path, encoded, rng):
    path, codes, ids, _ = encoded  # 120 codes: an ivf index of nlist 4 trains at 39 x 4 = 156
    out = tmp_path / "ivf"
    built = run("index", "build", path, "--kind", "ivf", "--nlist", "4", "--nprobe", "1", "--out", out)
    assert built.exit_code == 0, built.output
    info = json.loads(run("index", "info", out, "--json").output)
    assert (info["exact"], info["trained"]) == (True, False)
    assert info["searches"].startswith("exactly until trained") and "156 codes" in info["searches"]
    assert "holds 120" in info["searches"] and info["searches"].endswith("then approximately")
    assert f"note: the ivf index searches {info['searches']}" in built.output
    text = run("index", "info", out).output
    assert "exact          True" in text and "searches       exactly until trained" in text
    # searching is exact indeed: the brute-force top k, tie order included
    np.save(tmp_path / "q.npy", codes[:5])
    got = json.loads(run("search", out, "--codes", tmp_path / "q.npy", "-k", "7", "--json").output)
    ref_d, ref_i = top_k(codes[:5], codes, ids, 7)
    assert [r["ids"] for r in got] == ref_i.tolist()
    more = tmp_path / "more.npz"
    np.savez(more, codes=random_codes(rng, 40, 32), bits=np.int64(32), ids=np.arange(5000, 5040),
             labels=np.zeros(40, int))
    assert run("index", "add", out, more).exit_code == 0  # 160 >= 156: it trains
    info = json.loads(run("index", "info", out, "--json").output)
    assert (info["exact"], info["trained"], info["searches"]) == (False, True, "approximately")


def test_remove_refuses_unknown_ids_and_changes_nothing(tmp_path, encoded):
    path, _, ids, _ = encoded
    out = tmp_path / "ix"
    run("index", "build", path, "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = run("index", "remove", out, "--ids", "1000,99999999")
    assert result.exit_code == 2 and result.output.strip() == "error: id 99999999 is not in the index"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # 1000 was not removed either
    assert CodeIndex.load(out).contains([1000]).tolist() == [True]
    result = run("index", "remove", out, "--ids", "1000")
    assert result.exit_code == 0 and result.output.strip() == f"removed 1 item from {out} (119 left)"
    result = run("index", "remove", out, "--ids", "1000")  # again: the id is gone
    assert result.exit_code == 2 and result.output.strip() == "error: id 1000 is not in the index"
    np.save(tmp_path / "ids.npy", np.arange(1001, 1011))
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in [1011, 1, 2]))
    result = run("index", "remove", out, "--ids-file", tmp_path / "ids.txt")
    assert result.exit_code == 2 and result.output.strip() == "error: id 1 is not in the index"
    assert "removed 10 items" in run("index", "remove", out, "--ids-file", tmp_path / "ids.npy").output
    assert CodeIndex.load(out).contains([1000, 1005, 1011]).tolist() == [False, False, True]


def test_add_and_remove(tmp_path, encoded, rng):
    path, codes, ids, _ = encoded
    out = tmp_path / "ix"
    run("index", "build", path, "--out", out)
    more = tmp_path / "more.npz"
    np.savez(more, codes=random_codes(rng, 3, 32), bits=np.int64(32), ids=np.array([1000, 5000, 5001]),
             labels=np.array([3, 3, 3]))
    one_line_error(run("index", "add", out, more), "id 1000 is already in the index")
    assert CodeIndex.load(out).ntotal == 120
    result = run("index", "add", out, more, "--upsert")
    assert result.exit_code == 0 and "(122 in all)" in result.output
    result = run("index", "remove", out, "--ids", "1000,5000")
    assert result.exit_code == 0 and "(120 left)" in result.output
    (tmp_path / "ids.txt").write_text("1001\n1002\n")
    assert run("index", "remove", out, "--ids-file", tmp_path / "ids.txt").exit_code == 0
    assert CodeIndex.load(out).contains([1001, 1002, 5001]).tolist() == [False, False, True]


def test_cli_writers_are_refused_while_another_writer_holds_the_index(tmp_path, encoded, rng):
    """Issue 27: one writer per index. While another process holds the writer lock (simulated
    here by this process taking it), `index add`, `index remove` and `index build --overwrite`
    stop in one line naming the index and the holder's pid, exit 2, and change nothing; once
    it is released they succeed."""
    from lbhash.index.writer_lock import lock_path, writer_lock

    path, _, _, _ = encoded
    out = tmp_path / "ix"
    run("index", "build", path, "--out", out)
    more = tmp_path / "more.npz"
    np.savez(more, codes=random_codes(rng, 2, 32), bits=np.int64(32), ids=np.array([5000, 5001]))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with writer_lock(out, "a test writer") as held:
        assert lock_path(out).read_text() == f"{os.getpid()} a test writer\n"
        for args in (("index", "add", out, more), ("index", "remove", out, "--ids", "1000"),
                     ("index", "build", path, "--out", out, "--overwrite")):
            one_line_error(run(*args), f"{out} is being changed by another process (pid {os.getpid()}, a test writer;",
                           "one writer per index")
        assert run("index", "info", out).exit_code == 0  # readers take no lock
        assert run("search", out, "--codes", more, "-k", "1").exit_code == 0
        assert held.fd is not None
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not lock_path(out).exists()  # released: the lock file is gone with it
    assert run("index", "add", out, more).exit_code == 0
    assert run("index", "remove", out, "--ids", "1000").exit_code == 0
    assert CodeIndex.load(out).contains([1000, 5000]).tolist() == [False, True]
    assert run("index", "build", path, "--out", out, "--overwrite").exit_code == 0
    assert CodeIndex.load(out).ntotal == 120 and sorted(os.listdir(tmp_path)) == ["enc.npz", "ix", "more.npz"]


def test_search_features_and_images_with_a_run(tmp_path, rng, monkeypatch):
    from lbhash.indexes import index_inputs

    encoder = FakeEncoder(dim=12, bits=32)
    x = rng.standard_normal((50, 12))
    CodeIndex(32).save(tmp_path / "empty")
    ix = CodeIndex(32)
    ix.add(encoder.encode(x))
    ix.save(tmp_path / "ix")
    monkeypatch.setattr(index_inputs, "load_encoder", lambda run_dir: encoder)
    np.save(tmp_path / "f.npy", x[:2])
    result = run("search", tmp_path / "ix", "--features", tmp_path / "f.npy", "--run", tmp_path, "-k", "1", "--json")
    assert [r["distances"][0] for r in json.loads(result.output)] == [0, 0]
    image_encoder = FakeEncoder(bits=32, input_kind="images")
    monkeypatch.setattr(index_inputs, "load_encoder", lambda run_dir: image_encoder)
    (tmp_path / "imgs").mkdir()
    for name in ("a", "b"):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).save(buf, format="PNG")
        (tmp_path / "imgs" / f"{name}.png").write_bytes(buf.getvalue())
    result = run("search", tmp_path / "ix", "--images", tmp_path / "imgs", "--run", tmp_path, "--json")
    assert result.exit_code == 0 and [r["name"].endswith(".png") for r in json.loads(result.output)] == [True, True]
    (tmp_path / "imgs" / "c.png").write_bytes(b"broken")
    one_line_error(run("search", tmp_path / "ix", "--images", tmp_path / "imgs", "--run", tmp_path),
                   "c.png: cannot decode image")


def test_search_rescores_by_the_embeddings_by_default(tmp_path, rng, monkeypatch):
    from lbhash.indexes import index_inputs

    encoder = FakeEncoder(dim=12, bits=32)
    db = rng.standard_normal((80, 12))
    ix = CodeIndex(32)
    ix.add(encoder.encode(db), embeddings=db)
    ix.save(tmp_path / "ix")
    monkeypatch.setattr(index_inputs, "load_encoder", lambda run_dir: encoder)
    queries = rng.standard_normal((3, 12))
    np.save(tmp_path / "q.npy", queries)
    cos = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (db / np.linalg.norm(db, axis=1, keepdims=True)).T
    for extra in ([], ["--rescore-factor", "100"]):  # 16 x 5 = 80 candidates: the whole index either way
        result = run("search", tmp_path / "ix", "--features", tmp_path / "q.npy", "--run", tmp_path, "-k", "5",
                     "--json", *extra)
        assert result.exit_code == 0, result.output
        distances = hamming(encoder.encode(queries), encoder.encode(db))
        for row, c, d in zip(json.loads(result.output), cos, distances):
            expected = sorted(range(80), key=lambda i: -c[i])[:5]  # the float cosine ranking (no near ties here)
            assert row["ids"] == expected and row["distances"] == d[expected].tolist()
            # looks_like 1 without instance codes: the cosine, cubed (docs/search.md, "Ranking")
            assert np.cbrt(row["scores"]) == pytest.approx(c[expected].tolist(), abs=2e-3)
            assert row["same"] == [False] * 5 and "instance_distances" not in row
    plain = run("search", tmp_path / "ix", "--features", tmp_path / "q.npy", "--run", tmp_path, "-k", "5",
                "--json", "--no-rescore")
    assert [r["ids"] for r in json.loads(plain.output)] == ix.search(encoder.encode(queries), 5).ids.tolist()
    assert all("scores" not in r for r in json.loads(plain.output))
    text = run("search", tmp_path / "ix", "--features", tmp_path / "q.npy", "--run", tmp_path, "-k", "2").output
    assert re.search(r"id \d+ +score -?0\.\d{4} +distance \d+ +labels", text), text
    assert "hits come by score, not by Hamming distance" in text
    one_line_error(run("search", tmp_path / "ix", "--codes", tmp_path / "q.npy", "--rescore-factor", "2"),
                   "--rescore-factor needs --features or --images")
    one_line_error(run("search", tmp_path / "ix", "--features", tmp_path / "q.npy", "--run", tmp_path,
                       "--rescore-factor", "0"), "--rescore-factor must be a positive integer, got 0")
    one_line_error(run("search", tmp_path / "ix", "--features", tmp_path / "q.npy", "--run", tmp_path,
                       "--rescore-factor", "2", "--no-rescore"), "give --rescore-factor or --no-rescore, not both")
    ix = CodeIndex(32)
    ix.add(encoder.encode(db))
    ix.save(tmp_path / "plain")
    one_line_error(run("search", tmp_path / "plain", "--features", tmp_path / "q.npy", "--run", tmp_path,
                       "--rescore-factor", "2"), "--rescore-factor, --looks-like: the index keeps neither embeddings "
                                                 "nor instance codes")
    one_line_error(run("search", tmp_path / "plain", "--features", tmp_path / "q.npy", "--run", tmp_path,
                       "--looks-like", "0.5"), "the index keeps neither embeddings nor instance codes")
    one_line_error(run("search", tmp_path / "ix", "--codes", tmp_path / "q.npy", "--looks-like", "0.5"),
                   "--looks-like needs --features or --images")


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, encoded, rng):
    path, codes, _, _ = encoded
    out = tmp_path / "ix"
    run("index", "build", path, "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    one_line_error(run("index", "build", tmp_path / "none.npz", "--out", tmp_path / "x"), "none.npz: no such file")
    one_line_error(run("index", "build", path, "--out", out), "exists: choose another --out to keep it, or pass --overwrite")
    one_line_error(run("index", "build", path, "--nlist", "4", "--out", tmp_path / "y"),
                   "unknown parameter 'nlist' for a flat index")
    one_line_error(run("index", "build", path, "--part", "all", "--out", tmp_path / "y"), "--part applies to a run")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, codes=random_codes(rng, 2, 16), bits=np.int64(16))
    one_line_error(run("index", "add", out, wrong), "holds 16-bit codes", "32-bit")
    one_line_error(run("index", "remove", out, "--ids", "1,x"), "--ids must be comma-separated integers")
    one_line_error(run("index", "remove", out, "--ids", "1000,7,1000"), "--ids holds id 1000 more than once")
    (tmp_path / "twice.txt").write_text("7\n7\n")
    one_line_error(run("index", "remove", out, "--ids-file", tmp_path / "twice.txt"), "twice.txt: ids holds id 7")
    (tmp_path / "twice.txt").unlink()
    one_line_error(run("index", "remove", out), "exactly one of --ids and --ids-file")
    np.save(tmp_path / "q16.npy", random_codes(rng, 1, 16))
    one_line_error(run("search", out, "--codes", tmp_path / "q16.npy"), "2 bytes per code")
    np.save(tmp_path / "signs.npy", np.ones((1, 31), np.int8))  # +/-1 codes are read, but of 31 bits
    one_line_error(run("search", out, "--codes", tmp_path / "signs.npy"), "31 columns but bits=32")
    np.save(tmp_path / "q.npy", codes[:1])
    one_line_error(run("search", out, "--codes", tmp_path / "q.npy", "-k", "0"), "k must be a positive integer")
    one_line_error(run("search", out, "--codes", tmp_path / "q.npy", "--radius", "-1"), "radius must be")
    one_line_error(run("search", out, "--features", tmp_path / "q.npy"), "--features needs --run")
    one_line_error(run("search", out), "exactly one of --codes, --features and --images")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == sorted(["enc.npz", "ix", "wrong.npz", "q16.npy", "signs.npy", "q.npy"])
    (out / "ids.npy").write_bytes(b"tampered")
    one_line_error(run("index", "info", out), "ids.npy: checksum mismatch")
    one_line_error(run("serve", tmp_path / "none"), "no such index directory")
    with socket.socket() as busy:  # the input is checked before the port: a taken port does not hide it
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        one_line_error(run("serve", tmp_path / "none", "--port", busy.getsockname()[1]), "no such index directory")


def test_the_limits_leave_valid_searches_alone(input_files):
    result = lbhash_cli("search", input_files / "idx", "--codes", input_files / "q.npy", "-k", MAX_K,
                        "--filter-labels", "0,3", "--json")
    assert result.exit_code == 0, result.output
    index = CodeIndex.load(input_files / "idx")
    dist, ids = index.search(np.load(input_files / "q.npy"), MAX_K, labels=np.tile([1, 0, 0, 1], (4, 1)))
    import json

    got = json.loads(result.output)
    assert [r["ids"] for r in got] == [i[i >= 0].tolist() for i in ids]


def test_search_radius_over_the_cap_is_one_line(tmp_path, rng):
    """`lbhash search --radius` returns at most MAX_K items per query, as -k (issue 60, item 9)."""
    codes = random_codes(rng, MAX_K + 5, 16)
    index_ = CodeIndex(16)
    index_.add(codes)
    index_.save(tmp_path / "ix")
    np.save(tmp_path / "q.npy", codes[:2])
    line = one_line_error(run("search", tmp_path / "ix", "--codes", tmp_path / "q.npy", "--radius", "16"),
                          f"--radius 16 finds {MAX_K + 5} items for query 0", f"more than the {MAX_K}",
                          "a smaller --radius, or -k")
    assert "Traceback" not in line
    result = run("search", tmp_path / "ix", "--codes", tmp_path / "q.npy", "--radius", "1", "--json")
    assert result.exit_code == 0, result.output


def test_a_newline_in_a_path_does_not_split_a_line_of_output(tmp_path, encoded):
    """Issue 69: a file name with a newline split the CLI's text output; a name that is not
    printable is shown quoted, its control characters escaped."""
    from lbhash.cli.common import shown

    path, _, ids, _ = encoded
    out = tmp_path / "new\nline"
    result = run("index", "build", path, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"indexed 120 32-bit codes (faiss flat) into '{tmp_path}/new\\nline'"]
    assert CodeIndex.load(out).ntotal == 120
    removed = run("index", "remove", out, "--ids", str(ids[0]))
    assert removed.output.splitlines() == [f"removed 1 item from '{tmp_path}/new\\nline' (119 left)"]
    queries = tmp_path / "q.npz"  # a query named by a source with a newline: its line stays one line
    np.savez(queries, codes=np.load(path)["codes"][:2], bits=np.int64(32), sources=np.array(["one\nline.jpg", "b.jpg"]))
    searched = run("search", out, "--codes", queries, "-k", "1")
    assert searched.exit_code == 0, searched.output
    assert searched.output.splitlines()[0] == "query 0 ('one\\nline.jpg'): 1 results"
    assert len(searched.output.splitlines()) == 4  # two queries, one hit each
    assert shown("photos/été 1.jpg") == "photos/été 1.jpg"  # printable names are shown as they are
    assert shown("a\rb\u2028c.jpg") == "'a\\rb\\u2028c.jpg'"
