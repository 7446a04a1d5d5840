"""The service over an index that keeps embeddings: re-scored searches (codes with embeddings,
features, uploaded images) against blended_search and the brute-force reference, adds that keep
codes and embeddings together through the write-ahead log, and the one-line refusals."""

import io
import json
import os

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from index_fakes import FakeEncoder
from index_reference import clustered_codes, random_codes, rescored, ternary_embeddings
from lbhash.errors import InputError
from lbhash.index import RESCORE_FACTOR, CodeIndex, Queries, blended_search
from lbhash.index.rescore import unit_rows
from lbhash.serving.index_store import IndexStore
from lbhash.service import Limits, create_app
from serve_helpers import LOCAL

BITS, DIM = 16, 12  # DIM: the fake feature encoder's width, its embeddings


@pytest.fixture
def served(tmp_path, rng):
    codes, _ = clustered_codes(rng, 150, BITS, centers=10, max_flips=2)
    labels, emb = rng.integers(0, 3, 150), ternary_embeddings(rng, 150, DIM)
    index = CodeIndex(BITS)
    index.add(codes, labels=labels, embeddings=emb)
    index.save(tmp_path / "ix")
    encoder = FakeEncoder(dim=DIM, bits=BITS)
    limits = Limits(max_batch=20, max_k=50, max_rescore_candidates=100)
    with TestClient(create_app(tmp_path / "ix", encoder, limits=limits), base_url=LOCAL) as client:
        yield client, index, codes, labels, emb, encoder


def hits(reply):
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


