"""The HTTP service in process (FastAPI TestClient): endpoints, 4xx answers, the log."""

import io
import os
import socket
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from helpers import cli, one_line_error, snapshot
from index_fakes import FakeEncoder
from index_reference import random_codes, top_k
from lbhash.errors import InputError
from lbhash.index import CodeIndex, Queries, SearchOptions, plan_search
from lbhash.serving.index_store import IndexStore, wal_path_for
from lbhash.service import Limits, create_app
from serve_helpers import LOCAL

BITS = 32


@pytest.fixture
def served(tmp_path, rng):
    codes = random_codes(rng, 200, BITS)
    labels = rng.integers(0, 4, 200)
    index = CodeIndex(BITS)
    index.add(codes, labels=labels)
    index.save(tmp_path / "ix")
    encoder = FakeEncoder(dim=12, bits=BITS)
    app = create_app(tmp_path / "ix", encoder, limits=Limits(max_body_bytes=200_000, max_batch=50, max_k=100))
    with TestClient(app, base_url=LOCAL) as client:
        yield client, codes, labels, tmp_path / "ix", encoder


def hexes(codes):
    return [c.tobytes().hex() for c in codes]


def test_search_by_hex_codes_matches_reference_with_labels(served):
    client, codes, labels, _, _ = served
    queries = codes[:3] ^ np.uint8(1)
    reply = client.post("/search", json={"codes": hexes(queries), "k": 5})
    assert reply.status_code == 200, reply.text
    ref_d, ref_i = top_k(queries, codes, np.arange(200), 5)
    for q, result in enumerate(reply.json()["results"]):
        assert [h["id"] for h in result["hits"]] == ref_i[q].tolist()
        assert [h["distance"] for h in result["hits"]] == ref_d[q].tolist()
        assert [h["labels"] for h in result["hits"]] == [[int(labels[i])] for i in ref_i[q]]
    default_k = client.post("/search", json={"codes": hexes(queries[:1])}).json()["results"][0]["hits"]
    assert len(default_k) == 10


def test_radius_and_label_filter(served):
    client, codes, labels, _, _ = served
    reply = client.post("/search", json={"codes": hexes(codes[:2]), "radius": 12, "labels": [[1], [2, 3]]})
    assert reply.status_code == 200, reply.text
    allowed = [np.isin(labels, [1]), np.isin(labels, [2, 3])]
    for q, result in enumerate(reply.json()["results"]):
        d = np.unpackbits(codes[q] ^ codes, axis=1).sum(1)
        expected = sorted((int(d[i]), i) for i in range(200) if d[i] <= 12 and allowed[q][i])
        assert [(h["distance"], h["id"]) for h in result["hits"]] == expected


def test_feature_queries_use_the_attached_encoder(served, rng):
    client, codes, _, _, encoder = served
    x = rng.standard_normal((2, 12))
    reply = client.post("/search", json={"features": x.tolist(), "k": 4})
    ref_d, ref_i = top_k(encoder.encode(x), codes, np.arange(200), 4)
    assert [[h["id"] for h in r["hits"]] for r in reply.json()["results"]] == ref_i.tolist()


def test_add_get_upsert_delete(served, rng):
    client, codes, _, _, encoder = served
    new = random_codes(rng, 2, BITS)
    reply = client.post("/items", json={"codes": hexes(new), "labels": [[0, 2], []]})
    assert reply.status_code == 200 and reply.json()["ids"] == [200, 201] and reply.json()["ntotal"] == 202
    item = client.get("/items/200").json()
    assert item == {"id": 200, "code": new[0].tobytes().hex(), "labels": [0, 2]}
    hits = client.post("/search", json={"codes": hexes(new[:1]), "k": 1}).json()["results"][0]["hits"]
    assert hits[0]["id"] == 200 and hits[0]["distance"] == 0
    x = rng.standard_normal((1, 12))
    assert client.post("/items", json={"features": x.tolist(), "ids": [5], "upsert": True}).status_code == 200
    assert client.get("/items/5").json()["code"] == encoder.encode(x)[0].tobytes().hex()
    reply = client.delete("/items/201")
    assert reply.status_code == 200 and reply.json()["ntotal"] == 201 and reply.json()["seq"] == 3
    assert client.get("/items/201").status_code == 404
    stats = client.get("/stats").json()
    assert stats["ntotal"] == 201 and stats["last_seq"] == 3 and stats["input_kind"] == "features"
    assert client.get("/health").json() == {"status": "ok", "ntotal": 201}


