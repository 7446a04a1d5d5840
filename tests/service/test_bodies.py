"""Request bodies checked in bounded memory before pydantic (lbhash.service.bodies, issue 69 items 3
and 4): a body of many bad elements or unknown keys answers a 422 naming the first few in one line,
and the errors it makes stay few; the check accepts exactly what the models do."""

import json
import tracemalloc

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from index_reference import random_codes
from lbhash.index import CodeIndex
from lbhash.service import Limits, create_app, models
from lbhash.limits import MAX_BATCH
from lbhash.service.bodies import MAX_ERRORS, MAX_LISTS, BodyErrors, check_body, list_shapes
from serve_helpers import LOCAL

BITS = 32
# bad elements or unknown keys in one body: pydantic made an error (about 0.8 KB) of each, kept whole; at
# 50,000 its errors' peak (37-40 MB, measured with tracemalloc) is still twice to four times the bound the
# test asserts (10-18 MB), and the body is checked four times faster than at 200,000
N = 50_000


@pytest.fixture
def client(tmp_path, rng):
    index = CodeIndex(BITS, embedding_dim=4)
    index.add(random_codes(rng, 20, BITS), embeddings=rng.standard_normal((20, 4)))
    index.save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix", limits=Limits(max_body_bytes=4 << 20)), base_url=LOCAL) as client:
        yield client


