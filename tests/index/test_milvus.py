"""MilvusIndex against brute-force references and the FAISS flat index on the same data, on a real
Milvus store.

Run with `pytest -m milvus` (make test-milvus). The fixture starts the Milvus server inside the
`milvus-lite` 2.5.1 wheel (Milvus 2.5's own engine; `milvus-lite` 3.x, a rewrite, has no binary
vectors) on 127.0.0.1 and a free port, over a temporary database file, and stops it afterwards; or it
uses the server at $LBHASH_MILVUS_URI. The tests connect over the network, as to any Milvus server.
Without pymilvus or milvus-lite, or a server that does not answer, the tests skip and say why; with
LBHASH_MILVUS_REQUIRED=1 (make test-milvus, and so CI) they fail instead, so that a run that could not
reach a store never reads as a pass. $LBHASH_MILVUS_SERVER names another server binary to start
(it is called as milvus-lite calls its own: BINARY DB_FILE ADDRESS LOG_LEVEL).
"""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from index_reference import (brute_blend, clustered_codes, near_queries, random_codes, ternary_embeddings,
                             tied_items, top_k)
from lbhash.errors import Conflict, InputError, NotFound
from lbhash.index import CodeIndex, Queries, SparseLabels, blended_search
from lbhash.index.blend import SIMILARITY_POWER
from lbhash.instance import MARK_KEY

pytestmark = pytest.mark.milvus
START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unavailable(reason: str):
    """Skip, saying why; fail instead where a Milvus run is required (LBHASH_MILVUS_REQUIRED=1)."""
    if os.environ.get("LBHASH_MILVUS_REQUIRED", "") not in ("", "0"):
        pytest.fail(f"LBHASH_MILVUS_REQUIRED is set, but {reason}", pytrace=False)
    pytest.skip(reason)


def _lite_server() -> str | None:
    """The server binary inside the installed milvus-lite wheel, found without importing the package
    (its __init__ imports pkg_resources, which setuptools 82 and later no longer ship)."""
    spec = importlib.util.find_spec("milvus_lite")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(list(spec.submodule_search_locations)[0]) / "lib" / "milvus")


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
    server = os.environ.get("LBHASH_MILVUS_SERVER") or _lite_server()
    if server is None or not Path(server).is_file():
        _unavailable(f"no Milvus server binary at {server} (milvus-lite 2.5.1 holds one, 3.x none: "
                     "pip install -c constraints.txt milvus-lite)")
    data = tmp_path_factory.mktemp("milvus-data")
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    log = open(data / "server.log", "wb")
    # the binary finds its own libraries beside it, as milvus-lite starts it
    env = {**os.environ, "LD_LIBRARY_PATH": f"{Path(server).parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = subprocess.Popen([server, str(data / "milvus.db"), f"127.0.0.1:{port}", "ERROR"], stdout=log,
                            stderr=subprocess.STDOUT, env=env, cwd=data, start_new_session=True)
    try:
        deadline, ready = time.monotonic() + START_TIMEOUT_S, False
        while time.monotonic() < deadline and proc.poll() is None and not ready:
            try:
                client = pymilvus.MilvusClient(uri=uri, timeout=5)
                client.list_collections()
                client.close()
                ready = True
            except Exception:  # still starting
                time.sleep(0.5)
        if not ready:
            tail = (data / "server.log").read_text(errors="replace")[-300:].replace("\n", " ")
            _unavailable(f"the Milvus server did not start within {START_TIMEOUT_S} s (exit {proc.poll()}): {tail}")
        yield uri
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc, timeout_s: float = 30.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what remains after `timeout_s`."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def make_index(milvus_uri):
    from lbhash.index.milvus import MilvusIndex

    made = []

    def make(bits, kind="flat", collection=None, **params):
        index = MilvusIndex(bits, collection=collection or f"t_{uuid.uuid4().hex[:10]}", uri=milvus_uri, kind=kind,
                            **params)
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


def test_ivf_searches_exact_distances_with_every_list_probed_or_is_refused_in_one_line(make_index):
    """BIN_IVF_FLAT: a server that builds it answers exact distances with every list probed; Milvus Lite
    (the tests' own store) builds only BIN_FLAT, and the collection is refused in one line, none left behind."""
    rng = np.random.default_rng(1)
    codes = clustered_codes(rng, 4000, 64, 40, 4)[0]
    try:
        milvus, flat = both(make_index, 64, codes, np.arange(4000), None, kind="ivf", nlist=16, nprobe=16)
    except InputError as err:
        assert "cannot make a ivf collection (BIN_IVF_FLAT)" in str(err) and "\n" not in str(err), err
        name = str(err).split("'")[1]
        with pytest.raises(InputError, match=f"no Milvus collection '{name}'"):
            make_index(None, collection=name)
        return
    queries = near_queries(rng, codes, 20)
    np.testing.assert_array_equal(milvus.search(queries, 20)[0], flat.search(queries, 20)[0])