BAD_REQUESTS = [
    ("post", "/search", {"json": {"codes": ["00ff"]}}, 400, "2 bytes, but the index holds 32-bit codes"),
    ("post", "/search", {"json": {"codes": ["zz00ff00"]}}, 400, "codes[0] is not a hex string"),
    ("post", "/search", {"content": '{"features": [[NaN, 1,1,1,1,1,1,1,1,1,1,1]]}',
                         "headers": {"content-type": "application/json"}}, 400, "holds nan at row 0, column 0"),
    ("post", "/search", {"json": {"features": [[1.0] * 5]}}, 400, "5 features per row, but the run was trained on 12"),
    ("post", "/search", {"json": {"features": [[1.0] * 12, [1.0] * 11]}}, 400, "of one length"),
    ("post", "/search", {"json": {"codes": ["00000000"], "k": 101}}, 400, "k must be at most 100"),
    ("post", "/search", {"json": {"codes": ["00000000"], "k": 0}}, 422, "body.k"),
    ("post", "/search", {"json": {"codes": ["00000000"], "k": 3, "radius": 2}}, 400, "either k or radius"),
    ("post", "/search", {"json": {"codes": ["00000000"] * 51}}, 400, "at most 50 queries"),
    ("post", "/search", {"json": {"codes": []}}, 400, "no queries given"),
    ("post", "/search", {"json": {}}, 400, "exactly one of 'codes' and 'features'"),
    ("post", "/search", {"json": {"codes": ["00000000"], "labels": [[70000]]}}, 400, "between 0 and 65535, got 70000"),
    ("post", "/search", {"json": {"codes": ["00000000"], "labels": [[1], [2]]}}, 400, "2 entries but there are 1"),
    ("post", "/search", {"json": {"codes": ["00000000"], "verbose": True}}, 422, "body.verbose"),
    ("post", "/search", {"content": "{not json", "headers": {"content-type": "application/json"}}, 422, "JSON"),
    ("post", "/search", {"content": "x" * 300_000, "headers": {"content-type": "application/json"}}, 413, "larger than"),
    ("post", "/items", {"json": {"codes": ["00000000"], "ids": [3]}}, 409, "id 3 is already in the index"),
    ("post", "/items", {"json": {"codes": ["00000000", "00000000"], "ids": [900, 900]}}, 400, "more than once"),
    ("post", "/items", {"json": {"codes": ["00000000"], "ids": [-4]}}, 400, "non-negative"),
    ("post", "/items", {"json": {"codes": ["00000000"], "ids": [2**64]}}, 400, "ids"),
    ("get", "/items/999", {}, 404, "id 999 is not in the index"),
    ("delete", "/items/999", {}, 404, "id 999 is not in the index"),
    ("get", "/items/-1", {}, 422, "item_id"),
    ("get", f"/items/{2**63}", {}, 422, "item_id"),
    ("post", "/search/image", {"files": {"files": ("a.png", b"png?", "image/png")}}, 400, "attached run encodes features"),
]


@pytest.mark.parametrize("method, path, kwargs, status, fragment", BAD_REQUESTS)
def test_bad_requests_are_4xx_with_one_line(served, method, path, kwargs, status, fragment):
    client, *_ = served
    reply = getattr(client, method)(path, **kwargs)
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert fragment in detail and "\n" not in detail and "Traceback" not in reply.text
    assert client.get("/health").json()["ntotal"] == 200  # nothing changed


def test_chunked_body_over_the_limit_is_413(served):
    client, *_ = served

    def chunks():
        for _ in range(30):
            yield b" " * 10_000

    reply = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "larger than 200000 bytes" in reply.json()["detail"]


def png(img):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def test_image_search_and_add(tmp_path, rng):
    encoder = FakeEncoder(bits=16, input_kind="images")
    images = [rng.integers(0, 256, (8 + i, 8, 3), dtype=np.uint8) for i in range(4)]
    index = CodeIndex(16)
    index.add(np.concatenate([encoder.encode(img[None]) for img in images[:3]]))
    index.save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        reply = client.post("/items/image", files=[("files", ("d.png", png(images[3]), "image/png"))],
                            data={"ids": "40", "labels": "1,2"})
        assert reply.status_code == 200, reply.text
        assert client.get("/items/40").json()["labels"] == [1, 2]
        reply = client.post("/search/image", files=[("files", ("q.png", png(images[3]), "image/png"))],
                            data={"k": "1", "labels": "2"})
        code = encoder.encode(images[3][None])[0].tobytes().hex()
        assert reply.json()["results"] == [{"code": code, "hits": [  # with what /sources says of the hit
            {"id": 40, "distance": 0, "labels": [1, 2], "source": "uploaded: d.png", "image": True, "code": code}]}]
        bad = client.post("/search/image", files=[("files", ("x.jpg", b"garbage", "image/jpeg"))])
        assert bad.status_code == 400 and "x.jpg: cannot decode image" in bad.json()["detail"]


