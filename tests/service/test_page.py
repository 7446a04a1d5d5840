"""The search page's server side: item sources recorded by `index build`, thumbnails decoded
from them only, images kept by the service, the page's JSON helpers and the offline docs."""

import json
import os
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from helpers import cli
from index_fakes import FakeEncoder
from lbhash.index import CodeIndex
from lbhash.indexes.origins import SOURCES, read_sources, record_sources
from lbhash.serving.uploads import media_dir_for
from lbhash.service import create_app
from lbhash.service.media import DecodeGate, ThumbnailCache, TooBusy
from page_helpers import decoded, noisy, png_bytes

from lbhash.service.page import PAGE_FILES
from serve_helpers import LOCAL

STATIC = ("index.html", *PAGE_FILES)


@pytest.fixture
def built(tiny_image_run, tmp_path):
    tree, run = tiny_image_run
    result = cli("index", "build", run, "--out", tmp_path / "ix")
    assert result.exit_code == 0, result.output
    return tree, run, tmp_path / "ix"


def one_line(reply, status, fragment):
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert fragment in detail and "\n" not in detail, detail
    return detail


def test_index_build_records_each_items_file_covered_by_the_manifest(built):
    tree, run, ix = built
    manifest = json.loads((ix / "manifest.json").read_text())
    # the sources record beside the instance transform (docs/instance-codes.md, "Instance codes"), both checksummed
    assert manifest["attachments"] == sorted([SOURCES, "instance-transform.npz"]) and SOURCES in manifest["files"]
    assert "instance-transform.npz" in manifest["files"]
    index = CodeIndex.load(ix)
    record = read_sources(index)
    ids = index.ids()
    # every training image, those held out for validation included (issue 60)
    assert len(record) == len(ids) == 48 and record.class_names == ["blue", "green", "red", "yellow"]
    from lbhash.data import load_data

    data = load_data(f"images:{tree}")
    for i in ids[:5].tolist():
        assert record.source(i) == str(data.source.where(i)) and record.source(i).startswith(str(tree))
    info = cli("index", "info", ix)
    assert f"48 items of images:{tree}" in info.output
    # a compaction or an `index add` keeps the record; `index remove` drops the removed ids
    assert cli("index", "remove", ix, "--ids", int(ids[0])).exit_code == 0
    again = read_sources(CodeIndex.load(ix))
    assert len(again) == 47 and again.source(int(ids[0])) is None and again.source(int(ids[1])) is not None
    # the record is checksummed like the index's own files
    body = (ix / SOURCES).read_bytes()
    (ix / SOURCES).write_bytes(body.replace(b"/train/", b"/trainX", 1))
    result = cli("index", "info", ix)
    assert result.exit_code == 2 and "sources.json: checksum mismatch" in result.output


