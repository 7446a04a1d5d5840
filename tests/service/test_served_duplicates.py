"""GET /duplicates (issue 88, item 3): the groups of copies inside the served index, a page at a time, as
`lbhash duplicates` finds them; its refusals in one line, the read key, and the groups kept until the index
changes (tests/copies_helpers.py builds the index)."""

import numpy as np
import pytest
from fastapi.testclient import TestClient

from copies_helpers import copies_index
from lbhash.index import CodeIndex
from lbhash.instance import MARK_KEY
from lbhash.indexes import duplicates as runs_duplicates
from lbhash.indexes.duplicates import find_duplicates
from lbhash.service import create_app
from lbhash.service.access import KEY_HEADER, Access
from page_helpers import make_image_tree
from serve_helpers import LOCAL


@pytest.fixture
def indexed(tmp_path, rng):
    return copies_index(tmp_path / "ix", rng)


@pytest.fixture
def client(indexed):
    with TestClient(create_app(indexed[0]), base_url=LOCAL) as client:
        yield client


def one_line(reply) -> bool:
    detail = reply.json()["detail"]
    return isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail


def whole(client, **params) -> dict:
    reply = client.get("/duplicates", params={"limit": 100, **params})
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("threshold", [None, 0.8])
def test_the_groups_are_those_lbhash_duplicates_finds(indexed, client, threshold):
    want = find_duplicates(indexed[0], threshold)
    body = whole(client, **({} if threshold is None else {"threshold": threshold}))
    assert [0, 60, 61, 62] in [g["items"] for g in body["groups"]]  # the planted copies are there
    assert [{k: g[k] for k in ("items", "sources", "pairs", "pair_count")} for g in body["groups"]] == want.groups
    assert (body["measure"], body["threshold"], body["items"], body["pairs"]) == (
        want.measure, want.threshold, want.items, want.pairs)
    assert body["total"] == len(want.groups) and body["offset"] == 0 and body["limit"] == 100
    assert all(g["images"] == [None] * len(g["items"]) for g in body["groups"])  # no sources: no thumbnails
    assert all(g["size"] == len(g["items"]) and all(isinstance(i, int) for p in g["pairs"] for i in p[:2])
               for g in body["groups"])


def test_the_pages_split_the_groups_in_order(indexed, client):
    groups = whole(client)["groups"]
    assert len(groups) >= 3 and [len(g["items"]) for g in groups] == sorted((len(g["items"]) for g in groups),
                                                                           reverse=True)
    for limit in (1, 2):
        pages = [client.get("/duplicates", params={"offset": offset, "limit": limit}).json()
                 for offset in range(0, len(groups) + 1, limit)]
        assert all(p["total"] == len(groups) and p["limit"] == limit for p in pages)
        assert [g for p in pages for g in p["groups"]] == groups
        assert all(len(p["groups"]) == min(limit, len(groups) - p["offset"]) for p in pages)
    assert client.get("/duplicates", params={"offset": 1000}).json()["groups"] == []
    default = client.get("/duplicates").json()
    assert default["offset"] == 0 and default["limit"] == 20
    bigger = client.get("/duplicates", params={"min_group": 3}).json()
    assert [g["items"] for g in bigger["groups"]] == [g["items"] for g in find_duplicates(indexed[0], None, 3).groups]
    assert bigger["total"] == len(bigger["groups"]) and all(len(g["items"]) >= 3 for g in bigger["groups"])


def test_a_large_group_gives_its_first_items(client, monkeypatch):
    from lbhash.service import duplicates

    monkeypatch.setattr(duplicates, "GROUP_ITEMS", 2)
    group = client.get("/duplicates", params={"limit": 1}).json()["groups"][0]
    assert group["size"] == 4 and group["items"] == [0, 60] and len(group["sources"]) == len(group["images"]) == 2


@pytest.mark.parametrize("params, name", [
    ({"offset": -1}, "offset"), ({"offset": "x"}, "offset"), ({"limit": 0}, "limit"), ({"limit": 101}, "limit"),
    ({"threshold": 0}, "threshold"), ({"threshold": 1.5}, "threshold"), ({"threshold": "nan"}, "threshold"),
    ({"threshold": "inf"}, "threshold"), ({"min_group": 1}, "min_group"), ({"min_group": 2.5}, "min_group"),
])
def test_a_bad_parameter_is_422_in_one_line_naming_it(client, params, name):
    reply = client.get("/duplicates", params=params)
    assert reply.status_code == 422 and one_line(reply) and f"query.{name}" in reply.json()["detail"], reply.text


