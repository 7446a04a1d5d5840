"""Issue 19's bad inputs and faults: each case gives exit status 2, one line `error: ...` that
names the value, no traceback, and leaves every file as it was (or works as documented)."""

import hashlib
import io
import shutil
import socket
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npy

from lbhash import _io
from helpers import FAST_TRAIN, cli
from lbhash.codes import pack
from lbhash.codes_file import save_codes_file
from lbhash.index import CodeIndex
from lbhash.limits import MAX_CLASS_ID, MAX_K


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path.parent / "centers-cache"))


def snapshot(root):
    """Every file and folder under root, with the SHA-256 of each file: 'nothing changed'."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def header_only_npy(shape, dtype=np.float64) -> bytes:
    """An .npy header announcing `shape` with no data behind it: a huge array in a few bytes."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                     "shape": shape})
    return out.getvalue()


def npy_bytes(arr) -> bytes:
    out = io.BytesIO()
    np.save(out, arr)
    return out.getvalue()


@pytest.fixture
def work(tmp_path):
    """Input files and an index; every case must leave them as they were."""
    rng = np.random.default_rng(0)
    signs = lambda n: rng.choice([-1, 1], (n, 16))  # noqa: E731
    save_codes_file(tmp_path / "codes.npz", signs(20), signs(60), rng.integers(0, 4, 20), rng.integers(0, 4, 60))
    q, d = pack(signs(300)), pack(signs(60))
    np.savez(tmp_path / "q3d.npz", query_codes=q, db_codes=d, query_labels=rng.integers(0, 4, (300, 1, 1)),
             db_labels=rng.integers(0, 4, 60), bits=16)
    np.savez(tmp_path / "both3d.npz", query_codes=q, db_codes=d, query_labels=rng.integers(0, 4, (300, 1, 1)),
             db_labels=rng.integers(0, 4, (60, 1, 1)), bits=16)
    np.savez(tmp_path / "float_ids.npz", codes=pack(signs(3)), bits=16, ids=np.array([1.5, 2.5, 3.5]))
    np.savez(tmp_path / "int_float_ids.npz", codes=pack(signs(3)), bits=16, ids=np.array([7.0, 8.0, 9.0]))
    np.savez(tmp_path / "big_class.npz", codes=pack(signs(2)), bits=16, labels=np.array([1, MAX_CLASS_ID + 1]))
    np.save(tmp_path / "q.npy", pack(signs(4)))
    index = CodeIndex(16)
    index.add(pack(signs(50)), labels=rng.integers(0, 4, 50))
    index.save(tmp_path / "idx")
    with zipfile.ZipFile(tmp_path / "wide.npz", "w") as archive:  # the (30, 20,000,000) file
        archive.writestr("x.npy", header_only_npy((30, 20_000_000)))
        archive.writestr("labels.npy", npy_bytes(np.arange(30) % 2))
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as archive:  # larger than any machine's memory
        archive.writestr("x.npy", header_only_npy((30, 2 * 10**12)))
        archive.writestr("labels.npy", npy_bytes(np.arange(30) % 2))
    (tmp_path / "huge.npy").write_bytes(header_only_npy((30, 2 * 10**12)))
    np.save(tmp_path / "labels.npy", np.arange(30) % 2)
    lists = tmp_path / "lists"
    lists.mkdir()
    for name in ("train.txt", "test.txt", "database.txt"):
        (lists / name).write_text(f"a.jpg 1 0\n{tmp_path}/imgs/b.jpg 0 1\n")
    return tmp_path


