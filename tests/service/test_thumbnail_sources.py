"""Thumbnail sources are not followed out of their data root (issue 46 item 5): a recorded
image file that became a symlink out of the folder, a FIFO, an oversized file or another file
than the one indexed is refused (the service answers 404), never read."""

import os
import shutil

import pytest
from fastapi.testclient import TestClient

from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.runs.origins import DataImages, read_sources, record_sources
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
            monkeypatch.setattr("lbhash.runs.origins.MAX_SOURCE_BYTES", 4096)
            fragment = "more than the 4096"
        with pytest.raises(InputError, match=fragment):
            images.read(0)
        reply = client.get("/items/0/image")
        assert reply.status_code == 404 and fragment in reply.json()["detail"], reply.text
        assert client.get("/items/2/image").status_code == 200  # the others still show
    assert outside.read_bytes() == before
