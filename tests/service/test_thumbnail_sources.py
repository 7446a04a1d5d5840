"""Thumbnail sources are not followed out of their data root (issue 46 item 5): a recorded
image file that became a symlink out of the folder, a FIFO, an oversized file or another file
than the one indexed is refused (the service answers 404), never read. Each item's thumbnail
is its own (issue 87): a source replaced by a directory is a 404 naming it (was a bare 500), and
one bad source, before or after the service starts, leaves every other item's thumbnail served
(a file gone used to shift a re-listed folder's positions under every later item: all 404)."""

import io
import os
import shutil
import tarfile

import pytest
from fastapi.testclient import TestClient

from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.indexes.origins import DataImages, read_sources, record_sources
from lbhash.service import create_app
from page_helpers import make_image_tree
from serve_helpers import LOCAL


@pytest.fixture
def indexed(tmp_path, rng):
    """An index over a folder of images (the data set's positions as ids), with sources."""
    from index_reference import random_codes
    from lbhash.data import load_data

    tree = make_image_tree(tmp_path / "imgs", train=2, test=1)
    spec = f"images:{tree}"
    n = len(load_data(spec, labels_required=False))
    index = CodeIndex(16)
    index.add(random_codes(rng, n, 16))
    assert record_sources(index, spec, list(range(n))) == n
    index.save(tmp_path / "ix")
    return tree, tmp_path / "ix", n


def file_of(ix, item):
    return read_sources(CodeIndex.load(ix)).source(item)


def test_a_recorded_file_reads_while_it_is_the_one_indexed(indexed):
    tree, ix, n = indexed
    images = DataImages(read_sources(CodeIndex.load(ix)))
    for item in range(n):
        assert images.read(item) == open(file_of(ix, item), "rb").read()


@pytest.mark.parametrize("swap", ["symlink out", "dangling symlink", "fifo", "rewritten", "grown"])
def test_a_swapped_source_is_refused_and_its_target_untouched(indexed, tmp_path, swap, monkeypatch):
    tree, ix, _ = indexed
    path = file_of(ix, 0)
    outside = tmp_path / "secret.png"
    shutil.copy(file_of(ix, 1), outside)
    before = outside.read_bytes()
    images = DataImages(read_sources(CodeIndex.load(ix)))
    images.read(1)  # the data set is loaded, as a running server has it, before the swap
    with TestClient(create_app(ix), base_url=LOCAL) as client:
        assert client.get("/items/2/image").status_code == 200
        os.remove(path)
        if swap == "symlink out":
            os.symlink(outside, path)
            fragment = "leads out of the image root"
        elif swap == "dangling symlink":
            os.symlink(tmp_path / "nowhere.png", path)
            fragment = "leads out of the image root"
        elif swap == "fifo":
            os.mkfifo(path)  # a plain open would block the server's thread forever
            fragment = "not a regular file"
        elif swap == "rewritten":
            shutil.copy(file_of(ix, 1), path)  # another image under the recorded name
            fragment = "changed since the index was built"
        else:
            with open(path, "wb") as fh:
                fh.write(b"\0" * 5000)
            monkeypatch.setattr("lbhash.indexes.origins.MAX_SOURCE_BYTES", 4096)
            fragment = "more than the 4096"
        with pytest.raises(InputError, match=fragment):
            images.read(0)
        reply = client.get("/items/0/image")
        assert reply.status_code == 404 and fragment in reply.json()["detail"], reply.text
        assert client.get("/items/2/image").status_code == 200  # the others still show
    assert outside.read_bytes() == before


def spoil(path, how: str, outside) -> None:
    """Make the recorded file `path` bad: gone, a directory, undecodable (its size and mtime kept,
    so that only the decode fails) or a symlink out of the folder."""
    if how == "undecodable":
        info = os.stat(path)
        with open(path, "r+b") as fh:
            fh.write(b"\0" * info.st_size)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        return
    os.remove(path)
    if how == "directory":
        os.mkdir(path)
    elif how == "link out":
        os.symlink(outside, path)


def thumbnail_side(blob: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as im:
        assert im.format == "PNG"
        im.load()
        return im.size


BAD = {"missing": "cannot read image (No such file or directory)", "directory": "not a regular file (a directory)",
       "undecodable": "cannot decode image", "link out": "now leads out of the image root"}


@pytest.mark.parametrize("when", ["before start", "while serving"])
@pytest.mark.parametrize("how", list(BAD))
def test_one_bad_source_is_its_own_404_and_the_others_still_show(indexed, tmp_path, how, when):
    tree, ix, n = indexed
    outside = tmp_path / "secret.png"
    shutil.copy(file_of(ix, 1), outside)
    if when == "before start":  # the folder listed at start lacks the file (or fails on the link)
        spoil(file_of(ix, 0), how, outside)
    with TestClient(create_app(ix), base_url=LOCAL, raise_server_exceptions=False) as client:
        if when == "while serving":
            assert client.get("/items/5/image").status_code == 200  # the data set is in use
            spoil(file_of(ix, 0), how, outside)
        reply = client.get("/items/0/image")
        assert reply.status_code == 404, reply.text
        assert reply.headers["content-type"] == "application/json"
        detail = reply.json()["detail"]
        assert BAD[how] in detail and str(tree) in detail and "Traceback" not in reply.text, detail
        for item in range(1, n):  # untouched items: real 32 x 32 thumbnails (never enlarged)
            good = client.get(f"/items/{item}/image")
            assert good.status_code == 200, (item, good.text)
            assert thumbnail_side(good.content) == (32, 32)
        assert client.get("/items/0/image?size=large").status_code == 404  # still its own, not cached


def test_a_directory_source_is_refused_by_the_reader_in_one_line(indexed):
    tree, ix, _ = indexed
    path = file_of(ix, 3)
    os.remove(path)
    os.mkdir(path)
    with pytest.raises(InputError, match=r"not a regular file \(a directory\)$") as err:
        DataImages(read_sources(CodeIndex.load(ix))).read(3)
    assert "\n" not in str(err.value)


def test_a_tarball_repacked_without_one_member_still_shows_the_others(tmp_path, rng):
    """A tarball is listed again by the service: its members after a removed one moved up a
    position, and each is found by its recorded name."""
    from index_reference import random_codes
    from lbhash.data import load_data

    tree = make_image_tree(tmp_path / "imgs", train=2, test=1)
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("*.png"))
    tar = tmp_path / "imgs.tar"

    def pack(members):
        with tarfile.open(tar, "w") as tf:
            for name in members:
                tf.add(tree / name, arcname=name)

    pack(names)
    spec = f"images:{tar}"
    n = len(load_data(spec, labels_required=False))
    index = CodeIndex(16)
    index.add(random_codes(rng, n, 16))
    record_sources(index, spec, list(range(n)))
    index.save(tmp_path / "ix")
    record = read_sources(CodeIndex.load(tmp_path / "ix"))
    gone = record.source(0).split(":", 1)[1]
    pack([name for name in names if name != gone])
    with TestClient(create_app(tmp_path / "ix"), base_url=LOCAL) as client:
        reply = client.get("/items/0/image")
        assert reply.status_code == 404 and "is no longer in" in reply.json()["detail"], reply.text
        for item in range(1, n):
            good = client.get(f"/items/{item}/image")
            assert good.status_code == 200, (item, good.text)
            assert thumbnail_side(good.content) == (32, 32)
            assert good.content == client.get(f"/items/{item}/image").content
    reader = DataImages(record)
    for item in range(1, n):  # the member recorded for the item, not its neighbour
        member = record.source(item).split(":", 1)[1]
        assert reader.read(item) == (tree / member).read_bytes()