def test_image_routes_refuse_bad_form_fields_in_one_line(tmp_path, rng):
    """The upload routes' form models keep the form's bounds and types, and name the field."""
    encoder = FakeEncoder(bits=16, input_kind="images")
    image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    CodeIndex(16).save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        def upload(path, data, files=True):
            reply = client.post(path, data=data, files=[("files", ("q.png", png(image), "image/png"))] if files else None)
            return reply.status_code, reply.json()["detail"]

        assert upload("/search/image", {"k": "0"}) == (422, "body.k: Input should be greater than or equal to 1")
        assert upload("/search/image", {"looks_like": "2"}) == (422, "body.looks_like: Input should be less than or "
                                                                     "equal to 1")
        assert upload("/search/image", {"rescore_factor": "0"})[1].startswith("body.rescore_factor: ")
        assert upload("/search/image", {"k": "1"}, files=False) == (422, "body.files: Field required")
        assert upload("/items/image", {"upsert": "maybe"})[1].startswith("body.upsert: Input should be a valid boolean")


def test_log_replay_after_a_crash_and_compaction(tmp_path, rng):
    codes = random_codes(rng, 20, BITS)
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix", compact_every=1000)
    store.add(codes[:10], labels=np.eye(3, dtype=bool)[np.arange(10) % 3])
    store.remove([4])
    store.add(codes[10:11], ids=[4])
    # a crash: no close, no compaction; the kernel drops the dead process's lock; a new one replays the log
    os.close(store._owner.fd)
    again = IndexStore(tmp_path / "ix")
    assert again.ntotal == 10 and again.pending == 3
    np.testing.assert_array_equal(again.get([4])[0], codes[10:11])
    assert again.get([5])[1] == [[2]]
    # crash after saving the index but before emptying the log: nothing applied twice
    again.wal.truncate = lambda: (_ for _ in ()).throw(OSError("crash"))
    with pytest.raises(OSError):
        again.compact()
    os.close(again._owner.fd)
    third = IndexStore(tmp_path / "ix")
    assert third.ntotal == 10 and third.pending == 0 and third.saved_seq == 3
    third.add(codes[11:12])
    assert third.wal.last_seq == 4
    third.close()
    assert wal_path_for(tmp_path / "ix").read_bytes() == b""
    assert CodeIndex.load(tmp_path / "ix").metadata["wal_seq"] == 4


def test_torn_and_damaged_log(tmp_path, rng):
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    store.add(random_codes(rng, 2, BITS))
    store.wal.close()
    os.close(store._owner.fd)  # a crash: the kernel drops the dead process's lock
    wal = wal_path_for(tmp_path / "ix")
    good = wal.read_bytes()
    wal.write_bytes(good + b'1234abcd {"seq":2,"op":"remo')  # a crash mid-append
    again = IndexStore(tmp_path / "ix")
    assert again.ntotal == 2
    assert wal.read_bytes() == good  # the torn tail is cut
    again.wal.close()
    os.close(again._owner.fd)
    wal.write_bytes(b"00000000 {}\n" + good)
    with pytest.raises(InputError, match="damaged record at line 1"):
        IndexStore(tmp_path / "ix")
    wal.write_bytes(good)  # a refused start released the index: the next one opens it
    IndexStore(tmp_path / "ix").close()


def test_a_damaged_whole_last_record_is_refused_not_dropped(tmp_path, rng):
    """Issue 69: a complete last line with a bad checksum was cut silently, losing a change that had
    been acknowledged (the line is written whole before the answer); now the start is refused,
    naming the line, and the log is left as it was."""
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    store.add(random_codes(rng, 2, BITS))
    store.add(random_codes(rng, 1, BITS))  # acknowledged: its line is written and fsynced
    store.wal.close()
    os.close(store._owner.fd)  # a crash
    wal = wal_path_for(tmp_path / "ix")
    lines = wal.read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[2] == b""
    damaged = lines[0] + b"\n" + lines[1][:-3] + b"X" + lines[1][-2:] + b"\n"  # one byte of the last record flipped
    wal.write_bytes(damaged)
    with pytest.raises(InputError, match=r"damaged record at line 2 \(the last; it may be an acknowledged change\); "
                                         r"refusing to replay the log: restore the file, or delete that line"):
        IndexStore(tmp_path / "ix")
    assert wal.read_bytes() == damaged  # nothing cut
    wal.write_bytes(lines[0] + b"\n")  # the operator drops the change: the first add replays
    again = IndexStore(tmp_path / "ix")
    assert again.ntotal == 2
    again.close()