# (id: the point, arguments with {w} for the work folder, fragments the one line must hold)
CASES = [
    ("1-evaluate-radius-over-bits", ["evaluate", "{w}/codes.npz", "--radius", "1000", "--out", "{w}/m.json"],
     ["radius must be at most bits=16", "1000"]),
    ("2-query-labels-3d", ["evaluate", "{w}/q3d.npz", "--out", "{w}/m.json"],
     ["q3d.npz", "'query_labels'", "(300, 1, 1)"]),
    ("2-both-labels-3d", ["evaluate", "{w}/both3d.npz", "--out", "{w}/m.json"],
     ["both3d.npz", "'query_labels'", "(300, 1, 1)"]),
    ("3-float-ids", ["index", "add", "{w}/idx", "{w}/float_ids.npz"], ["float_ids.npz", "'ids' must be integers", "1.5"]),
    ("3-integral-float-ids", ["index", "add", "{w}/idx", "{w}/int_float_ids.npz"],
     ["int_float_ids.npz", "'ids' must be integers", "float64"]),
    ("4-remove-id-past-int64", ["index", "remove", "{w}/idx", "--ids", "99999999999999999999999"],
     ["--ids", "99999999999999999999999", "int64"]),
    ("5-search-k-huge", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "100000000000"],
     ["-k must be at most 1000", "100000000000"]),
    ("5-search-k-zero", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "0"], ["-k must be a positive integer", "0"]),
    ("6-filter-class-huge", ["search", "{w}/idx", "--codes", "{w}/q.npy", "--filter-labels", "99999999999"],
     ["--filter-labels", "between 0 and 65535", "99999999999"]),
    ("6-filter-class-negative", ["search", "{w}/idx", "--codes", "{w}/q.npy", "--filter-labels", "2,-1"],
     ["--filter-labels", "-1"]),
    ("6-add-class-over-limit", ["index", "add", "{w}/idx", "{w}/big_class.npz"], ["class id 65536", "at most 65535"]),
    ("7-features-beyond-memory", ["train", *FAST_TRAIN[2:], "--data", "features:{w}/huge.npz", "--out", "{w}/run"],
     ["huge.npz", "'x'", "(30, 2000000000000)", "memory available"]),
    ("7-npy-beyond-memory", ["train", *FAST_TRAIN[2:], "--data", "features:{w}/huge.npy?labels={w}/labels.npy",
                             "--out", "{w}/run"], ["huge.npy", "(30, 2000000000000)", "memory available"]),
    ("7-query-file-beyond-memory", ["search", "{w}/idx", "--codes", "{w}/huge.npy"],
     ["huge.npy", "(30, 2000000000000)"]),
    ("9-k-and-radius", ["search", "{w}/idx", "--codes", "{w}/q.npy", "-k", "5", "--radius", "2"],
     ["either -k or --radius", "-k 5", "--radius 2"]),
    ("11-absolute-list-path", ["train", "--data", "list:{w}/lists?root={w}/imgs", "--out", "{w}/run"],
     ["train.txt:2", "absolute paths are not allowed", "/imgs/b.jpg"]),
    ("serve-max-k-over-table", ["serve", "{w}/idx", "--max-k", str(MAX_K + 1)], ["--max-k", str(MAX_K + 1)]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(work, args, fragments):
    before = snapshot(work)
    one_line_error(cli(*[a.format(w=work) for a in args]), *fragments)
    assert snapshot(work) == before


def test_a_file_larger_than_free_memory_is_refused_from_its_header(work, monkeypatch):
    """The issue's (30, 20,000,000) float64 file (4.8 GB) on a machine with 2 GB free."""
    monkeypatch.setattr(_io, "available_memory", lambda: 2 * 10**9)
    before = snapshot(work)
    one_line_error(cli("train", *FAST_TRAIN, "--data", f"features:{work / 'wide.npz'}", "--out", work / "run"),
                   "wide.npz", "'x' has shape (30, 20000000)", "float64, 4.8 GB", "2.0 GB of memory available")
    assert snapshot(work) == before


def test_the_limits_leave_valid_searches_alone(work):
    result = cli("search", work / "idx", "--codes", work / "q.npy", "-k", MAX_K, "--filter-labels", "0,3", "--json")
    assert result.exit_code == 0, result.output
    index = CodeIndex.load(work / "idx")
    dist, ids = index.search(np.load(work / "q.npy"), MAX_K, labels=np.tile([1, 0, 0, 1], (4, 1)))
    import json

    got = json.loads(result.output)
    assert [r["ids"] for r in got] == [i[i >= 0].tolist() for i in ids]


def test_a_busy_port_is_one_line_and_touches_no_file(work):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        before = snapshot(work)
        one_line_error(cli("serve", work / "idx", "--host", "127.0.0.1", "--port", port),
                       f"--port {port}", f"127.0.0.1:{port}", "in use")
    assert snapshot(work) == before  # no write-ahead log was created


# --- 8: resuming a finished run verifies every file against its manifest ------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished CSQ_D run on digits that kept its best validation epoch (best.pt: the weights)."""
    out = tmp_path_factory.mktemp("finished") / "R"
    result = cli("train", *FAST_TRAIN, "--lbhash", "--epochs", "2", "--validation", "0.2",
                 "--select", "best-val", "--eval-every", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "best.pt").is_file()
    return out


class Payload:
    def __reduce__(self):
        return (print, ("payload ran",))


def corrupt(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "zeroed":
        path.write_bytes(bytes(len(data)))
    elif how == "flipped":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 8]) + data[middle + 8:])
    elif how == "pickle":
        import torch

        torch.save({"learner": Payload()}, path)
    elif how == "python-tag":
        path.write_text("bits: !!python/object/apply:os.system ['echo payload ran']\n")


@pytest.mark.parametrize("name, how", [
    ("checkpoint.pt", "truncated"), ("checkpoint.pt", "zeroed"), ("checkpoint.pt", "flipped"),
    ("checkpoint.pt", "pickle"), ("best.pt", "flipped"), ("best.pt", "pickle"), ("config.yaml", "python-tag"),
    ("config.yaml", "truncated"), ("metrics.json", "zeroed"), ("codes.npz", "flipped"),
])
def test_resuming_a_changed_finished_run_is_refused(tmp_path, finished_run, name, how):
    run = tmp_path / "R"
    shutil.copytree(finished_run, run)
    corrupt(run / name, how)
    before = snapshot(run)
    result = cli("train", "--resume", "--out", run)
    one_line_error(result, name, "SHA-256")
    assert "payload ran" not in result.output and snapshot(run) == before


def test_resuming_an_intact_finished_run_reprints_its_metrics(tmp_path, finished_run):
    run = tmp_path / "R"
    shutil.copytree(finished_run, run)
    (run / "best.pt").unlink()
    one_line_error(cli("train", "--resume", "--out", run), "best.pt", "missing")
    shutil.copy(finished_run / "best.pt", run / "best.pt")
    before = snapshot(run)
    result = cli("train", "--resume", "--out", run)
    assert result.exit_code == 0 and "mAP@all" in result.output and snapshot(run) == before


# --- 12: a damaged center cache is named in a warning, then regenerated ---------------------------

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