def test_cli_search_prints_the_recorded_source_beside_each_id(built, tmp_path):
    tree, run, ix = built
    query = tree / "test" / "red" / "000.png"
    result = cli("search", ix, "--images", query, "--run", run, "-k", "3", "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)[0]
    assert all(s.startswith(f"{tree}/train/red/") for s in hits["sources"])  # the run separates the colours
    text = cli("search", ix, "--images", query, "--run", run, "-k", "2").output
    # ranked by both codes (the index keeps instance codes): score, class and instance distances
    assert re.search(rf"id \d+ +score [\d.]+ +distance \d+ +instance \d+ +labels 2 red +{re.escape(str(tree))}/train/red/\d+\.png",
                     text), text


def test_thumbnails_are_the_recorded_images_pixel_for_pixel(built):
    tree, run, ix = built
    from lbhash.indexes.index_inputs import load_encoder

    with TestClient(create_app(ix, load_encoder(run)), base_url=LOCAL) as client:
        ids = [h["id"] for h in client.post("/search", json={"codes": ["0000"], "k": 6}).json()["results"][0]["hits"]]
        sources = client.post("/sources", json={"ids": ids}).json()["items"]
        for item in sources:
            assert item["code"] == client.get(f"/items/{item['id']}").json()["code"]
            reply = client.get(f"/items/{item['id']}/image")
            assert reply.status_code == 200 and reply.headers["content-type"] == "image/png"
            assert item["image"] and item["source"].startswith(str(tree))
            pixels = decoded(reply.content)
            assert pixels.shape == (32, 32, 3)
            np.testing.assert_array_equal(pixels, np.array(Image.open(item["source"]).convert("RGB")))
        about = client.get("/about").json()
        assert about["index"]["sources"] == 48 and about["index"]["class_names"][2] == "red"
        # 48 photos are too few to calibrate a same-picture mark on: /about says so (docs/instance-codes.md,
        # "The same picture")
        mark = about["index"]["same_picture"]
        assert mark["mark"] is None and "too few" in mark["why"]
        run_info = about["run"]
        assert (run_info["variant"], run_info["bits"], run_info["input_kind"]) == ("csq", 16, "images")
        assert 0 <= run_info["map"] <= 1 and set(run_info["lower_bound"]) >= {"min_inter", "max_intra", "ratio"}
        assert run_info["lower_bound"]["scale"].startswith("over the database items")  # shown beside it
        assert 0.24 < run_info["chance_map"] < 0.35  # four balanced classes: about a quarter
        assert len(run_info["pr_curve"]["precision"]) == 17


def test_bad_ids_and_path_tricks_get_one_line_and_no_file(built):
    tree, run, ix = built
    (ix.parent / "secret.txt").write_text("TOP SECRET")
    with TestClient(create_app(ix), base_url=LOCAL) as client:
        one_line(client.get("/items/999/image"), 404, "id 999 is not in the index")
        one_line(client.get("/items/-1/image"), 422, "item_id")
        one_line(client.get(f"/items/{2**63}/image"), 422, "item_id")
        for path in ("/items/..%2F..%2Fsecret.txt/image", "/items/1%2F..%2F..%2Fsecret.txt/image",
                     "/page/..%2F..%2Fsecret.txt", "/page/app.py", "/docs-assets/..%2Fcore.py",
                     "/docs-assets/%2Fetc%2Fpasswd", "/items/%2E%2E/image"):
            reply = client.get(path)
            assert reply.status_code in (404, 422), (path, reply.status_code)
            assert "TOP SECRET" not in reply.text and "root:" not in reply.text
            assert "\n" not in reply.json()["detail"]
        # a record that no longer names what the data holds at that position is refused, not followed
        media = client.app.state.media
        some_id = int(CodeIndex.load(ix).ids()[0])
        media.record._where[some_id] = str(ix.parent / "secret.txt")
        one_line(client.get(f"/items/{some_id}/image"), 404, "is no longer in")
        # one under the image folder by its name, whose '..' lead out of it: refused too
        folder = media.data.folder
        media.record._where[some_id] = os.path.join(folder, os.path.relpath(ix.parent / "secret.txt", folder))
        assert media.record.source(some_id).startswith(os.path.join(folder, ".."))
        assert os.path.realpath(media.record.source(some_id)) == str(ix.parent / "secret.txt")
        one_line(client.get(f"/items/{some_id}/image"), 404, "now leads out of the image root")


def test_images_added_through_the_service_keep_their_bytes_across_restarts(tmp_path, rng):
    encoder = FakeEncoder(bits=16, input_kind="images")
    CodeIndex(16).save(tmp_path / "ix")
    big, small = noisy(rng, (10, 200, 90), (200, 300)), noisy(rng, (220, 20, 20), (10, 20))
    files = [("files", ("big.png", png_bytes(big), "image/png")), ("files", ("small.png", png_bytes(small), "image/png"))]
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        reply = client.post("/items/image", files=files, data={"labels": "1;2"})
        assert reply.status_code == 200 and reply.json()["ids"] == [0, 1], reply.text
    np.save(tmp_path / "q.npy", encoder.encode(big[None]))  # `lbhash search` names kept images too
    found = cli("search", tmp_path / "ix", "--codes", tmp_path / "q.npy", "-k", "1")
    assert re.search(r"id 0 +distance 0 +labels 1 +uploaded: big\.png", found.output), found.output
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:  # a restart
        thumb = decoded(client.get("/items/0/image").content)
        expected = Image.fromarray(big)
        expected.thumbnail((128, 128))
        assert thumb.shape == (85, 128, 3)
        np.testing.assert_array_equal(thumb, np.array(expected))
        np.testing.assert_array_equal(decoded(client.get("/items/1/image").content), small)  # never enlarged
        # the larger view: at most 512 px, so this one whole; a size it does not serve is refused
        np.testing.assert_array_equal(decoded(client.get("/items/0/image?size=large").content), big)
        one_line(client.get("/items/0/image?size=huge"), 422, "size")
        assert client.post("/sources", json={"ids": [0, 1]}).json()["items"] == [
            {"id": 0, "source": "uploaded: big.png", "image": True, "code": encoder.encode(big[None])[0].tobytes().hex()},
            {"id": 1, "source": "uploaded: small.png", "image": True,
             "code": encoder.encode(small[None])[0].tobytes().hex()}]
        # an upsert by code replaces the item: its old image is no longer its own
        assert client.post("/items", json={"codes": ["0000"], "ids": [1], "upsert": True}).status_code == 200
        one_line(client.get("/items/1/image"), 404, "item 1 has no image")
        # a 409 leaves the present item and its image alone; nothing staged is left behind
        one_line(client.post("/items/image", files=files[1:], data={"ids": "0"}), 409, "already in the index")
        assert client.get("/items/0/image").status_code == 200
        assert client.delete("/items/0").status_code == 200
        one_line(client.get("/items/0/image"), 404, "id 0 is not in the index")
        # over the kept-image limit: refused before anything is added
        from lbhash.limits import MAX_IMAGE_BYTES

        huge = [("files", ("huge.png", b"\x89PNG" + bytes(MAX_IMAGE_BYTES), "image/png"))]
        one_line(client.post("/items/image", files=huge), 400, "at most 4194304 bytes")
        assert client.get("/health").json()["ntotal"] == 1
    media = media_dir_for(tmp_path / "ix")
    assert sorted(p.name for p in media.iterdir()) == ["gone.log"]  # 0 deleted, 1 replaced
    assert media.joinpath("gone.log").read_text().split() == ["1", "0"]


def test_an_image_search_is_one_request_with_the_hits_sources(tmp_path, rng):
    """/search/image answers what /search with the image's code (and its embedding) answers, hits
    of one shape, each with what /sources says of it, and the query's code: the page needs no more."""
    encoder = FakeEncoder(bits=16, input_kind="images")
    images = [noisy(rng, c) for c in [(200, 30, 30)] * 5 + [(30, 30, 200)] * 5]
    CodeIndex(16, embedding_dim=6).save(tmp_path / "ix")  # (the fake's image embeddings: 6 numbers)
    query = ("files", ("q.png", png_bytes(images[7]), "image/png"))
    code = encoder.encode(images[7][None])[0].tobytes().hex()
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        files = [("files", (f"{i}.png", png_bytes(img), "image/png")) for i, img in enumerate(images[:9])]
        assert client.post("/items/image", files=files, data={"labels": ";".join(["0"] * 5 + ["1"] * 4)}).status_code == 200
        assert client.post("/items", json={"codes": [code], "ids": [9], "labels": [[1]],
                                           "embeddings": [[0.5] * 6]}).status_code == 200  # no image
        direct = client.post("/search/image", files=[query], data={"k": "5", "labels": "1", "rescore": "false"}
                             ).json()["results"]
        by_code = client.post("/search", json={"codes": [code], "k": 5, "labels": [[1]]}).json()["results"]
        assert len(direct) == 1 and direct[0]["code"] == by_code[0]["code"] == code
        hits = direct[0]["hits"]
        assert hits == by_code[0]["hits"]
        assert {"id": 7, "distance": 0, "labels": [1], "source": "uploaded: 7.png", "image": True,
                "code": code} in by_code[0]["hits"] and {7, 9} <= {h["id"] for h in hits}
        sources = client.post("/sources", json={"ids": [h["id"] for h in hits]}).json()["items"]
        assert [{k: h[k] for k in ("id", "source", "image", "code")} for h in hits] == sources
        assert {h["id"]: (h["source"], h["image"]) for h in hits}[7] == ("uploaded: 7.png", True)
        assert {h["id"]: (h["source"], h["image"]) for h in hits}[9] == (None, False)
        embedding = encoder.outputs(images[7][None])[1].tolist()
        rescored = client.post("/search", json={"codes": [code], "embeddings": embedding, "k": 3,
                                                "rescore_factor": 3}).json()
        one = client.post("/search/image", files=[query], data={"k": "3", "rescore_factor": "3"}).json()
        assert one["results"] == rescored["results"] and all("score" in h for h in one["results"][0]["hits"])
        text = ("files", ("notes.txt", b"not an image", "text/plain"))  # said without Pillow's repr of a buffer
        assert client.post("/search/image", files=[text]).json() == {
            "detail": "notes.txt: cannot decode image (not an image in a format Pillow reads)"}
        one_line(client.post("/search", json={"features": [[1.0] * 6]}), 400, "encodes images, not features")
        for gone in ("/encode", "/encode/image"):  # the page's old two-step query: one way through now
            assert client.post(gone, json={"features": [[1.0] * 6]}).status_code == 404
        one_line(client.post("/sources", json={"ids": []}), 400, "no ids given")
        one_line(client.get("/items/9/image"), 404, "item 9 has no image")  # a code without a source


def test_thumbnail_decoding_is_rate_limited_and_cached(tmp_path, rng):
    encoder = FakeEncoder(bits=16, input_kind="images")
    CodeIndex(16).save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        files = [("files", (f"{i}.png", png_bytes(noisy(rng, (90, 90, 90))), "image/png")) for i in range(3)]
        client.post("/items/image", files=files)
        media = client.app.state.media
        media.gate = DecodeGate(rate=1, slots=1, wait_s=0.05)  # one decode, then the next token is 1 s away
        assert client.get("/items/0/image").status_code == 200
        reply = client.get("/items/1/image")
        one_line(reply, 429, "thumbnail decodes per second")
        assert reply.headers["retry-after"] == "1"
        assert client.get("/items/0/image").status_code == 200  # cached: no decode
    clock = [0.0]
    gate = DecodeGate(rate=2, slots=1, wait_s=0, clock=lambda: clock[0])
    for _ in range(2):
        with gate.turn():
            pass
    with pytest.raises(TooBusy):
        with gate.turn():
            pass
    clock[0] = 0.5  # a token per half second
    with gate.turn():
        pass
    cache = ThumbnailCache(limit=100)
    for key in range(3):
        cache.put(key, bytes(40), cache.generation)
    assert cache.get(0) is None and cache.get(2) is not None and cache.size == 80
    generation = cache.generation
    cache.drop([2])
    cache.put(2, bytes(10), generation)  # made before a change: not kept
    assert cache.get(2) is None


def test_the_page_and_the_docs_ask_only_this_server(tmp_path):
    CodeIndex(16).save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix"), base_url=LOCAL) as client:
        page = client.get("/")
        assert page.status_code == 200 and "connect-src 'self'" in page.headers["content-security-policy"]
        assert client.get("/?item=3&k=5&labels=1,2").text == page.text  # an address the page wrote
        for name in STATIC[1:]:
            assert client.get(f"/page/{name}").status_code == 200
        for path in ("/docs", "/redoc"):
            html = client.get(path).text
            assets = re.findall(r'(?:src|href)="([^"]+)"', html)
            assert assets and all(a.startswith("/docs-assets/") for a in assets), assets
            for asset in assets:
                assert client.get(asset).status_code == 200
        assert b"cdn.redoc.ly" not in client.get("/docs-assets/redoc.standalone.js").content
        assert "fonts.googleapis" not in client.get("/redoc").text
    from lbhash.service import page

    for name in STATIC:  # nothing absolute but the SVG namespace (a name, never fetched)
        text = (page.STATIC / name).read_text()
        assert re.findall(r"https?://[^\s\"'`)]+", text) in ([], ["http://www.w3.org/2000/svg"]), name


def test_the_page_modules_import_only_served_files():
    """page.js imports the other modules by relative name: each is a served page file, and
    every served script is imported (none left behind)."""
    from lbhash.service import page

    imported = set()
    for name in (n for n in PAGE_FILES if n.endswith(".js")):
        text = (page.STATIC / name).read_text()
        for target in re.findall(r'^import [^;]+ from "\./([\w.]+)";$', text, flags=re.M):
            assert target in PAGE_FILES, (name, target)
            imported.add(target)
        assert "require(" not in text and not re.search(r"\bimport\(", text), name
    assert imported == {n for n in PAGE_FILES if n.endswith(".js")} - {"page.js"}
    assert '<script type="module" src="/page/page.js">' in (page.STATIC / "index.html").read_text()


def test_a_feature_index_has_sources_but_no_thumbnails(tmp_path, rng):
    encoder = FakeEncoder(dim=12, bits=16)
    index = CodeIndex(16)
    index.add(encoder.encode(rng.standard_normal((5, 12))))
    np.savez(tmp_path / "f.npz", x=rng.standard_normal((5, 12)), y=np.arange(5) % 2)
    assert record_sources(index, f"features:{tmp_path / 'f.npz'}", np.arange(5)) == 0  # rows are no images
    index.save(tmp_path / "ix")
    with TestClient(create_app(tmp_path / "ix", encoder), base_url=LOCAL) as client:
        assert client.post("/sources", json={"ids": [0, 7]}).json()["items"] == [
            {"id": 0, "source": None, "image": False, "code": index.get_codes([0])[0].tobytes().hex()},
            {"id": 7, "source": None, "image": False, "code": None}]  # 7: not in the index
        one_line(client.get("/items/0/image"), 404, "item 0 has no image")
        found = client.post("/search", json={"features": rng.standard_normal((2, 12)).tolist()}).json()["results"]
        assert len(found) == 2 and len(found[0]["code"]) == 4  # each query's code: 16 bits, in hex
        assert client.post("/items", json={"codes": [found[0]["code"]], "ids": [1], "upsert": True}).status_code == 200
        assert client.delete("/items/2").status_code == 200
    assert not media_dir_for(tmp_path / "ix").exists()  # changes of items without images write nothing more


def test_a_feature_files_class_names_reach_the_search_and_the_page(tmp_path):
    """A features .npz with `label_names` (docs/data.md) names its classes in `lbhash search`
    and on the page, as image data does (issue 60, item 6): the run records them (data.json) and
    `index build` puts them in the index's sources.json."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    data = tmp_path / "digits-named.npz"
    np.savez(data, x_train=x[100:].astype(np.float32), y_train=y[100:], x_test=x[:100].astype(np.float32),
             y_test=y[:100], label_names=names)
    run, ix = tmp_path / "run", tmp_path / "ix"
    trained = cli("train", "--data", f"features:{data}", "--method", "linear", "--bits", 16, "--out", run, "--quiet")
    assert trained.exit_code == 0, trained.output
    assert json.loads((run / "data.json").read_text())["class_names"] == names.tolist()  # the run carries them
    built = cli("index", "build", run, "--out", ix)
    assert built.exit_code == 0 and "note:" not in built.output, built.output
    assert read_sources(CodeIndex.load(ix)).class_names == names.tolist()
    np.save(tmp_path / "q.npy", x[:3].astype(np.float32))
    text = cli("search", ix, "--features", tmp_path / "q.npy", "--run", run, "-k", 2).output
    assert re.search(r"labels \d (zero|one|two|three|four|five|six|seven|eight|nine)\b", text), text
    coded = cli("search", ix, "--codes", run / "codes.npz", "-k", 2).output  # a run's queries: their labels named
    assert "label 0 zero" in coded or "label 1 one" in coded, coded
    from lbhash.indexes.index_inputs import load_encoder

    with TestClient(create_app(ix, load_encoder(run)), base_url=LOCAL) as client:
        about = client.get("/about").json()
        assert about["index"]["class_names"] == names.tolist() and about["index"]["sources"] == 0
        mark = about["index"]["same_picture"]  # feature rows: no edited copies to calibrate a mark on
        assert mark is None or (mark["mark"] is None and "not photos" in mark["why"])
        assert client.get("/items/0/image").status_code == 404  # feature rows have no images