def test_one_server_per_index(tmp_path, rng):
    """Issue 27, item 1: a second store (server) on the same index is refused in one line."""
    CodeIndex(BITS).save(tmp_path / "ix")
    first = IndexStore(tmp_path / "ix")
    with pytest.raises(InputError, match=f"ix is served by another process \\(pid {os.getpid()}, lbhash serve;"):
        IndexStore(tmp_path / "ix")
    first.add(random_codes(rng, 1, BITS), ids=[777777])
    first.close()
    second = IndexStore(tmp_path / "ix")
    assert second.get([777777])[0].shape == (1, BITS // 8)
    second.close()


def test_a_large_class_id_over_http_writes_small_label_files(tmp_path, rng):
    """Issue 27, item 2: POST /items {"labels": [[65535]]} on a 2,000-item index wrote a 131 MB
    labels.npy (a dense (2001, 65536) matrix); labels now stay sparse in the log, the index and
    its files, and every answer is what it was."""
    codes = random_codes(rng, 2001, BITS)
    index = CodeIndex(BITS)
    index.add(codes[:2000], labels=rng.integers(0, 4, 2000))
    index.save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix"), base_url=LOCAL) as client:
        reply = client.post("/items", json={"codes": hexes(codes[2000:]), "labels": [[65535, 3, 65535]]})
        assert reply.status_code == 200 and reply.json()["ids"] == [2000], reply.text
        store = client.app.state.store
        assert store.index.num_classes == 65536 and store.index._main.labels.nbytes + store.index._tail.labels.nbytes < 64 * 1024
        assert '"labels":[[3,65535]]' in wal_path_for(tmp_path / "ix").read_text()
        assert client.get("/items/2000").json() == {"id": 2000, "code": hexes(codes[2000:])[0], "labels": [3, 65535]}
        hits = client.post("/search", json={"codes": hexes(codes[2000:]), "k": 3, "labels": [[65535]]}).json()
        assert hits["results"][0]["hits"] == [{"id": 2000, "distance": 0, "labels": [3, 65535], "source": None,
                                               "image": False, "code": hexes(codes[2000:])[0]}]
    files = {f.name: f.stat().st_size for f in (tmp_path / "ix").iterdir()}
    assert "labels.npy" not in files and files["labels_indices.npy"] < 4 * 2002 + 200, files
    assert files["labels_indptr.npy"] < 8 * 2002 + 200 and sum(files.values()) < 200_000, files
    assert CodeIndex.load(tmp_path / "ix").labels_of([2000, 0]) == [[3, 65535], [int(index.labels_of([0])[0][0])]]


def test_concurrent_reads_and_writes(tmp_path, rng):
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix", compact_every=25)
    codes = random_codes(rng, 400, BITS)
    errors = []

    def writer(part):
        try:
            for i in part:
                store.add(codes[i:i + 1], ids=[i])
        except Exception as err:  # collected for the assertion below
            errors.append(err)

    def reader():
        try:
            for _ in range(100):
                for hits in store.search(Queries(codes[:4]), plan_search(SearchOptions(5))):
                    assert hits.distances == sorted(hits.distances) and len(set(hits.ids)) == len(hits.ids)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(range(w, 400, 4),)) for w in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and store.ntotal == 400
    store.close()
    loaded = CodeIndex.load(tmp_path / "ix")
    assert loaded.ntotal == 400 and loaded.metadata["wal_seq"] == 400
    np.testing.assert_array_equal(loaded.get(np.arange(400))[0], codes)