def test_service_rescores_codes_with_embeddings_and_features(served, rng):
    client, index, codes, labels, emb, encoder = served
    queries, q_emb = random_codes(rng, 3, BITS), ternary_embeddings(rng, 3, DIM)
    body = {"codes": [q.tobytes().hex() for q in queries], "embeddings": q_emb.tolist(), "k": 5, "rescore_factor": 3,
            "labels": [[0], [1, 2], [0, 1, 2]]}
    results = hits(client.post("/search", json=body))
    expected = rescored(queries, q_emb, codes, np.arange(150), emb, 5, 3, [labels == 0, labels > 0, labels >= 0])
    for result, want in zip(results, expected):
        # looks_like 1 without instance codes: the cosine (cubed) decides; ties: distance, then id
        assert [(h["score"], h["distance"], h["id"]) for h in result["hits"]] == [(s ** 3, d, i) for s, d, i in want]
        assert all(h["same"] is False and "instance_distance" not in h for h in result["hits"])
        assert [h["labels"] for h in result["hits"]] == [[int(labels[i])] for _, _, i in want]
    default = hits(client.post("/search", json={"codes": body["codes"], "embeddings": body["embeddings"]}))
    # the default factor, within the service's cap (100 candidates for k = 10)
    factor = min(RESCORE_FACTOR, 100 // 10)
    assert [[h["id"] for h in r["hits"]] for r in default] == blended_search(index, Queries(queries, q_emb), 10,
                                                                              factor=factor).ids.tolist()
    x = rng.standard_normal((2, DIM))
    results = hits(client.post("/search", json={"features": x.tolist(), "k": 4}))  # on by default
    want = blended_search(index, Queries(encoder.encode(x), x), 4)
    assert [[h["id"] for h in r["hits"]] for r in results] == want.ids.tolist()
    assert [[h["score"] for h in r["hits"]] for r in results] == want.scores.tolist()
    plain = hits(client.post("/search", json={"features": x.tolist(), "k": 4, "rescore": False}))
    assert [[h["id"] for h in r["hits"]] for r in plain] == index.search(encoder.encode(x), 4).ids.tolist()
    assert all("score" not in h for r in plain for h in r["hits"])
    codes_only = hits(client.post("/search", json={"codes": body["codes"], "k": 2}))  # no embeddings: Hamming
    assert all("score" not in h for r in codes_only for h in r["hits"])
    item = client.get("/items/7").json()
    assert item["embedding"] == unit_rows(emb[7:8])[0].astype(float).tolist()


BAD = [
    ({"codes": ["0000"], "embeddings": [[0.5] * 11]}, 400, "are 11-dimensional but the index keeps 12-dimensional"),
    ({"codes": ["0000"], "embeddings": [[0.5] * 12] * 2}, 400, "embeddings has 2 rows but there are 1 queries"),
    ({"codes": ["0000", "0000"], "embeddings": [[0.5] * 12, [0.5]]}, 400, "embeddings must be lists of numbers"),
    ({"codes": ["0000"], "embeddings": [[float("nan")] + [0.0] * 11]}, 400, "embeddings holds nan at row 0"),
    ({"codes": ["0000"], "embeddings": [[0.5] * 12], "radius": 2}, 400, "give k, not radius"),
    ({"codes": ["0000"], "embeddings": [[0.5] * 12], "k": 30, "rescore_factor": 4}, 400, "at most 100"),
    ({"codes": ["0000"], "rescore_factor": 2}, 400, "a ranked search needs the queries' embeddings"),
    ({"codes": ["0000"], "rescore": True}, 400, "a ranked search needs the queries' embeddings"),
    ({"codes": ["0000"], "looks_like": 0.5}, 400, "a ranked search needs the queries' embeddings"),
    ({"codes": ["0000"], "embeddings": [[0.5] * 12], "rescore": False}, 400, "'embeddings' are for a ranked search"),
    ({"features": [[0.0] * 12], "rescore": False, "rescore_factor": 3}, 400,
     "rescore_factor and looks_like go with a ranked search"),
    ({"features": [[0.0] * 12], "rescore": False, "looks_like": 1}, 400,
     "rescore_factor and looks_like go with a ranked search"),
    ({"features": [[0.0] * 12], "embeddings": [[0.5] * 12]}, 400, "'embeddings' go with 'codes'"),
    ({"codes": ["0000"], "embeddings": [[0.5] * 12], "rescore_factor": 0}, 422, "rescore_factor"),
]


@pytest.mark.parametrize("body, status, fragment", BAD)
def test_service_refuses_bad_rescore_requests_in_one_line(served, body, status, fragment):
    client, *_ = served
    reply = client.post("/search", content=json.dumps(body), headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert fragment in detail and "\n" not in detail


def test_adds_keep_codes_and_embeddings_together(served, rng):
    client, index, *_ = served
    new = {"codes": ["00ff"], "ids": [500], "labels": [[1]]}
    reply = client.post("/items", json=new)
    assert reply.status_code == 400 and "keeps a 12-dimensional embedding per item" in reply.json()["detail"]
    reply = client.post("/items", json={**new, "embeddings": [[1.0] * 11]})
    assert reply.status_code == 400 and "11-dimensional" in reply.json()["detail"]
    assert client.post("/items", json={**new, "embeddings": [[1.0] * 12]}).status_code == 200
    x = rng.standard_normal((2, DIM))
    assert client.post("/items", json={"features": x.tolist(), "ids": [7, 501], "upsert": True}).status_code == 200
    got = client.get("/items/7").json()["embedding"]
    assert got == unit_rows(x[:1])[0].astype(float).tolist()  # the upsert replaced code and embedding
    assert client.get("/items/500").json()["embedding"] == unit_rows(np.ones((1, 12)))[0].astype(float).tolist()


def test_the_log_replays_embeddings_bit_for_bit(tmp_path, rng):
    """A crash before compaction: the new process replays adds, upserts and removals from the
    log, and its index holds exactly the embeddings the first one held; then compaction saves them."""
    codes, emb = random_codes(rng, 30, BITS), rng.standard_normal((30, DIM)) * 7
    index = CodeIndex(BITS)
    index.add(codes[:10], embeddings=emb[:10])
    index.save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix", compact_every=1000)
    store.add(codes[10:20], embeddings=emb[10:20])
    store.add(codes[20:23], ids=[2, 15, 40], upsert=True, embeddings=emb[20:23])
    store.remove([5])
    before = store.index.ids()
    held = store.embeddings(before)
    with pytest.raises(InputError, match="keeps a 12-dimensional embedding per item"):
        store.add(codes[23:24])
    assert store.wal.last_seq == 3  # the refused add logged nothing
    os.close(store._owner.fd)  # a crash: no close, no compaction
    again = IndexStore(tmp_path / "ix")
    assert again.pending == 3
    np.testing.assert_array_equal(again.index.ids(), before)
    np.testing.assert_array_equal(again.embeddings(before), held)
    np.testing.assert_array_equal(again.embeddings([2, 40]), unit_rows(emb[[20, 22]]))
    again.close()
    np.testing.assert_array_equal(CodeIndex.load(tmp_path / "ix").get_embeddings(before), held)


def test_a_log_whose_embeddings_disagree_with_the_index_is_refused(tmp_path, rng):
    codes = random_codes(rng, 4, BITS)
    index = CodeIndex(BITS)
    index.add(codes, embeddings=rng.standard_normal((4, DIM)))
    index.save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    store.add(codes[:2], embeddings=rng.standard_normal((2, DIM)))
    os.close(store._owner.fd)
    rewrite_record(store.wal.path, lambda r: r.update(embeddings=r["embeddings"][:1]))  # one embedding for two codes
    with pytest.raises(InputError, match="holds 1 embeddings for 2 codes; the embeddings and codes disagree") as err:
        IndexStore(tmp_path / "ix")
    assert "\n" not in str(err.value)


def test_uploaded_images_are_added_and_searched_with_their_embeddings(tmp_path, rng):
    encoder = FakeEncoder(bits=BITS, input_kind="images")
    CodeIndex(BITS, embedding_dim=6).save(tmp_path / "ix")  # the fake's image embeddings: 6 numbers
    images = [rng.integers(0, 256, (8 + i % 3, 8, 3), dtype=np.uint8) for i in range(12)]

    def files(imgs):
        out = []
        for n, img in enumerate(imgs):
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            out.append(("files", (f"q{n}.png", buf.getvalue(), "image/png")))
        return out

    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        assert client.post("/items/image", files=files(images[:10])).status_code == 200
        results = hits(client.post("/search/image", files=files(images[10:]), data={"k": "3", "rescore_factor": "2"}))
        plain = hits(client.post("/search/image", files=files(images[10:]), data={"k": "3", "rescore": "false"}))
    index = CodeIndex.load(tmp_path / "ix")
    stack = [img[None] for img in images]
    np.testing.assert_array_equal(index.get_embeddings(np.arange(10)),
                                  unit_rows(np.concatenate([encoder.outputs(s)[1] for s in stack[:10]])))
    q_codes = np.concatenate([encoder.encode(s) for s in stack[10:]])
    q_emb = np.concatenate([encoder.outputs(s)[1] for s in stack[10:]])
    want = blended_search(index, Queries(q_codes, q_emb), 3, factor=2)
    assert [[h["id"] for h in r["hits"]] for r in results] == want.ids.tolist()
    assert [[h["score"] for h in r["hits"]] for r in results] == want.scores.tolist()
    assert [[h["id"] for h in r["hits"]] for r in plain] == index.search(q_codes, 3).ids.tolist()


def test_a_log_carrying_instance_codes_for_an_index_that_keeps_none_is_refused(tmp_path, rng):
    """Issue 87: such a record (a log written for another index) replayed silently, its codes dropped."""
    codes = random_codes(rng, 4, BITS)
    index = CodeIndex(BITS)
    index.add(codes)
    index.save(tmp_path / "ix")
    store = IndexStore(tmp_path / "ix")
    store.add(codes[:2])
    os.close(store._owner.fd)
    rewrite_record(store.wal.path, lambda r: r.update(instance=["00ff", "ff00"]))
    with pytest.raises(InputError, match=r"record 1 carries instance codes but the index keeps none") as err:
        IndexStore(tmp_path / "ix")
    assert "\n" not in str(err.value)


def rewrite_record(wal, change) -> None:
    """The log's one record changed by `change` (a function of its dict), written back with its checksum."""
    import zlib

    record = json.loads(wal.read_bytes().split(b" ", 1)[1].rstrip(b"\n"))
    change(record)
    body = json.dumps(record, separators=(",", ":")).encode()
    wal.write_bytes(b"%08x %s\n" % (zlib.crc32(body), body))
