"""MilvusIndex against the FAISS flat index on the same data, on a real Milvus server.

Run with `pytest -m milvus` (make test-milvus). The fixture starts `milvus-server` (PyPI
package `milvus`, 2.3.x) on a temporary data directory and stops it afterwards, or uses the
server at $LBHASH_MILVUS_URI. Without pymilvus, the server package, or a free port 19530 the
tests skip and say why; with LBHASH_MILVUS_REQUIRED=1 (make test-milvus, and so CI) they fail
instead, so that a run that could not reach a server never reads as a pass.
$LBHASH_MILVUS_SERVER names the milvus-server to start (default: the one on PATH or beside the
Python). Milvus 2.3 binds its ports on every interface and has no option to bind 127.0.0.1
only; the tests connect through 127.0.0.1.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from index_reference import clustered_codes, near_queries, random_codes, ternary_embeddings
from lbhash.errors import Conflict, InputError, NotFound
from lbhash.index import CodeIndex, blended_search

pytestmark = pytest.mark.milvus
PORT = 19530
START_TIMEOUT_S = 180


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _unavailable(reason: str):
    """Skip, saying why; fail instead where a Milvus run is required (LBHASH_MILVUS_REQUIRED=1)."""
    if os.environ.get("LBHASH_MILVUS_REQUIRED", "") not in ("", "0"):
        pytest.fail(f"LBHASH_MILVUS_REQUIRED is set, but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def milvus_uri(request, tmp_path_factory):
    if "milvus" not in (request.config.getoption("markexpr") or "") and "LBHASH_MILVUS_URI" not in os.environ:
        pytest.skip("Milvus integration tests run only when selected: pytest -m milvus (make test-milvus)")
    try:
        import pymilvus
    except ImportError:
        _unavailable("pymilvus is not installed (pip install 'lbhash[milvus]')")
    if "LBHASH_MILVUS_URI" in os.environ:
        yield os.environ["LBHASH_MILVUS_URI"]
        return
    server = (os.environ.get("LBHASH_MILVUS_SERVER") or shutil.which("milvus-server")
              or str(Path(sys.executable).parent / "milvus-server"))
    if not Path(server).is_file():
        _unavailable(f"milvus-server not found at {server} (pip install 'milvus>=2.3,<2.4')")
    if _port_open(PORT):
        _unavailable(f"port {PORT} is already in use; set LBHASH_MILVUS_URI to use that server")
    data = tmp_path_factory.mktemp("milvus-data")
    log = open(data / "server.log", "wb")
    proc = subprocess.Popen([server, "--data", str(data)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{PORT}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            if _port_open(PORT):
                try:
                    pymilvus.connections.connect(alias="probe", uri=uri, timeout=5)
                    pymilvus.utility.get_server_version(using="probe")
                    pymilvus.connections.disconnect("probe")
                    ready = True
                    break
                except Exception:  # still starting
                    pass
            time.sleep(1)
        if not ready:
            tail = (data / "server.log").read_text(errors="replace")[-300:].replace("\n", " ")
            _unavailable(f"milvus-server did not start within {START_TIMEOUT_S} s (exit {proc.poll()}): {tail}")
        yield uri
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc, timeout_s: float = 60.0) -> None:
    """SIGTERM the server's whole process group (the wrapper and the milvus binary it
    starts) until none is left, then SIGKILL what remains; bounded in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(2)
        proc.poll()
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


@pytest.fixture
def make_index(milvus_uri):
    from lbhash.index.milvus import MilvusIndex

    made = []

    def make(bits, kind="flat", **params):
        index = MilvusIndex(bits, collection=f"t_{uuid.uuid4().hex[:10]}", uri=milvus_uri, kind=kind, **params)
        made.append(index)
        return index

    yield make
    for index in made:
        index.drop()
        index.close()


def both(make_index, bits, codes, ids, labels, kind="flat", **params):
    milvus = make_index(bits, kind, **params)
    milvus.add(codes, ids=ids, labels=labels)
    flat = CodeIndex(bits)
    flat.add(codes, ids=ids, labels=labels)
    return milvus, flat


def assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("bits, data", [(64, "random"), (64, "clustered"), (8, "random"), (128, "clustered")])
def test_top_k_and_range_equal_faiss_flat(make_index, bits, data):
    rng = np.random.default_rng(bits)
    n = 3000
    codes = random_codes(rng, n, bits) if data == "random" else clustered_codes(rng, n, bits, 30, bits // 16)[0]
    ids = rng.choice(100 * n, n, replace=False)
    labels = (rng.random((n, 5)) < 0.3)
    milvus, flat = both(make_index, bits, codes, ids, labels)
    queries = near_queries(rng, codes, 25)
    qlabels = (rng.random((25, 5)) < 0.3)
    for k in (1, 10, 100):
        assert_same(milvus.search(queries, k), flat.search(queries, k))
        assert_same(milvus.search(queries, k, labels=qlabels), flat.search(queries, k, labels=qlabels))
    for radius in (0, 2, bits // 8, bits // 4):
        assert_same(milvus.range_search(queries, radius), flat.range_search(queries, radius))
    assert_same(milvus.range_search(queries, 3, labels=qlabels), flat.range_search(queries, 3, labels=qlabels))


def test_ivf_with_every_list_probed_has_exact_distances(make_index):
    rng = np.random.default_rng(1)
    codes = clustered_codes(rng, 4000, 64, 40, 4)[0]
    milvus, flat = both(make_index, 64, codes, np.arange(4000), None, kind="ivf", nlist=16, nprobe=16)
    queries = near_queries(rng, codes, 20)
    np.testing.assert_array_equal(milvus.search(queries, 20)[0], flat.search(queries, 20)[0])


def test_rescore_equals_faiss_flat(make_index):
    """Re-scoring runs in Python on the candidates Milvus returns and the embeddings it stored
    beside them (base64 in a VARCHAR): the same as CodeIndex's, ties included."""
    rng = np.random.default_rng(4)
    codes = clustered_codes(rng, 2000, 32, 20, 2)[0]
    labels = rng.integers(0, 3, 2000)
    ids = rng.choice(10**6, 2000, replace=False)
    emb = ternary_embeddings(rng, 2000, 8)  # exact cosines: many ties
    milvus = make_index(32, embedding_dim=8)
    milvus.add(codes, ids=ids, labels=labels, embeddings=emb)
    flat = CodeIndex(32)
    flat.add(codes, ids=ids, labels=labels, embeddings=emb)
    np.testing.assert_array_equal(milvus.get_embeddings(ids[:50]), flat.get_embeddings(ids[:50]))
    queries, q_emb = near_queries(rng, codes, 10), ternary_embeddings(rng, 10, 8)
    qlabels = rng.integers(0, 3, 10)
    for factor in (1, 4):
        assert_same(blended_search(milvus, queries, 10, embeddings=q_emb, factor=factor),
                    blended_search(flat, queries, 10, embeddings=q_emb, factor=factor))
        assert_same(blended_search(milvus, queries, 10, embeddings=q_emb, labels=qlabels, factor=factor),
                    blended_search(flat, queries, 10, embeddings=q_emb, labels=qlabels, factor=factor))


def test_writes_are_read_back_at_once(make_index):
    rng = np.random.default_rng(2)
    codes = random_codes(rng, 200, 32)
    milvus, flat = both(make_index, 32, codes, np.arange(200), rng.integers(0, 4, 200))
    for index in (milvus, flat):
        index.remove([3, 4, 150])
        index.add(codes[:3], ids=[5, 1000, 3], labels=[1, 2, 3], upsert=True)
    assert milvus.ntotal == flat.ntotal == 199
    queries = codes[:10]
    assert_same(milvus.search(queries, 15), flat.search(queries, 15))
    assert_same(milvus.get([5, 1000, 3]), flat.get([5, 1000, 3]))
    with pytest.raises(Conflict, match="id 7 is already in the index"):
        milvus.add(codes[:1], ids=[7])
    with pytest.raises(NotFound, match="id 4 is not in the index"):
        milvus.remove([4])
    with pytest.raises(InputError, match="needs explicit ids"):
        milvus.add(codes[:1])
    with pytest.raises(InputError, match="k must be at most 16383"):
        milvus.search(queries, 20000)


def test_range_past_the_result_cap_is_paged_or_refused(make_index):
    rng = np.random.default_rng(3)
    n = 40000  # 8-bit codes: every distance band holds thousands of items, all of them > 16384
    codes = random_codes(rng, n, 8)
    milvus, flat = both(make_index, 8, codes, np.arange(n), None)
    queries = codes[:2]
    assert_same(milvus.range_search(queries, 8), flat.range_search(queries, 8))
    same = make_index(8)
    same.add(np.zeros((20000, 1), np.uint8), ids=np.arange(20000))
    with pytest.raises(InputError, match="more than 16384 items lie at distance 0"):
        same.range_search(np.zeros((1, 1), np.uint8), 1)


def test_an_index_built_from_a_codes_file_into_milvus_searches_as_faiss(milvus_uri, tmp_path):
    """`lbhash index build FILE --backend milvus` (lbhash.runs.index_dir.build_index): the codes,
    labels and embeddings of an `lbhash encode --embeddings` file, searched and re-scored as the
    FAISS directory built from the same file."""
    from lbhash.runs.index_dir import build_index, open_index

    rng = np.random.default_rng(5)
    codes, labels = random_codes(rng, 300, 32), rng.integers(0, 4, 300)
    emb = ternary_embeddings(rng, 300, 6)
    path = tmp_path / "enc.npz"
    np.savez(path, codes=codes, bits=np.int64(32), ids=np.arange(100, 400), labels=labels, embeddings=emb)
    name = f"t_{uuid.uuid4().hex[:10]}"
    built = build_index(path, name, backend="milvus", uri=milvus_uri)
    try:
        assert (built.count, built.bits, built.embedding_dim) == (300, 32, 6)
        flat = build_index(path, str(tmp_path / "ix")).index
        milvus = open_index(name, "milvus", milvus_uri)
        assert milvus.ntotal == 300 and milvus.embedding_dim == 6
        queries = codes[:8]
        assert_same(milvus.search(queries, 12), flat.search(queries, 12))
        assert_same(blended_search(milvus, queries, 5, embeddings=emb[:8]), blended_search(flat, queries, 5, embeddings=emb[:8]))
        with pytest.raises(InputError, match="already holds 300 items"):
            build_index(path, name, backend="milvus", uri=milvus_uri)
    finally:
        open_index(name, "milvus", milvus_uri).drop()
