"""Typed answers for ids (lbhash.errors): `NotFound` for an id not in an index, `Conflict` for an
id already in it, raised by CodeIndex and MilvusIndex themselves (here over a fake collection,
tests/index_fakes.py), passed on by both stores and answered 404 and 409 by the service over
either backend (`lbhash index remove`'s exit 2 is in tests/cli/test_index_cli.py)."""

import numpy as np
import pytest
from fastapi.testclient import TestClient

from index_fakes import fake_milvus
from index_reference import ternary_embeddings, random_codes
from lbhash.errors import Conflict, InputError, NotFound
from lbhash.index import Backend, CodeIndex
from lbhash.serving.index_store import IndexStore, MilvusStore, Store
from lbhash.service import create_app
from serve_helpers import LOCAL

BITS = 16


@pytest.fixture(params=["faiss", "milvus"])
def index(request, rng):
    index = CodeIndex(BITS) if request.param == "faiss" else fake_milvus(BITS)
    index.add(random_codes(rng, 5, BITS), ids=[1, 2, 3, 4, 5], labels=[0, 1, 2, 0, 1])
    return index


def test_errors_are_input_errors():
    for kind in (NotFound, Conflict):
        assert issubclass(kind, InputError) and issubclass(kind, ValueError)
    assert str(NotFound("id 7 is not in the index")) == "id 7 is not in the index"  # no KeyError quoting


@pytest.mark.parametrize("call", [
    lambda ix: ix.get([2, 7]),
    lambda ix: ix.get_codes([7]),
    lambda ix: ix.labels_of([1, 7, 9]),
    lambda ix: ix.remove([3, 7]),
])
def test_an_unknown_id_is_not_found_and_changes_nothing(index, call):
    with pytest.raises(NotFound) as err:
        call(index)
    assert str(err.value) == "id 7 is not in the index"
    assert index.ntotal == 5


def test_a_taken_id_is_a_conflict_unless_upsert(index, rng):
    codes = random_codes(rng, 2, BITS)
    with pytest.raises(Conflict) as err:
        index.add(codes, ids=[9, 4])
    assert str(err.value) == "id 4 is already in the index (pass upsert=True to replace it)"
    assert index.ntotal == 5
    index.add(codes, ids=[9, 4], upsert=True)
    assert index.ntotal == 6 and index.get_codes([4]).tolist() == codes[1:].tolist()


def test_both_backends_and_both_stores_have_one_interface(tmp_path):
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    try:
        for backend, own in ((CodeIndex(BITS), store), (fake_milvus(BITS), MilvusStore(fake_milvus(BITS)))):
            assert isinstance(backend, Backend) and isinstance(own, Store) and isinstance(own.index, Backend)
    finally:
        store.close()
    with pytest.raises(TypeError, match="an index directory or a lbhash.serving.index_store.Store, not CodeIndex"):
        create_app(CodeIndex(BITS))  # a backend is served through a store


def test_index_store_refuses_an_unknown_id_before_logging_it(tmp_path, rng):
    CodeIndex(BITS).save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    try:
        store.add(random_codes(rng, 3, BITS), ids=[1, 2, 3])
        seq = store.wal.last_seq
        with pytest.raises(NotFound, match="^id 7 is not in the index$"):
            store.remove(np.array([2, 7]))
        assert store.wal.last_seq == seq and store.ntotal == 3 and store.index.contains([2]).tolist() == [True]
        assert store.remove(np.array([2])) == seq + 1
    finally:
        store.close()
    reopened = IndexStore(tmp_path / "ix")  # what the log replays is what was acknowledged
    try:
        assert reopened.index.ids().tolist() == [1, 3]
    finally:
        reopened.close()


def test_milvus_store_passes_the_typed_errors_on(rng):
    store = MilvusStore(fake_milvus(BITS))
    store.add(random_codes(rng, 2, BITS), ids=[1, 2])
    with pytest.raises(Conflict, match="id 2 is already in the index"):
        store.add(random_codes(rng, 1, BITS), ids=[2])
    with pytest.raises(NotFound, match="id 5 is not in the index"):
        store.get(np.array([5]))
    with pytest.raises(NotFound, match="id 5 is not in the index"):
        store.remove(np.array([1, 5]))
    assert store.ntotal == 2


def test_the_service_answers_404_and_409_over_either_backend(tmp_path, rng):
    codes, labels = random_codes(rng, 30, BITS), rng.integers(0, 3, 30)
    emb = ternary_embeddings(rng, 30, 6)
    faiss_index = CodeIndex(BITS)
    faiss_index.add(codes, labels=labels, embeddings=emb)
    faiss_index.save(tmp_path / "ix")
    milvus = fake_milvus(BITS, 6)
    milvus.add(codes, ids=np.arange(30), labels=labels, embeddings=emb)
    queries = [c.tobytes().hex() for c in codes[:3]]
    q_emb = ternary_embeddings(rng, 3, 6).tolist()
    searches = [{"codes": queries, "k": 7}, {"codes": queries, "radius": 4, "labels": [[0], [1, 2], [2]]},
                {"codes": queries, "embeddings": q_emb, "k": 5, "rescore_factor": 2}]
    answers = {}
    for name, source in (("faiss", tmp_path / "ix"), ("milvus", MilvusStore(milvus))):
        with TestClient(create_app(source), base_url=LOCAL) as client:
            new = {"codes": [codes[0].tobytes().hex()], "ids": [3], "embeddings": [[1.0] * 6]}
            assert client.post("/items", json=new).status_code == 409
            assert "id 3 is already in the index" in client.post("/items", json=new).json()["detail"]
            for method in ("get", "delete"):
                reply = getattr(client, method)("/items/99")
                assert reply.status_code == 404 and reply.json() == {"detail": "id 99 is not in the index"}
            assert client.get("/items/3").status_code == 200
            answers[name] = [client.post("/search", json=body).json() for body in searches]
    assert answers["milvus"] == answers["faiss"]  # one search path: the same hits, labels and scores
    assert all("results" in answer for answer in answers["faiss"])
