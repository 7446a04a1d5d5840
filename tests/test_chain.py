"""The journey as one tool: train -> encode new unlabelled items -> encode labelled queries ->
evaluate -> index build -> search (CLI and Python) -> the service (its app in process) -> resume, each command
taking the previous one's output unchanged, and the codes of one item identical on every path.

One chain per data kind: quantised features (a slice of the shared CIFAR-10 MobileNet
features, uint8 with a scale), multi-label features (the scene set) and images (the class-folder
tree of generated PNGs and its run that the search-page tests share: conftest's tiny_image_run)."""

import json
import shutil

import numpy as np
import pytest

from helpers import cli
from serve_helpers import LOCAL
from lbhash.codes_file import load_codes_file
from lbhash.runs.run_files import verify_finished_run

TRAIN = ["--bits", "16", "--epochs", "2", "--hidden", "64", "--centers", "hadamard", "--no-progress", "--seed", "0"]


def ok(*args):
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def refused(*args, fragment: str):
    result = cli(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.output
    return lines[0]


def search_json(*args):
    return json.loads(ok("search", *args, "--json"))


def hamming(a, b):
    return np.unpackbits(a[:, None, :] ^ b[None, :, :], axis=2).sum(axis=2)


@pytest.fixture(scope="module")
def feature_slice(tmp_path_factory):
    """1,200 rows of the shared features as stored (uint8 `feat`, `scale`, `zero_point`)."""
    from conftest import shared_data_dir

    source = shared_data_dir() / "cifar10-mobilenetv1-features.npz"
    if not source.is_file():
        pytest.skip(f"shared features not found at {source} (set LBHASH_SHARED_DATA)")
    data = np.load(source)
    rows = np.concatenate([np.arange(0, 50_000, 50), np.arange(50_000, 60_000, 50)])  # 1000 train, 200 test
    folder = tmp_path_factory.mktemp("features")
    path = folder / "slice.npz"
    np.savez(path, feat=data["feat"][rows], labels=data["labels"][rows], is_test=data["is_test"][rows],
             scale=data["scale"], zero_point=data["zero_point"])
    return path, data["feat"][rows], float(data["scale"]), float(data["zero_point"])


def test_feature_chain_with_dequantization(tmp_path, feature_slice):
    path, stored, scale, zero_point = feature_slice
    run = tmp_path / "run"
    ok("train", "--data", f"features:{path}", "--protocol", "given", "--method", "csq", "--out", run, *TRAIN)
    run_codes = load_codes_file(run / "codes.npz")
    db_ids, db_codes = run_codes["db_ids"], run_codes["db_codes"]
    code_of = dict(zip(db_ids.tolist(), db_codes))

    # new items without labels, in the stored form (uint8), as a user would save them
    picks = db_ids[:5]
    np.save(tmp_path / "new.npy", stored[picks])
    ok("encode", run, "--data", f"features:{tmp_path / 'new.npy'}", "--out", tmp_path / "new.npz")
    new = load_codes_file(tmp_path / "new.npz", need=())
    assert "labels" not in new or new["labels"] is None
    np.testing.assert_array_equal(new["codes"], np.stack([code_of[i] for i in picks.tolist()]))
    # the same rows dequantised by hand give the same codes; a float copy of the stored values is refused
    np.save(tmp_path / "real.npy", (stored[picks].astype(np.float32) - np.float32(zero_point)) * np.float32(scale))
    ok("encode", run, "--data", f"features:{tmp_path / 'real.npy'}", "--out", tmp_path / "real.npz")
    np.testing.assert_array_equal(load_codes_file(tmp_path / "real.npz", need=())["codes"], new["codes"])
    np.save(tmp_path / "wrong.npy", stored[picks].astype(np.float32))
    refused("encode", run, "--data", f"features:{tmp_path / 'wrong.npy'}", "--out", tmp_path / "w.npz",
            fragment="lie outside")

    # labelled queries and database through encode, evaluated against each other
    ok("encode", run, "--part", "query", "--out", tmp_path / "q.npz")
    ok("encode", run, "--part", "database", "--out", tmp_path / "db.npz")
    q = load_codes_file(tmp_path / "q.npz", need=())
    np.testing.assert_array_equal(q["codes"], run_codes["query_codes"])
    metrics = json.loads((run / "metrics.json").read_text())
    both = ok("evaluate", "--queries", tmp_path / "q.npz", "--database", tmp_path / "db.npz",
              "--out", tmp_path / "m.json")
    assert json.loads((tmp_path / "m.json").read_text())["map"] == metrics["map"]
    assert f"R = {'all' if metrics['topk'] == 'all' else metrics['topk']}" in both
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    ok("evaluate", run / "codes.npz")
    refused("evaluate", run / "codes.npz", "--out", run / "metrics.json", "--overwrite",
            fragment="only training writes")
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before

    # index and search: stored rows, the whole training file, codes and the Python API agree
    ok("index", "build", run, "--out", tmp_path / "idx")
    by_rows = search_json(tmp_path / "idx", "--features", tmp_path / "new.npy", "--run", run, "-k", "5",
                          "--no-rescore")
    by_codes = search_json(tmp_path / "idx", "--codes", tmp_path / "new.npz", "-k", "5")
    # re-scored (the default: the index keeps the stored rows): each item finds itself first
    rescored = search_json(tmp_path / "idx", "--features", tmp_path / "new.npy", "--run", run, "-k", "5")
    assert [r["ids"][0] for r in rescored] == picks.tolist()
    assert all(r["distances"][0] == 0 and r["scores"][0] > 0.999 for r in rescored)
    assert [r["ids"] for r in by_rows] == [r["ids"] for r in by_codes]
    for pick, row in zip(picks.tolist(), by_rows):
        assert row["distances"][0] == 0 and pick in [i for i, d in zip(row["ids"], row["distances"]) if d == 0]
        expected = hamming(code_of[pick][None], np.stack([code_of[i] for i in row["ids"]]))[0]
        assert row["distances"] == expected.tolist()
    whole = search_json(tmp_path / "idx", "--features", path, "--run", run, "-k", "5", "--no-rescore")
    assert [whole[i]["ids"] for i in picks.tolist()] == [r["ids"] for r in by_rows]

    from lbhash import HashEncoder
    from lbhash.index import CodeIndex
    from lbhash.serving.searcher import Searcher

    enc = HashEncoder.load(run)
    np.testing.assert_array_equal(enc.encode(stored[picks]), new["codes"])
    with pytest.raises(ValueError, match="lie outside"):
        enc.encode(stored[picks].astype(np.float32))
    dist, ids = Searcher(CodeIndex.load(tmp_path / "idx"), enc).search(stored[picks], 5)
    assert ids.tolist() == [r["ids"] for r in by_rows]

    # the service, as `lbhash serve IDX --run RUN` builds it (a real server process: tests/service/
    # test_service_process.py, make test-slow): JSON integers are stored values, decimals feature values
    from fastapi.testclient import TestClient

    from lbhash.indexes.index_inputs import query_encoder
    from lbhash.service import create_app

    with TestClient(create_app(tmp_path / "idx", query_encoder(run)), base_url=LOCAL) as client:
        for rows in (stored[picks].tolist(), np.load(tmp_path / "real.npy").astype(float).tolist()):
            answer = client.post("/search", json={"features": rows, "k": 5})
            assert answer.status_code == 200, answer.text
            assert [[h["id"] for h in r["hits"]] for r in answer.json()["results"]] == [r["ids"] for r in rescored]

    # every command above only read the run: it still verifies and resumes as finished
    verify_finished_run(run)
    ok("train", "--out", run, "--resume")
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.name != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}


