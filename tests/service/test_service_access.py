"""Who may read and change a served index (issue 46, items 1-3): a write key, a read key,
read-only mode, changes from other web sites refused, and `lbhash serve` off loopback only with
a key or --read-only."""

from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import cli

from index_reference import random_codes
from lbhash.codes import pack
from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.service import create_app
from lbhash.service.access import Access, HostNames
from serve_helpers import LOCAL, free_port

WRITE, READ = "w" * 8 + "-write-key-123", "r" * 8 + "-read-key-4567"


@pytest.fixture
def index_dir(tmp_path, rng):
    index = CodeIndex(16)
    index.add(random_codes(rng, 20, 16), labels=rng.integers(0, 3, 20))
    index.save(tmp_path / "ix")
    return tmp_path / "ix"


def add_body(n=1, start=100):
    return {"codes": [pack(np.ones((1, 16), np.int8))[0].tobytes().hex()] * n, "ids": list(range(start, start + n))}


def refused(reply, status, fragment):
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert fragment in detail and "\n" not in detail
    return detail


def test_with_a_write_key_changes_need_it_and_the_index_is_unchanged_without(index_dir):
    with TestClient(create_app(index_dir, access=Access(write_key=WRITE)), base_url=LOCAL) as client:
        for headers in ({}, {"X-Lbhash-Key": "wrong-key-of-some-length"}, {"X-Lbhash-Key": READ}):
            refused(client.post("/items", json=add_body(), headers=headers), 401, "needs the write key")
            refused(client.delete("/items/3", headers=headers), 401, "needs the write key")
            assert client.get("/health").json()["ntotal"] == 20
        assert client.get("/items/3").status_code == 200  # reads stay open without a read key
        assert client.post("/items", json=add_body(), headers={"X-Lbhash-Key": WRITE}).status_code == 200
        assert client.delete("/items/3", headers={"X-Lbhash-Key": WRITE}).status_code == 200
        assert client.get("/health").json()["ntotal"] == 20  # one added, one deleted
        assert client.get("/about").json()["access"] == {"read_only": False, "write_key": True, "read_key": False}


def test_with_a_read_key_searches_need_a_key_but_the_page_does_not(index_dir):
    with TestClient(create_app(index_dir, access=Access(write_key=WRITE, read_key=READ)), base_url=LOCAL) as client:
        search = {"codes": [add_body()["codes"][0]], "k": 3}
        refused(client.post("/search", json=search), 401, "needs its read key")
        for path in ("/items/3", "/about", "/stats"):
            refused(client.get(path), 401, "needs its read key")
        for key in (READ, WRITE):  # the write key reads too
            assert client.post("/search", json=search, headers={"X-Lbhash-Key": key}).status_code == 200
        refused(client.delete("/items/3", headers={"X-Lbhash-Key": READ}), 401, "needs the write key")
        for path in ("/", "/page/page.js", "/health", "/docs", "/openapi.json"):
            assert client.get(path).status_code == 200, path
        assert client.get("/stats", headers={"X-Lbhash-Key": READ}).status_code == 200


def test_with_a_read_key_alone_a_change_needs_it_too(index_dir):
    """Issue 87: with LBHASH_READ_KEY alone, anyone could add and delete while a search needed the key."""
    with TestClient(create_app(index_dir, access=Access(read_key=READ)), base_url=LOCAL) as client:
        for headers in ({}, {"X-Lbhash-Key": "wrong-key-of-some-length"}):
            refused(client.post("/items", json=add_body(), headers=headers), 401, "needs the read key")
            refused(client.delete("/items/3", headers=headers), 401, "needs the read key")
            refused(client.post("/items/image", files={"files": ("a.png", b"x", "image/png")}, headers=headers), 401,
                    "needs the read key")
        assert client.get("/health").json()["ntotal"] == 20
        assert client.post("/items", json=add_body(), headers={"X-Lbhash-Key": READ}).status_code == 200
        assert client.delete("/items/3", headers={"X-Lbhash-Key": READ}).status_code == 200
        assert client.get("/health").json()["ntotal"] == 20  # one added, one deleted
    assert not Access(read_key=READ).open_for_writes and Access().open_for_writes