def post_traced(client, path: str, body: dict) -> tuple:
    """(the answer, the peak of Python's allocations while it was made, the body's bytes) of a JSON body."""
    raw = json.dumps(body, separators=(",", ":"))
    tracemalloc.start()
    try:
        reply = client.post(path, content=raw, headers={"content-type": "application/json"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return reply, peak, len(raw)


@pytest.mark.parametrize("path, body, first, more", [
    ("/search", {"codes": [1] * N}, "body.codes.0: Input should be a valid string", N - MAX_ERRORS),
    ("/items", {"codes": [1] * N}, "body.codes.0: Input should be a valid string", N - MAX_ERRORS),
    ("/search", {"codes": ["00" * 4], **{f"x{i}": 1 for i in range(N)}}, "body.x0: Extra inputs are not permitted",
     N - MAX_ERRORS),
    ("/items", {"codes": ["00" * 4], **{f"x{i}": 1 for i in range(N)}}, "body.x0: Extra inputs are not permitted",
     N - MAX_ERRORS),
    ("/items", {"codes": ["00" * 4], "labels": [["a"] * N]}, "body.labels.0.0: Input should be a valid integer",
     N - MAX_ERRORS),
    ("/search", {"codes": ["00" * 4], "embeddings": [[True] * N]},
     "body.embeddings.0.0: Input should be a valid number", N - MAX_ERRORS),
    ("/search", {"features": [{}] * N}, "body.features.0: Input should be a valid list", N - MAX_ERRORS),
])
def test_a_body_of_many_bad_elements_is_one_line_in_bounded_memory(client, path, body, first, more):
    """Before, 8,000,000 integers where hex codes go took 66 s and 11.5 GB for their 422, 1.3 million
    unknown keys 2.2 GB: an error of each, kept whole until the answer. Now the first MAX_ERRORS are
    named, the others counted, and the errors held stay few."""
    reply, peak, size = post_traced(client, path, body)
    detail = reply.json()["detail"]
    assert reply.status_code == 422 and "\n" not in detail, reply.text
    # bytes: the body, read and parsed (2.5 MB for 0.4 MB of integers, 36 MB for 2.7 MB of keys); before,
    # pydantic's errors took 180 to 220 MB in every case
    assert peak < 20 * size + (8 << 20), (peak, size)
    assert detail.startswith(first + "; ") and detail.endswith(f"; and {more:,} more errors ({more + MAX_ERRORS:,} "
                                                                 "in all)"), detail
    assert detail.count(": ") == MAX_ERRORS and len(detail) < 600, detail
    assert client.get("/health").json()["ntotal"] == 20  # nothing added


@pytest.mark.parametrize("path", ["/search", "/items"])
def test_a_body_of_many_small_rows_is_refused_before_it_is_parsed(client, path):
    """Issue 87: 16 MB of one-number rows ([[1],[1],...], 4.1 million) parsed to as many Python lists
    took 1.1 GB before their 400. A body holds at most MAX_LISTS lists (MAX_BATCH rows a field), counted
    before parsing: 500,000 rows (2 MB) answer a 422 with no more memory than about the body's."""
    rows = 500_000
    reply, peak, size = post_traced(client, path, {"codes": ["0f" * 4], "embeddings": [[1]] * rows, "k": 1})
    detail = reply.json()["detail"]
    assert reply.status_code == 422 and "\n" not in detail, reply.text
    assert f"holds {rows + 2:,} JSON lists" in detail and f"batches of {MAX_BATCH:,}" in detail, detail
    assert peak < 4 * size + (8 << 20), (peak, size)  # parsed, the rows alone were 20 times the body
    # the most a request of MAX_BATCH rows a field holds passes the count (and is searched)
    full = {"codes": ["0f" * 4] * MAX_BATCH, "embeddings": [[1, 0, 0, 0]] * MAX_BATCH,
            "labels": [[0]] * MAX_BATCH} | ({"k": 1} if path == "/search" else {})
    assert json.dumps(full).count("[") <= MAX_LISTS
    assert client.post(path, json=full).status_code == 200


def test_a_few_errors_are_each_named(client):
    reply = client.post("/items", json={"codes": ["00" * 4, 5], "verbose": True, "ids": [1, "2"]})
    assert reply.status_code == 422
    assert reply.json()["detail"] == ("body.verbose: Extra inputs are not permitted; body.codes.1: Input should be "
                                      "a valid string; body.ids.1: Input should be a valid integer")
    reply = client.post("/search", json={"codes": ["00" * 4], "k": 0, "rescore_factor": 0})  # pydantic's, both named
    assert reply.status_code == 422 and reply.json()["detail"].count("greater than or equal to 1") == 2, reply.text


VALUES = [1, -5, 10**30, 1.5, float("inf"), float("nan"), True, False, "x", "3", "", None, [], [1], {}, {"a": 1}]


@pytest.mark.parametrize("model", [models.SearchRequest, models.ItemsRequest])
def test_the_check_accepts_exactly_what_the_model_does(model):
    """Every list field of the models, with each kind of JSON value at each depth: `check_body` refuses
    a value where pydantic does (so that what passes it gives pydantic at most one error a field),
    and accepts every body pydantic accepts."""
    shapes = list_shapes(model)
    assert set(shapes) == {name for name, f in model.model_fields.items() if "list" in str(f.annotation)}
    for name, (depth, _, _) in shapes.items():
        for value in VALUES:
            bodies = [{name: value}, {name: [value]}, {name: [[value]]}, {name: [[[value]]]}]
            bodies += [{name: [[1], value]}, {name: ["00", value]}] if depth == 2 else [{name: ["00", value]}]
            for body in bodies:
                try:
                    model.model_validate(body)
                    valid = True
                except ValidationError:
                    valid = False
                try:
                    check_body(body, model)
                    passed = True
                except BodyErrors:
                    passed = False
                assert passed == valid, (model.__name__, body)
    with pytest.raises(BodyErrors, match=r"^body\.nope: Extra inputs are not permitted$"):
        check_body({"nope": 1}, model)
    check_body([1, 2], model)  # not an object: pydantic's one error


def test_a_valid_body_is_searched_as_before(client, rng):
    codes = [c.tobytes().hex() for c in random_codes(rng, 3, BITS)]
    reply = client.post("/search", json={"codes": codes, "embeddings": np.ones((3, 4)).tolist(), "k": 2})
    assert reply.status_code == 200 and len(reply.json()["results"]) == 3, reply.text
    added = client.post("/items", json={"codes": codes[:1], "embeddings": [[0.5, 1, 2, 3]], "labels": [[1, 2]],
                                        "ids": [100]})
    assert added.status_code == 200 and added.json()["ids"] == [100], added.text