def test_multilabel_chain(tmp_path, shared_data):
    run = tmp_path / "run"
    scene = shared_data / "scene-multilabel.npz"
    ok("train", "--data", f"features:{scene}", "--protocol", "given", "--method", "csq", "--out", run, *TRAIN)
    codes = load_codes_file(run / "codes.npz")
    assert codes["db_labels"].ndim == 2  # multi-hot rows
    x = np.load(scene)["x_test"][:4]
    np.save(tmp_path / "new.npy", x)
    ok("encode", run, "--data", f"features:{tmp_path / 'new.npy'}", "--out", tmp_path / "new.npz")
    ok("encode", run, "--part", "query", "--out", tmp_path / "q.npz")
    n_train = len(np.load(scene)["x_train"])
    q = load_codes_file(tmp_path / "q.npz", need=())
    first = dict(zip(q["ids"].tolist(), q["codes"]))
    np.testing.assert_array_equal(load_codes_file(tmp_path / "new.npz", need=())["codes"],
                                  np.stack([first[n_train + i] for i in range(4)]))
    ok("evaluate", run / "codes.npz")
    ok("index", "build", run, "--out", tmp_path / "idx")
    hits = search_json(tmp_path / "idx", "--features", tmp_path / "new.npy", "--run", run, "-k", "20",
                       "--filter-labels", "0")
    assert all(0 in labels for r in hits for labels in r["labels"])
    verify_finished_run(run)
    ok("train", "--out", run, "--resume")


def test_image_chain(tmp_path, tiny_image_run):
    run = shutil.copytree(tiny_image_run[1], tmp_path / "run")  # the session's image run: resumed below
    codes = load_codes_file(run / "codes.npz")
    assert codes["db_sources"].tolist()[0].endswith(".png")  # each item says where it came from
    ok("encode", run, "--part", "database", "--out", tmp_path / "db.npz")
    db = load_codes_file(tmp_path / "db.npz", need=())
    np.testing.assert_array_equal(db["codes"], codes["db_codes"])
    assert db["sources"].tolist() == codes["db_sources"].tolist()
    ok("evaluate", "--queries", run / "codes.npz", "--database", tmp_path / "db.npz")
    ok("index", "build", tmp_path / "db.npz", "--out", tmp_path / "idx")
    files = [str(s) for s in codes["db_sources"][:3]]
    every = str(len(codes["db_ids"]))
    hits = search_json(tmp_path / "idx", *[a for f in files for a in ("--images", f)], "--run", run, "-k", every)
    own = dict(zip(codes["db_sources"].tolist(), codes["db_ids"].tolist()))
    for name, row in zip(files, hits):
        assert row["name"] == name and row["distances"][0] == 0
        assert own[name] in [i for i, d in zip(row["ids"], row["distances"]) if d == 0]
    # an index built from the run names each hit's file when searched with the run
    ok("index", "build", run, "--out", tmp_path / "idx-run")
    refused("index", "build", run, "--out", run / "idx", fragment="only training writes")
    named = search_json(tmp_path / "idx-run", "--images", files[0], "--run", run, "-k", every)[0]
    assert dict(zip(named["ids"], named["sources"]))[own[files[0]]] == files[0]
    text = ok("search", tmp_path / "idx-run", "--images", files[0], "--run", run, "-k", "1")
    assert text.count(".png") == 2  # the query's file and its hit's
    verify_finished_run(run)
    ok("train", "--out", run, "--resume")