def test_read_only_refuses_every_change_with_403_and_serves_reads(index_dir):
    with TestClient(create_app(index_dir, access=Access(read_only=True)), base_url=LOCAL) as client:
        refused(client.post("/items", json=add_body()), 403, "read-only")
        refused(client.delete("/items/3"), 403, "read-only")
        refused(client.post("/items/image", files={"files": ("a.png", b"x", "image/png")}), 403, "read-only")
        assert client.get("/items/3").status_code == 200 and client.get("/health").json()["ntotal"] == 20
        assert client.post("/search", json={"codes": [add_body()["codes"][0]], "k": 2}).status_code == 200


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                                     {"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Origin": "http://testserver.evil.example"}])
def test_a_change_from_another_site_is_refused_even_with_the_key(index_dir, headers):
    for access, extra in ((Access(), {}), (Access(write_key=WRITE), {"X-Lbhash-Key": WRITE})):
        with TestClient(create_app(index_dir, access=access), base_url=LOCAL) as client:
            refused(client.post("/items", json=add_body(), headers={**headers, **extra}), 403, "another web site")
            refused(client.delete("/items/3", headers={**headers, **extra}), 403, "another web site")
            form = client.post("/items/image", files={"files": ("a.png", b"x", "image/png")}, headers=headers)
            refused(form, 403, "another web site")
            assert client.get("/health").json()["ntotal"] == 20
            assert "access-control-allow-origin" not in {k.lower() for k in form.headers}  # CORS stays closed