def test_the_test_client_imports_without_a_deprecation_warning():
    """Starlette's TestClient warns (StarletteDeprecationWarning, a UserWarning) when it has to
    fall back to httpx; the test extra installs httpx2, which it prefers (`make install`)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-W", "error", "-c", "import fastapi.testclient"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"install the test extra (make install): {result.stderr.strip()[-500:]}"


def test_a_busy_port_is_one_line_and_touches_no_file(input_files):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        before = snapshot(input_files)
        one_line_error(cli("serve", input_files / "idx", "--host", "127.0.0.1", "--port", port),
                       f"--port {port}", f"127.0.0.1:{port}", "in use")
    assert snapshot(input_files) == before  # no write-ahead log was created


def test_the_server_loads_the_scan_before_its_first_request(tmp_path, rng, monkeypatch):
    # the exact scan loads its compiled code on a process's first use: start-up pays it, not a client
    # (ranked_knn: the compiled scan; a small search's numpy scan loads nothing)
    from lbhash.index._engines import FlatEngine

    for name, kind, n in (("flat", "flat", 50), ("empty", "flat", 0), ("ivf", "ivf", 50)):
        index = CodeIndex(BITS, kind)
        index.add(random_codes(rng, n, BITS))
        index.save(tmp_path / name)
    scans = []
    original = FlatEngine.ranked_knn
    monkeypatch.setattr(FlatEngine, "ranked_knn",
                        lambda self, *args: scans.append(len(args[1])) or original(self, *args))
    for name in ("flat", "empty", "ivf"):
        scans.clear()
        with TestClient(create_app(tmp_path / name), base_url=LOCAL):
            assert scans and set(scans) == {1}, name  # one-query scans, before any request


def test_searches_of_an_index_run_on_one_thread_per_usable_cpu(tmp_path, rng, monkeypatch):
    # a scan uses a core and lets go of the GIL: more search threads than cores only queue for both;
    # the cores are those the process may use (a container's CPU set), not the machine's
    import lbhash.cpus

    index = CodeIndex(BITS)
    index.add(random_codes(rng, 20, BITS))
    index.save(tmp_path / "ix")
    monkeypatch.setattr(lbhash.cpus.os, "cpu_count", lambda: 8)  # Offload's own default would be 7 or 12
    monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    with TestClient(create_app(tmp_path / "ix"), base_url=LOCAL) as client:
        assert client.post("/search", json={"codes": [random_codes(rng, 1, BITS)[0].tobytes().hex()]}).status_code == 200
        assert len(client.app.state.offload._workers) == 3


def test_offload_runs_jobs_in_its_threads_and_hands_back_results_and_errors():
    import asyncio

    from lbhash.service.offload import Offload

    offload = Offload(threads=2)

    def boom():
        raise KeyError("k")

    async def main():
        names = await asyncio.gather(*(offload.run(lambda i=i: (i, threading.current_thread().name)) for i in range(20)))
        with pytest.raises(KeyError):
            await offload.run(boom)
        return names

    names = asyncio.run(main())
    assert [i for i, _ in names] == list(range(20))
    assert {name for _, name in names} <= {"lbhash-offload-0", "lbhash-offload-1"}
    workers = list(offload._workers)
    offload.close()
    assert workers and not any(w.is_alive() for w in workers)


def test_offload_drops_the_answer_of_a_request_that_was_cancelled():
    import asyncio

    from lbhash.service.offload import Offload

    offload, release, finished = Offload(threads=1), threading.Event(), threading.Event()

    def slow():
        release.wait(10)
        finished.set()
        return 1

    errors = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        task = asyncio.ensure_future(offload.run(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await offload.run(lambda: 2) == 2  # the worker survived the cancelled job

    asyncio.run(main())
    assert finished.is_set() and errors == []  # no answer set on the cancelled future
    offload.close()


def test_serve_sets_the_interpreter_up_while_it_runs_and_restores_it(tmp_path, rng, monkeypatch):
    import gc
    import sys

    import uvicorn

    from lbhash.service.http import FULL_COLLECTION_AFTER, SWITCH_INTERVAL_S

    index = CodeIndex(BITS)
    index.add(random_codes(rng, 20, BITS))
    index.save(tmp_path / "ix")
    seen = []

    def run(self, sockets=None):
        seen.append((sys.getswitchinterval(), gc.get_threshold()[2], gc.get_freeze_count() > 0))
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    before = (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count())
    result = cli("serve", tmp_path / "ix", "--port", 0)
    assert result.exit_code == 0, result.output
    # while serving: the short switch interval, rare full collections, start-up's objects frozen
    assert seen == [(SWITCH_INTERVAL_S, FULL_COLLECTION_AFTER, True)]
    assert SWITCH_INTERVAL_S < before[0] and FULL_COLLECTION_AFTER > before[1][2]
    assert (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()) == before


def test_a_radius_search_over_max_k_hits_is_400_in_one_line(served):
    """A radius search returns at most max_k hits per query, as k may ask (issue 60, item 9)."""
    client, codes, _, _, _ = served
    reply = client.post("/search", json={"codes": hexes(codes[:2]), "radius": BITS})  # all 200 items
    assert reply.status_code == 400, reply.text
    assert reply.json()["detail"] == ("radius 32 finds 200 items for query 0, more than the 100 a search returns per "
                                      "query (as k): give a smaller radius, or k for the nearest")
    assert client.post("/search", json={"codes": hexes(codes[:2]), "radius": 8}).status_code == 200
