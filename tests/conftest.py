import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("LBHASH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True, scope="session")
def pixel_cache_in_tmp(tmp_path_factory):
    """Tests never write to the user's cache: the decoded-pixel cache goes to a temporary folder."""
    folder = tmp_path_factory.mktemp("lbhash-cache")
    previous = os.environ.get("LBHASH_CACHE_DIR")
    os.environ["LBHASH_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("LBHASH_CACHE_DIR", None)
    else:
        os.environ["LBHASH_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """Each test leaves torch's thread count as it found it. OpenMP's count is the process's (FAISS and
    numba's threading layer share it with torch): a test that left 2 made every later test of its
    worker train with 2 threads, 2 to 8 times slower on 2 busy cores than with the suite's 1."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    if before is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set LBHASH_SHARED_DATA)")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def tiny_image_run(tmp_path_factory):
    """(image tree, run directory): a 16-bit CSQ run on generated PNGs (tests/page_helpers.py),
    trained once per session for the search-page tests."""
    from page_helpers import make_image_tree, train_tiny_run

    from run_bank import built_once

    root = shared_tmp(tmp_path_factory, "tiny-image-run")
    tree = built_once(root / "imgs", make_image_tree)
    return tree, built_once(root / "run", lambda run: train_tiny_run(tree, run))


@pytest.fixture(scope="session")
def tiny_image_export(tiny_image_run, tmp_path_factory):
    """(export, warnings): the tiny image run's export (RunDirectory.export: seconds of ONNX export),
    made once per session for every worker, and the messages of the LbhashWarnings that making it
    gave (a float32 run: none). Read it; copy it to change it."""
    import json
    import warnings

    from lbhash.errors import LbhashWarning
    from lbhash.runs import RunDirectory
    from run_bank import built_once

    def build(out):
        out.mkdir(parents=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            RunDirectory(run).export(out / "export")
        said = [str(w.message) for w in caught if issubclass(w.category, LbhashWarning)]
        (out / "warnings.json").write_text(json.dumps(said))

    _, run = tiny_image_run
    made = built_once(shared_tmp(tmp_path_factory, "tiny-image-export") / "made", build)
    return made / "export", json.loads((made / "warnings.json").read_text())


@pytest.fixture(scope="session")
def cifar_sample(tmp_path_factory) -> Path:
    """The first 100 training and 20 test JPEGs of each class of the shared CIFAR-10 tarball as a
    tree (train/CLASS/NNNN.jpg, test/CLASS/NNNN.jpg, the archive's names), cut once per session for
    every worker (helpers.cifar_jpeg_tree): for the tests that need a few real photos, not the
    tarball's reader."""
    from helpers import cifar_jpeg_tree

    from run_bank import built_once

    tarball = shared_data_dir() / "cifar10-jpg.tar.gz"
    if not tarball.is_file():
        pytest.skip(f"{tarball} not found (set LBHASH_SHARED_DATA)")
    root = shared_tmp(tmp_path_factory, "cifar-sample")
    return built_once(root / "tree", lambda out: cifar_jpeg_tree(tarball, out, train=100, test=20))


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """The session's bank of small trained runs (tests/run_bank.py)."""
    from run_bank import RunBank

    return RunBank(shared_tmp(tmp_path_factory, "run-bank"))


def shared_tmp(tmp_path_factory, name: str) -> Path:
    """A folder of this session: the same one for every pytest-xdist worker (their temporary
    folders' parent), so that what one worker trained the others read."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent / name
    return tmp_path_factory.mktemp(name)


@pytest.fixture
def input_files(tmp_path):
    """Input files and a 16-bit index, for the refusals of issue 19 (tests/cli/test_cli_errors.py and
    the units they name); every case must leave them as they were (helpers.snapshot)."""
    import zipfile

    from helpers import npy_bytes, npy_header_bytes
    from lbhash.codes import pack
    from lbhash.codes_file import save_codes_file
    from lbhash.index import CodeIndex
    from lbhash.limits import MAX_CLASS_ID

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
        archive.writestr("x.npy", npy_header_bytes((30, 20_000_000)))
        archive.writestr("labels.npy", npy_bytes(np.arange(30) % 2))
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as archive:  # larger than any machine's memory
        archive.writestr("x.npy", npy_header_bytes((30, 2 * 10**12)))
        archive.writestr("labels.npy", npy_bytes(np.arange(30) % 2))
    (tmp_path / "huge.npy").write_bytes(npy_header_bytes((30, 2 * 10**12)))
    np.save(tmp_path / "labels.npy", np.arange(30) % 2)
    lists = tmp_path / "lists"
    lists.mkdir()
    for name in ("train.txt", "test.txt", "database.txt"):
        (lists / name).write_text(f"a.jpg 1 0\n{tmp_path}/imgs/b.jpg 0 1\n")
    return tmp_path


# test file -> {kind: count}; the kinds: "gradient" (a trainer that trained an epoch or more),
# "closed-form" (a trainer of a closed-form fit), "none" (stopped or refused before its first epoch)
_TRAININGS_BY_FILE: dict[str, dict[str, int]] = {}
KINDS = ("gradient", "closed-form", "none")


@pytest.fixture(autouse=True, scope="session")
def count_trainings():
    """Counts the trainers this test process builds, by test file and kind (KINDS); a trainer's
    kind is known once it has trained, so each is tallied at the session's end."""
    from lbhash.methods import method_class
    from lbhash.train.loop import Trainer

    init, train_epoch, built = Trainer.__init__, Trainer.train_epoch, []

    def counted(self, exp, *args, **kwargs):
        test = Path(os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[0]).name
        self._counted = [test, "closed-form" if method_class(exp.cfg.hashing.method).closed_form else "none"]
        built.append(self._counted)
        init(self, exp, *args, **kwargs)

    def epoch_counted(self, *args, **kwargs):
        self._counted[1] = "gradient"
        return train_epoch(self, *args, **kwargs)

    Trainer.__init__, Trainer.train_epoch = counted, epoch_counted
    yield
    Trainer.__init__, Trainer.train_epoch = init, train_epoch
    for test, kind in built:
        counts = _TRAININGS_BY_FILE.setdefault(test, dict.fromkeys(KINDS, 0))
        counts[kind] += 1


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands its counts to the controller (`pytest_testnodedown`)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["trainings_by_file"] = {test: dict(counts) for test, counts in _TRAININGS_BY_FILE.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for test_file, counts in getattr(node, "workeroutput", {}).get("trainings_by_file", {}).items():
        mine = _TRAININGS_BY_FILE.setdefault(test_file, dict.fromkeys(KINDS, 0))
        for kind, count in counts.items():
            mine[kind] += count


def pytest_terminal_summary(terminalreporter):
    if hasattr(terminalreporter.config, "workeroutput"):  # a worker: the controller prints the sum
        return
    total = {kind: sum(counts[kind] for counts in _TRAININGS_BY_FILE.values()) for kind in KINDS}
    most = sorted(((f, c["gradient"]) for f, c in _TRAININGS_BY_FILE.items() if c["gradient"]), key=lambda i: -i[1])
    terminalreporter.write_line(
        f"trainings in the test processes (subprocesses not counted): {total['gradient']} trained an epoch or more "
        "(by file: " + ", ".join(f"{f} {n}" for f, n in most) + f"); {total['closed-form']} closed-form fits; "
        f"{total['none']} trainers stopped or refused before their first epoch")


@pytest.fixture
def server_factory(tmp_path):
    """make(index_dir, port, *extra): a started `lbhash serve` (serve_helpers.Server), killed after the test."""
    from serve_helpers import Server

    started = []

    def make(index_dir, port, *extra):
        server = Server(index_dir, port, *extra).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.kill()


@pytest.fixture
def fake_torchvision(monkeypatch):
    """torchvision's resnet50 and alexnet as small fakes (tests/model_fakes.py)."""
    from model_fakes import install_fake_torchvision

    install_fake_torchvision(monkeypatch)