def test_an_index_that_cannot_tell_copies_is_400_saying_why(indexed, tmp_path, rng):
    plain = CodeIndex(16)
    plain.add(rng.integers(0, 256, (5, 2), dtype=np.uint8))
    plain.save(tmp_path / "plain")
    with TestClient(create_app(tmp_path / "plain"), base_url=LOCAL) as client:
        reply = client.get("/duplicates")
        assert reply.status_code == 400 and one_line(reply)
        assert "the served index: the index keeps no instance codes" in reply.json()["detail"]
    unmarked = CodeIndex.load(indexed[0])
    del unmarked.metadata[MARK_KEY]
    unmarked.save(tmp_path / "unmarked")
    with TestClient(create_app(tmp_path / "unmarked"), base_url=LOCAL) as client:
        reply = client.get("/duplicates")
        assert reply.status_code == 400 and one_line(reply)
        assert "no calibrated same-picture mark" in reply.json()["detail"] and "threshold" in reply.json()["detail"]
        assert client.get("/duplicates", params={"threshold": 0.9}).json()["total"] >= 3


def test_the_groups_are_kept_until_the_index_changes(indexed, client, monkeypatch):
    _, emb = indexed
    searches = []
    real = runs_duplicates.index_groups
    monkeypatch.setattr(runs_duplicates, "index_groups", lambda *a, **kw: searches.append(a[2]) or real(*a, **kw))
    first = whole(client)
    assert whole(client) == first and client.get("/duplicates", params={"offset": 1, "min_group": 3}).status_code == 200
    assert searches == [None]  # one search, kept: other pages and sizes read it
    whole(client, threshold=0.8)
    whole(client)
    assert searches == [None, 0.8]  # a threshold is searched once too
    assert not any(10 in g["items"] for g in first["groups"])
    copy = emb[10] + 0.01 * np.random.default_rng(1).standard_normal(emb.shape[1])
    added = client.post("/items", json={"codes": ["00ff"], "embeddings": [copy.tolist()]})
    assert added.status_code == 200, added.text
    new = added.json()["ids"][0]
    after = whole(client)
    assert searches == [None, 0.8, None]
    assert [10, new] in [g["items"] for g in after["groups"]] and after["items"] == first["items"] + 1
    assert client.delete(f"/items/{new}").status_code == 200
    assert whole(client)["groups"] == first["groups"] and len(searches) == 4


def test_the_groups_need_the_read_key_where_reads_do(indexed):
    key = "r" * 20
    with TestClient(create_app(indexed[0], access=Access(read_key=key)), base_url=LOCAL) as client:
        assert client.get("/duplicates").status_code == 401
        assert client.get("/duplicates", headers={KEY_HEADER: key}).json()["total"] >= 3


def test_each_item_comes_with_its_source_and_thumbnail(tmp_path, rng):
    """An index whose items' sources are recorded: the page's thumbnails of a group are there to show."""
    tree = make_image_tree(tmp_path / "imgs", train=16, test=0)  # 64 images: 57 photos and 7 copies
    path, _ = copies_index(tmp_path / "ix", rng, n=57, tree=tree)
    with TestClient(create_app(path), base_url=LOCAL) as client:
        group = next(g for g in whole(client)["groups"] if g["items"] == [0, 57, 58, 59])
        assert group["images"] == [f"/items/{i}/image" for i in group["items"]]
        assert all(s and s.endswith(".png") for s in group["sources"])
        thumbnails = [client.get(url).content for url in group["images"]]
        assert thumbnails[0][:4] == b"\x89PNG" and len(set(thumbnails)) == 1  # the copies are the photo's file


def test_a_milvus_store_says_it_cannot_list_its_items():
    from types import SimpleNamespace

    from lbhash.errors import InputError
    from lbhash.indexes.duplicates import ServedGroups

    with pytest.raises(InputError, match="the milvus backend cannot list its items for duplicates"):
        ServedGroups(SimpleNamespace(backend="milvus", changes=0)).groups()
