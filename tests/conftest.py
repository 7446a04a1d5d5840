import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("LBHASH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True, scope="session")
def pixel_cache_in_tmp(tmp_path_factory):
    """Tests never write to the user's cache: the decoded-pixel cache goes to a temporary folder."""
    folder = tmp_path_factory.mktemp("lbhash-cache")
    previous = os.environ.get("LBHASH_CACHE_DIR")
    os.environ["LBHASH_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("LBHASH_CACHE_DIR", None)
    else:
        os.environ["LBHASH_CACHE_DIR"] = previous


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set LBHASH_SHARED_DATA)")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def tiny_image_run(tmp_path_factory):
    """(image tree, run directory): a 16-bit CSQ run on generated PNGs (tests/page_helpers.py),
    trained once per session for the search-page tests."""
    from page_helpers import make_image_tree, train_tiny_run

    root = tmp_path_factory.mktemp("tiny-image-run")
    tree = make_image_tree(root / "imgs")
    return tree, train_tiny_run(tree, root / "run")