def test_rescore_equals_faiss_flat(make_index):
    """Re-scoring runs in Python on the candidates Milvus returns and the embeddings it stored
    beside them (a FLOAT16_VECTOR field: the same bytes back): the same as CodeIndex's, ties included."""
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
        ranked = Queries(queries, q_emb)
        assert_same(blended_search(milvus, ranked, 10, factor=factor), blended_search(flat, ranked, 10, factor=factor))
        assert_same(blended_search(milvus, ranked, 10, labels=qlabels, factor=factor),
                    blended_search(flat, ranked, 10, labels=qlabels, factor=factor))


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
    """`lbhash index build FILE --backend milvus` (lbhash.indexes.index_dir.build_index): the codes,
    labels and embeddings of an `lbhash encode --embeddings` file, searched and re-scored as the
    FAISS directory built from the same file."""
    from lbhash.indexes.index_dir import IndexLocation, build_index, open_index

    rng = np.random.default_rng(5)
    codes, labels = random_codes(rng, 300, 32), rng.integers(0, 4, 300)
    emb = ternary_embeddings(rng, 300, 6)
    path = tmp_path / "enc.npz"
    np.savez(path, codes=codes, bits=np.int64(32), ids=np.arange(100, 400), labels=labels, embeddings=emb)
    name = f"t_{uuid.uuid4().hex[:10]}"
    built = build_index(path, IndexLocation(name, "milvus", milvus_uri))
    try:
        assert (built.count, built.bits, built.embedding_dim) == (300, 32, 6)
        flat = build_index(path, IndexLocation(str(tmp_path / "ix"))).index
        milvus = open_index(name, "milvus", milvus_uri)
        assert milvus.ntotal == 300 and milvus.embedding_dim == 6
        queries = codes[:8]
        assert_same(milvus.search(queries, 12), flat.search(queries, 12))
        assert_same(blended_search(milvus, Queries(queries, emb[:8]), 5), blended_search(flat, Queries(queries, emb[:8]), 5))
        with pytest.raises(InputError, match="already holds 300 items"):
            build_index(path, IndexLocation(name, "milvus", milvus_uri))
    finally:
        open_index(name, "milvus", milvus_uri).drop()


def test_index_build_keeps_the_instance_codes_and_their_transform_beside_the_collection(milvus_uri, tmp_path):
    """`index build --backend milvus` makes the instance codes as for a directory and keeps the
    transform (and the index's record) in the companion collection: reopened, the collection ranks
    as the FAISS directory built from the same file, a service's adds get their instance codes, and
    a damaged record is refused in one line."""
    from lbhash.indexes.index_dir import IndexLocation, build_index, open_index
    from lbhash.serving.index_store import MilvusStore
    from lbhash.indexes.instance_codes import index_transform
    from lbhash.indexes.origins import FORMAT, SOURCES, read_sources

    rng = np.random.default_rng(6)
    codes, labels, emb = random_codes(rng, 300, 32), rng.integers(0, 4, 300), rng.standard_normal((300, 64))
    path = tmp_path / "enc.npz"
    np.savez(path, codes=codes, bits=np.int64(32), labels=labels, embeddings=emb)
    name = f"t_{uuid.uuid4().hex[:10]}"
    built = build_index(path, IndexLocation(name, "milvus", milvus_uri))
    try:
        assert built.instance_bits == 64  # the default length, cut to the embeddings' width
        flat = build_index(path, IndexLocation(str(tmp_path / "ix"))).index
        milvus = open_index(name, "milvus", milvus_uri)
        transform = index_transform(milvus)
        assert transform.digest() == index_transform(flat).digest()
        assert milvus.metadata["instance"] == flat.metadata["instance"]
        ids = np.arange(300)
        np.testing.assert_array_equal(milvus.get_instance_codes(ids), flat.get_instance_codes(ids))
        q, qe = codes[:8], emb[:8] + 0.1 * rng.standard_normal((8, 64))
        qi = transform.apply(qe)
        ranked = Queries(q, qe, qi, transform.mean)
        assert_same(blended_search(milvus, ranked, 5), blended_search(flat, ranked, 5))
        new, new_emb = random_codes(rng, 2, 32), rng.standard_normal((2, 64))
        MilvusStore(milvus).add(new, ids=[1000, 1001], labels=[1, 2], embeddings=new_emb)
        np.testing.assert_array_equal(milvus.get_instance_codes([1000, 1001]), transform.apply(new_emb))
        # the items' recorded sources: a removed or replaced item's goes, on the server too
        milvus.attachments[SOURCES] = json.dumps({"format": FORMAT, "data": "images:x", "ids": [0, 1, 2],
                                                  "sources": ["a.jpg", "b.jpg", "c.jpg"]}).encode()
        milvus.save_record()
        store = MilvusStore(open_index(name, "milvus", milvus_uri))
        store.remove([1])
        store.add(codes[2:3], ids=[2], upsert=True, embeddings=emb[2:3])
        store.add(new, ids=[1002, 1003], embeddings=new_emb)  # new ids: the record stays as it is
        record = read_sources(open_index(name, "milvus", milvus_uri))
        assert [record.source(i) for i in (0, 1, 2)] == ["a.jpg", None, None]
        milvus._client.upsert(f"{name}__lbhash", [{"id": 0, "part": "not base64 json", "pad": [0.0, 0.0]}])
        with pytest.raises(InputError, match=rf"Milvus collection '{name}__lbhash', the record of '{name}', is "
                                             r"damaged \(.*\): build the collection again$"):
            open_index(name, "milvus", milvus_uri)
    finally:
        _drop_both(milvus_uri, name)


