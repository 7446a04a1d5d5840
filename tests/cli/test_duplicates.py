"""`lbhash duplicates` and its edits (lbhash.data.edits), and a search of an index with instance codes through
the command line: issue 68's near-duplicate evaluation on the session's tiny image run."""

import json

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from helpers import cli
from lbhash.data.edits import EDITS, edited
from lbhash.errors import InputError


def test_each_edit_is_what_its_name_says():
    img = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    np.testing.assert_array_equal(edited(img, "flip"), img[:, ::-1])
    crop = np.asarray(Image.fromarray(img[3:29, 3:29]).resize((32, 32), Image.BILINEAR))  # the central 26 of 32
    np.testing.assert_array_equal(edited(img, "crop"), crop)
    bright = ImageEnhance.Contrast(ImageEnhance.Brightness(Image.fromarray(img)).enhance(1.25)).enhance(0.8)
    np.testing.assert_array_equal(edited(img, "colour"), np.asarray(bright))
    for name in EDITS:
        out = edited(img, name)
        assert out.shape == img.shape and out.dtype == np.uint8 and not np.array_equal(out, img)
        np.testing.assert_array_equal(edited(img, name), out)  # deterministic
    with pytest.raises(InputError, match="edits must be distinct names among jpeg, flip"):
        edited(img, "blur")


def test_duplicates_reports_every_order_and_a_search_marks_the_same_picture(tiny_image_run, tmp_path):
    tree, run = tiny_image_run
    built = cli("index", "build", run, "--out", tmp_path / "ix", "--instance-bits", "16")
    assert built.exit_code == 0, built.output
    info = json.loads(cli("index", "info", tmp_path / "ix", "--json").output)
    assert info["instance_bits"] == 16 and info["code_bytes_per_item"] == 2 + 2
    assert info["instance_transform"]["bits"] == 16 and len(info["instance_transform"]["sha256"]) == 64
    result = cli("duplicates", tmp_path / "ix", "--run", run, "--items", "6", "--edits", "flip,jpeg", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["items"] == 6 and report["edits"] == ["flip", "jpeg"]
    assert list(report["orders"]) == ["hamming", "codes", "blend"]
    for order in report["orders"].values():
        for m in order["edits"].values():
            assert 0 <= m["recall@1"] <= m["recall@10"] <= 1 and 0 <= m["class_p@10"] <= 1
    assert report["orders"]["codes"]["bytes_per_item"] == 4 and report["orders"]["hamming"]["bytes_per_item"] == 2
    # a photo of the index searched as itself: first, marked the same picture, by score
    photo = sorted((tree / "train").rglob("*.png"))[0]
    found = json.loads(cli("search", tmp_path / "ix", "--images", photo, "--run", run, "-k", "3", "--json").output)
    hits = found[0]
    assert hits["same"][0] is True and hits["sources"][0] == str(photo)
    assert hits["scores"] == sorted(hits["scores"], reverse=True) and len(hits["instance_distances"]) == 3
    refused = cli("search", tmp_path / "ix", "--images", photo, "--run", run, "--looks-like", "1.5")
    assert refused.exit_code == 2 and "--looks-like must be a number from 0" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_instance_bits_out_of_range_is_one_line_and_writes_nothing(tiny_image_run, tmp_path):
    _, run = tiny_image_run
    for bits, message in (("12", "--instance-bits must be a multiple of 8"),
                          ("100000", "--instance-bits must be a multiple of 8 from 8 to 4096")):
        result = cli("index", "build", run, "--out", tmp_path / "ix", "--instance-bits", bits)
        assert result.exit_code == 2 and message in result.output, result.output
        assert not (tmp_path / "ix").exists()