def test_a_change_from_the_page_itself_or_a_program_passes(index_dir):
    with TestClient(create_app(index_dir), base_url=LOCAL) as client:  # open, as on loopback
        same = [{"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {"Origin": "http://localhost"}, {}]
        for i, headers in enumerate(same):
            assert client.post("/items", json=add_body(start=100 + i), headers=headers).status_code == 200
        assert client.get("/health").json()["ntotal"] == 24


def test_keys_are_checked_never_shown():
    access = Access(write_key=WRITE, read_key=READ)
    assert WRITE not in repr(access) and READ not in repr(access) and WRITE not in str(access.public())
    # issue 87: a non-ASCII key matched only as Latin-1 bytes (a browser's), not as UTF-8 (curl's): refused
    for bad in ("short", " " + WRITE, WRITE + "\n", "schlüssel-" + WRITE):
        with pytest.raises(InputError, match="at least 16 printable ASCII characters"):
            Access(write_key=bad)


def test_serve_off_loopback_needs_a_key_or_read_only(index_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("LBHASH_WRITE_KEY", raising=False)
    port = free_port()
    for host in ("0.0.0.0", "192.0.2.1"):
        result = cli("serve", index_dir, "--host", host, "--port", port)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert f"--host {host}: anyone who reaches it could change the index" in result.output
    result = cli("serve", index_dir, "--write-key-file", tmp_path / "missing", "--port", port)
    assert result.exit_code == 2 and "--write-key-file" in result.output and "cannot read the key" in result.output
    (tmp_path / "weak").write_text("abc\n")
    result = cli("serve", index_dir, "--write-key-file", tmp_path / "weak", "--port", port)
    assert result.exit_code == 2 and "at least 16 printable ASCII characters" in result.output
    assert not (tmp_path / "ix.wal").exists()  # refused before the index was opened


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_a_served_index_with_a_write_key_from_the_environment(index_dir, server_factory, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LBHASH_WRITE_KEY", WRITE)
    server = server_factory(index_dir, free_port())
    reply = httpx.delete(f"{server.url}/items/3", timeout=10)
    assert reply.status_code == 401 and reply.headers["www-authenticate"].startswith("X-Lbhash-Key")
    assert httpx.delete(f"{server.url}/items/3", headers={"X-Lbhash-Key": WRITE}, timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/health", timeout=10).json()["ntotal"] == 19
    server.kill()
    assert WRITE not in server.log  # never logged


def test_numbers_in_a_request_are_json_numbers_not_booleans_or_strings(index_dir):
    code = add_body()["codes"][0]
    with TestClient(create_app(index_dir), base_url=LOCAL) as client:
        for body in ({"codes": [code], "k": 3, "labels": [[True]]}, {"codes": [code], "k": True},
                     {"codes": [code], "k": "3"}, {"codes": [code], "k": 3, "labels": [[1.0]]}):
            reply = client.post("/search", json=body)
            assert reply.status_code == 422 and "\n" not in reply.json()["detail"], (body, reply.text)
        assert client.post("/search", json={"codes": [code], "k": 3, "labels": [[1]]}).status_code == 200
        for body in ({**add_body(), "ids": [True]}, {**add_body(), "labels": [[False]]}, {**add_body(), "upsert": 1}):
            assert client.post("/items", json=body).status_code == 422, body
        assert client.get("/health").json()["ntotal"] == 20


# --- DNS rebinding (issue 60, item 9): the Host a request names -------------------------------

REBOUND = ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil.example:8000",
           "testserver", "LOCALHOST.evil.example", "", "local host"]


@pytest.mark.parametrize("host", REBOUND)
def test_a_request_for_another_host_name_is_refused_before_any_route(index_dir, host):
    """A page of another site whose name is rebound to 127.0.0.1 is same-origin to the browser
    (Sec-Fetch-Site: same-origin, Origin equal to Host): only the Host names it. Writes and
    reads alike are refused, the page and /health too, and nothing changes."""
    browser = {"Host": host, "Sec-Fetch-Site": "same-origin", "Origin": f"http://{host}"}
    with TestClient(create_app(index_dir), base_url=LOCAL) as client:
        code = add_body()["codes"][0]
        for method, path, body in (("POST", "/items", add_body()), ("DELETE", "/items/3", None),
                                   ("GET", "/stats", None), ("GET", "/items/4", None), ("GET", "/", None),
                                   ("GET", "/health", None), ("POST", "/search", {"codes": [code], "k": 2})):
            reply = client.request(method, path, json=body, headers=browser)
            detail = refused(reply, 403 if host.strip() else 400, "Host")
            assert "--allowed-hosts" in detail or not host.strip()
        assert client.get("/health").json()["ntotal"] == 20
        assert client.get("/items/3").status_code == 200


@pytest.mark.parametrize("headers, name", [
    ([("Host", "localhost"), ("Host", "evil.example")], "host"),  # the first passed the check
    ([("Host", "evil.example"), ("Host", "localhost")], "host"),
    ([("Host", "localhost"), ("Origin", "http://localhost"), ("Origin", "http://evil.example")], "origin"),
    ([("Host", "localhost"), ("X-Lbhash-Key", WRITE), ("X-Lbhash-Key", "another")], "x-lbhash-key"),
])
def test_a_header_the_checks_read_given_twice_is_refused_with_400(index_dir, headers, name):
    """Issue 69: two Host headers were resolved by the first (the key and cross-site checks read
    the last of theirs); a request naming two of one is refused, reads and writes alike."""
    with TestClient(create_app(index_dir, access=Access(write_key=WRITE)), base_url=LOCAL) as client:
        for method, path, body in (("GET", "/stats", None), ("POST", "/items", add_body())):
            reply = client.request(method, path, json=body, headers=headers)
            assert refused(reply, 400, "header") == f"a request may have one {name} header, not 2"
        assert client.get("/health").json()["ntotal"] == 20  # nothing added
        assert client.get("/stats", headers=[("Host", "localhost"), ("Accept", "a"), ("Accept", "b")]).status_code == 200


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "LocalHost.:8000", "127.0.0.1", "127.0.0.1:8000",
                                  "[::1]:8000", "[::1]", "10.1.2.3:8000", "[2001:db8::1]"])
def test_loopback_names_and_addresses_pass_the_host_check(index_dir, host):
    """An address cannot be rebound: a browser sends an address as Host only to that address."""
    with TestClient(create_app(index_dir), base_url=LOCAL) as client:
        assert client.get("/stats", headers={"Host": host}).status_code == 200
        assert client.post("/items", json=add_body(), headers={"Host": host}).status_code == 200


def test_the_allowed_host_names_pass_and_only_they(index_dir):
    app = create_app(index_dir, access=Access(allowed_hosts=["search.example", ".corp.example"]))
    with TestClient(app, base_url="http://search.example") as client:
        for host in ("search.example", "search.example:443", "corp.example", "a.corp.example:8000", "localhost"):
            assert client.get("/stats", headers={"Host": host}).status_code == 200, host
        for host in ("other.example", "search.example.evil", "xcorp.example", "corp.example.evil"):
            refused(client.get("/stats", headers={"Host": host}), 403, "Host")
    for bad in ("*", "evil .example", "http://x.example", "a/b", ""):
        with pytest.raises(InputError, match="allowed host"):
            create_app(index_dir, access=Access(allowed_hosts=[bad]))
    assert Access(allowed_hosts=["Search.Example."]) == Access(allowed_hosts=HostNames.of(["search.example"]))


@pytest.mark.slow  # a real server process (2-3 s a start); make test-slow, in CI
def test_serve_checks_host_with_its_host_and_allowed_hosts(index_dir, server_factory, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LBHASH_ALLOWED_HOSTS", "from-env.example")
    server = server_factory(index_dir, free_port(), "--allowed-hosts", "mybox,.lan.example")
    for host in ("mybox", f"mybox:{server.port}", "pc.lan.example", f"127.0.0.1:{server.port}", "localhost"):
        assert httpx.get(f"{server.url}/stats", headers={"Host": host}, timeout=10).status_code == 200, host
    for host in ("evil.example", "from-env.example"):  # the option replaces the environment's list
        reply = httpx.post(f"{server.url}/items", json=add_body(), headers={"Host": host}, timeout=10)
        assert reply.status_code == 403 and "\n" not in reply.json()["detail"]
    assert httpx.get(f"{server.url}/health", timeout=10).json()["ntotal"] == 20
    server.kill()
    env_server = server_factory(index_dir, free_port())
    assert httpx.get(f"{env_server.url}/stats", headers={"Host": "from-env.example"}, timeout=10).status_code == 200
    assert httpx.get(f"{env_server.url}/stats", headers={"Host": "mybox"}, timeout=10).status_code == 403


def test_serve_refuses_a_bad_allowed_host_in_one_line(index_dir, monkeypatch):
    monkeypatch.delenv("LBHASH_ALLOWED_HOSTS", raising=False)
    for bad in ("*", "evil host", "http://x.example"):
        result = cli("serve", index_dir, "--allowed-hosts", bad, "--port", free_port())
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert "--allowed-hosts" in result.output and "allowed host" in result.output
    monkeypatch.setenv("LBHASH_ALLOWED_HOSTS", "*")
    result = cli("serve", index_dir, "--port", free_port())
    assert result.exit_code == 2 and "LBHASH_ALLOWED_HOSTS" in result.output, result.output
    assert not (index_dir.parent / "ix.wal").exists()


# --- keys from the environment and from files (issue 60, item 9) --------------------------------


@pytest.mark.parametrize("env", ["LBHASH_WRITE_KEY", "LBHASH_READ_KEY"])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_key_in_the_environment_is_refused_not_an_open_server(index_dir, monkeypatch, env, value):
    """LBHASH_WRITE_KEY= (set, but empty) meant "no key": a server open to every change."""
    from lbhash.service.access import access_from_environment

    monkeypatch.delenv("LBHASH_WRITE_KEY", raising=False)
    monkeypatch.delenv("LBHASH_READ_KEY", raising=False)
    monkeypatch.setenv(env, value)
    with pytest.raises(InputError, match=f"^{env} is set but empty"):
        access_from_environment()
    result = cli("serve", index_dir, "--port", free_port())
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"{env} is set but empty" in result.output
    assert not (index_dir.parent / "ix.wal").exists()


def test_a_key_file_must_be_a_regular_file_of_bounded_size(index_dir, tmp_path, monkeypatch):
    """A FIFO as the key file hung the start (nothing writes to it); /dev/zero read until memory
    ran out. Only a regular file of at most 4 KiB is read (a link to one will do)."""
    import os
    import warnings

    from lbhash.errors import LbhashWarning
    from lbhash.service.access import access_from_environment

    monkeypatch.delenv("LBHASH_WRITE_KEY", raising=False)
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.key"
    big.write_text(WRITE + "\n" + "x" * 10_000)
    for path, why in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                      (tmp_path, "not a regular file"), (big, "more than 4096 bytes")):
        with pytest.raises(InputError, match=f"--write-key-file {path}: .*{why}"):
            access_from_environment(write_key_file=path)
        result = cli("serve", index_dir, "--write-key-file", path, "--port", free_port())
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and why in result.output
    good = tmp_path / "good.key"
    good.write_text(WRITE + "\n")
    good.chmod(0o600)
    (tmp_path / "link.key").symlink_to(good)  # a secret mounted as a link (Kubernetes) is read
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert access_from_environment(write_key_file=tmp_path / "link.key").write_key == WRITE
    good.chmod(0o644)  # issue 87: a key file others may read drew no warning
    with pytest.warns(LbhashWarning, match=r"good.key: others on this machine may read or change the key \(mode 644\)"):
        assert access_from_environment(write_key_file=good).write_key == WRITE


def test_every_route_declares_whether_it_changes_data_and_an_undeclared_one_is_refused(index_dir):
    """Each route that is not a GET declares `changes_data` or `reads_data` (issue 71, item 5): walking every
    operation of the API, the declared changes, and only they, need the write key; an app with an undeclared
    POST route does not start."""
    from fastapi import APIRouter, Depends, FastAPI

    from lbhash.service.access import change_routes, changes_data

    app = create_app(index_dir, access=Access(write_key=WRITE, read_key=READ))
    operations = [(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops]
    assert ("POST", "/search") in operations and ("POST", "/sources") in operations
    needs_write = set()
    with TestClient(app, base_url=LOCAL) as client:
        for method, path in operations:
            reply = client.request(method, path.replace("{item_id}", "3").replace("{name}", "x"),
                                   headers={"X-Lbhash-Key": READ})
            if reply.status_code == 401:
                assert "needs the write key" in reply.json()["detail"], (method, path)
                needs_write.add((method, path))
    assert needs_write == {("POST", "/items"), ("POST", "/items/image"), ("DELETE", "/items/{item_id}")}
    forgotten, router, declared = FastAPI(), APIRouter(), APIRouter()

    @router.post("/items/bulk")
    def bulk():
        return {}

    @declared.get("/items/count", dependencies=[Depends(changes_data)])
    def counted():
        return {}

    forgotten.include_router(router)
    with pytest.raises(RuntimeError, match=r"route POST /items/bulk declares neither Depends\(changes_data\)"):
        change_routes(forgotten.routes)
    assert [(m, p.pattern) for m, p in change_routes(declared.routes)] == [("GET", "^/items/count$")]