def _drop_both(uri: str, name: str) -> None:
    """The collection and its companion, by pymilvus itself: with a damaged record `MilvusIndex` (and so
    its `drop`) refuses to open the collection."""
    import pymilvus

    client = pymilvus.MilvusClient(uri=uri)
    for collection in (name, f"{name}__lbhash"):
        if client.has_collection(collection):
            client.drop_collection(collection)
    client.close()


def changed_items(make_index, embeddings=None):
    """`tied_items` (hundreds of ties in both codes) in Milvus with instance codes and in a flat
    CodeIndex, under ids that are not positions, after the same removals and upserts."""
    codes, inst, labels = tied_items()
    ids = np.arange(400) * 3 + 7
    dim = None if embeddings is None else embeddings.shape[1]
    milvus = make_index(8, instance_bits=16, embedding_dim=dim)
    flat = CodeIndex(8)
    for index in (milvus, flat):
        index.add(codes, ids=ids, labels=labels, instance=inst, embeddings=embeddings)
        index.remove(ids[::5])
        index.add(codes[:30], ids=ids[:150:5], labels=labels[:30], instance=inst[:30], upsert=True,
                  embeddings=None if embeddings is None else embeddings[:30])
    return milvus, flat, codes, inst


def test_instance_search_is_the_brute_force_order_with_changes_filters_and_padding(make_index):
    milvus, _, codes, inst = changed_items(make_index)
    # the reference: what the changes leave, recomputed here from the arrays added
    ids = np.arange(400) * 3 + 7
    held = {int(i): r for r, i in enumerate(ids)}
    for i in ids[::5]:
        del held[int(i)]
    labels = tied_items()[2]
    held.update({int(i): r for r, i in enumerate(ids[:150:5])})
    ref_ids = np.array(sorted(held))
    rows = np.array([held[i] for i in ref_ids])
    q = inst[[0, 3, 9]]
    for k in (25, 400):  # 400: more than a filter leaves, so padded
        for filters in (None, [[1], [0, 2], [2]]):
            allowed = None if filters is None else np.array([[labels[r] in f for r in rows] for f in filters])
            want_d, want_i = top_k(q, inst[rows], ref_ids, k, allowed)
            got = milvus.instance_search(q, k, None if filters is None else SparseLabels.from_lists(filters))
            np.testing.assert_array_equal(got.ids, want_i)
            np.testing.assert_array_equal(got.distances, want_d)
    np.testing.assert_array_equal(milvus.get_instance_codes(ref_ids[::-1]), inst[rows[::-1]])
    np.testing.assert_array_equal(milvus.get_codes(ref_ids[::-1]), codes[rows[::-1]])


