"""`SearchPath` (lbhash.service.app): a well-formed POST /search is answered past FastAPI's route,
with the route's answers and errors; a body that does not validate gets the route's own 422."""

import numpy as np
import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from index_reference import random_codes, top_k
from lbhash.index import CodeIndex
from lbhash.service import create_app, depends
from serve_helpers import LOCAL

BITS = 32


@pytest.fixture
def counted(tmp_path, rng):
    """A client, the index's codes, and how many times FastAPI resolved the route's store dependency."""
    codes = random_codes(rng, 100, BITS)
    index = CodeIndex(BITS)
    index.add(codes)
    index.save(tmp_path / "ix")
    app = create_app(tmp_path / "ix")
    calls = []

    async def store(request: Request):
        calls.append(request.url.path)
        return request.app.state.store

    app.dependency_overrides[depends.store] = store
    with TestClient(app, base_url=LOCAL) as client:
        yield client, codes, calls


@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8",
                                          "application/vnd.search+json"])
def test_a_valid_search_is_answered_without_the_route(counted, content_type):
    client, codes, calls = counted
    queries = codes[:2] ^ np.uint8(3)
    body = '{"codes": ["%s", "%s"], "k": 4}' % tuple(q.tobytes().hex() for q in queries)
    headers = {} if content_type is None else {"content-type": content_type}
    reply = client.post("/search", content=body, headers=headers)
    assert reply.status_code == 200, reply.text
    ref_d, ref_i = top_k(queries, codes, np.arange(100), 4)
    for q, result in enumerate(reply.json()["results"]):
        assert result["code"] == queries[q].tobytes().hex()
        assert [(h["id"], h["distance"]) for h in result["hits"]] == list(zip(ref_i[q].tolist(), ref_d[q].tolist()))
    assert calls == []
    assert client.get("/health").status_code == 200 and calls == ["/health"]  # the override is in force


def test_errors_of_a_valid_body_are_the_handlers(counted):
    client, _, calls = counted
    reply = client.post("/search", json={"codes": ["zz"], "k": 4})  # not hex: the decoder's InputError
    assert reply.status_code == 400 and "\n" not in reply.json()["detail"] and "hex" in reply.json()["detail"]
    reply = client.post("/search", json={"codes": ["00000000"], "k": 10**9})  # over the k limit
    assert reply.status_code == 400 and "k" in reply.json()["detail"]
    assert calls == []


# FastAPI resolves the route's dependencies beside the body, but refuses JSON it cannot parse before them
@pytest.mark.parametrize("body, content_type, detail, resolved", [
    ('{"codes": ["00000000"], "k": "many"}', "application/json", "body.k: Input should be a valid integer", True),
    ("{not json", "application/json", "JSON decode error", False),
    ('["00000000"]', "application/json", "body: Input should be a valid dictionary", True),
    ('{"codes": ["00000000"]}', "text/plain", "body: Input should be a valid dictionary", True),
])
def test_a_body_that_does_not_validate_gets_the_routes_422(counted, body, content_type, detail, resolved):
    client, _, calls = counted
    reply = client.post("/search", content=body, headers={"content-type": content_type})
    assert reply.status_code == 422 and detail in reply.json()["detail"], reply.text  # FastAPI's words
    assert calls == (["/search"] if resolved else [])


def test_the_route_still_documents_search(counted):
    client, *_ = counted
    operation = client.get("/openapi.json").json()["paths"]["/search"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/SearchRequest")
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/SearchResponse")
    assert {"400", "413", "422"} <= set(operation["responses"])


@pytest.mark.parametrize("path", ["/search", "/items", "/sources"])
def test_json_nested_100000_deep_is_a_4xx_not_a_500(counted, path):
    """Python's JSON reader gives up on deep nesting with a RecursionError, which the lean
    /search path left to a bare 500 (issue 60, item 9)."""
    client, codes, _ = counted
    deep = "[" * 100_000 + "]" * 100_000
    for body in (deep, '{"codes": %s, "k": 3}' % deep):
        reply = client.post(path, content=body, headers={"content-type": "application/json"})
        assert 400 <= reply.status_code < 500, (reply.status_code, reply.text[:300])
        assert "\n" not in reply.json()["detail"]
    reply = client.post("/search", json={"codes": [codes[0].tobytes().hex()], "k": 3})
    assert reply.status_code == 200 and reply.json()["results"][0]["hits"][0]["id"] == 0