def test_the_blend_on_milvus_is_its_definition_ties_included(make_index):
    milvus, flat, codes, inst = changed_items(make_index)
    q, qi = codes[[0, 1, 2, 3]], inst[[0, 5, 7, 11]]
    for looks_like in (0.0, 0.5, 1.0):
        got = blended_search(milvus, Queries(q, instance=qi), 10, looks_like=looks_like, factor=3)
        for r, (ids, scores) in enumerate(brute_blend(flat, q, qi, 10, looks_like, 3, SIMILARITY_POWER)):
            assert got.ids[r].tolist() == ids.tolist()
            np.testing.assert_allclose(got.scores[r], scores, rtol=0, atol=1e-12)
        filters = SparseLabels.from_lists([[0], [1, 2], [2], [0]])
        assert_same(blended_search(milvus, Queries(q, instance=qi), 10, labels=filters, looks_like=looks_like, factor=3),
                    blended_search(flat, Queries(q, instance=qi), 10, labels=filters, looks_like=looks_like, factor=3))


def test_the_blend_on_milvus_scores_by_centred_cosine_of_the_float16_field(make_index):
    emb = np.abs(np.random.default_rng(3).standard_normal((400, 12)))  # all positive, as pooled features are
    milvus, flat, codes, inst = changed_items(make_index, emb)
    np.testing.assert_array_equal(milvus.get_embeddings(flat.ids()), flat.get_embeddings(flat.ids()))
    center = emb.mean(axis=0) / np.linalg.norm(emb.mean(axis=0))
    q, qi, qe = codes[1:4], inst[1:4], emb[1:4] * 2.0
    got = blended_search(milvus, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=4)
    for r, (ids, scores) in enumerate(brute_blend(flat, q, qi, 10, 0.7, 4, SIMILARITY_POWER, qe, center)):
        assert got.ids[r].tolist() == ids.tolist()
        np.testing.assert_allclose(got.scores[r], scores, atol=1e-9)
    assert got.ids[:, 0].tolist() == [10, 13, 16] and not got.same.any()  # each finds itself; no calibrated mark
    assert_same(got, blended_search(flat, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=4))
    for index in (milvus, flat):  # a calibrated mark (lbhash.instance.mark_rule), kept in the metadata
        index.metadata[MARK_KEY] = {"mark": "cosine", "threshold": 0.99}
    got = blended_search(milvus, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=4)
    # each finds itself twice (changed_items re-adds rows 0-149 under new ids: cosine 1), and nothing else that close
    assert got.same[:, :2].all() and not got.same[:, 2:].any()
    assert_same(got, blended_search(flat, Queries(q, qe, qi, center), 10, looks_like=0.7, factor=4))


def test_instance_codes_come_with_every_add_or_none_and_a_reopened_collection_keeps_them(make_index, milvus_uri):
    codes, inst, labels = tied_items(20)
    milvus = make_index(8, instance_bits=16, embedding_dim=4)
    emb = np.random.default_rng(0).standard_normal((20, 4))
    milvus.add(codes[:10], ids=np.arange(10), labels=labels[:10], instance=inst[:10], embeddings=emb[:10])
    with pytest.raises(InputError, match="keeps a 16-bit instance code per item"):
        milvus.add(codes[10:], ids=np.arange(10, 20), embeddings=emb[10:])
    with pytest.raises(InputError, match=r"instance codes has 3 bytes per code \(24 bits\), but the index holds 16-bit"):
        milvus.add(codes[10:], ids=np.arange(10, 20), instance=np.zeros((10, 3), np.uint8), embeddings=emb[10:])
    with pytest.raises(InputError, match="keeps a 4-dimensional embedding per item"):
        milvus.add(codes[10:], ids=np.arange(10, 20), instance=inst[10:])
    again = make_index(None, collection=milvus.collection)
    assert (again.bits, again.instance_bits, again.embedding_dim, again.ntotal) == (8, 16, 4, 10)
    assert again.stats()["instance_bits"] == 16
    assert_same(again.instance_search(inst[:3], 5), milvus.instance_search(inst[:3], 5))
    plain = make_index(8)
    plain.add(codes[:10], ids=np.arange(10))
    with pytest.raises(InputError, match=f"collection '{plain.collection}' keeps no instance codes .made without"):
        plain.add(codes[10:], ids=np.arange(10, 20), instance=inst[10:])
    with pytest.raises(InputError, match="keeps no instance codes"):
        plain.instance_search(inst[:1], 5)
    with pytest.raises(InputError, match="the index keeps no instance codes"):
        blended_search(plain, Queries(codes[:1], instance=inst[:1]), 5)
    assert milvus.ntotal == 10 and plain.ntotal == 10  # nothing added by a refused add


def test_a_server_that_does_not_answer_is_one_line(milvus_uri):
    from lbhash.index.milvus import MilvusIndex

    uri = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(InputError, match=f"cannot reach Milvus at {uri} ") as err:
        MilvusIndex(8, collection="t_unreachable", uri=uri, timeout=5)
    assert "\n" not in str(err.value)
