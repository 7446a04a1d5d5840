"""`lbhash evaluate-copies` and its edits (lbhash.data.edits), and a search of an index with instance codes through
the command line: issue 68's near-duplicate evaluation on the session's tiny image run."""

import json

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from helpers import cli
from lbhash.data.edits import EDITS, edited, trimmed
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
    grey = edited(img, "grayscale")
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()
    framed = edited(img, "border")  # 24 of 32 pixels a side, centred in white
    assert (framed[:4] == 255).all() and (framed[-4:] == 255).all() and (framed[:, :4] == 255).all()
    np.testing.assert_array_equal(framed[4:28, 4:28], np.asarray(Image.fromarray(img).resize((24, 24), Image.BILINEAR)))
    boxed = edited(img, "letterbox")  # 22 of 32 rows between black bars of 5
    assert (boxed[:5] == 0).all() and (boxed[-5:] == 0).all() and boxed[5:27].any()
    turned = edited(img, "rotate")
    assert (turned[0, 0] == 0).all() and (turned[16, 16] == np.asarray(Image.fromarray(img).rotate(5, Image.BILINEAR))[16, 16]).all()
    logo = edited(img, "overlay")  # a 6-pixel red square with a white bar, lower right
    assert (logo[26:, 26:][0, 0] == (220, 30, 30)).all() and (logo[:26, :26] == img[:26, :26]).all()
    with pytest.raises(InputError, match="edits must be distinct names among jpeg, jpeg30, flip"):
        edited(img, "blur")


def test_trimmed_takes_off_a_one_colour_frame_and_nothing_else(rng):
    """A photo framed by the `border` edit, letterboxed, or inside noisy bars (JPEG-like, within the
    tolerance) comes back as the part inside; a photo with no frame, or of one colour, as it is."""
    photo = rng.integers(40, 216, (20, 30, 3)).astype(np.uint8)
    framed = np.full((30, 40, 3), 255, np.uint8)
    framed[4:24, 6:36] = photo
    assert np.array_equal(trimmed(framed), photo)
    bars = np.zeros((40, 30, 3), np.uint8)
    bars[:10] = rng.integers(0, 20, (10, 30, 3))  # noise under the tolerance of 24
    bars[10:30] = photo
    assert np.array_equal(trimmed(bars), photo)
    assert np.array_equal(trimmed(photo), photo)
    flat = np.full((16, 16, 3), 7, np.uint8)
    assert np.array_equal(trimmed(flat), flat)  # (all margin: less than a quarter would be left)


def test_random_edits_are_seeded_chains_of_the_family():
    from lbhash.data.edits import random_edit

    img = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    first = [random_edit(img, np.random.default_rng((7, i))) for i in range(20)]
    again = [random_edit(img, np.random.default_rng((7, i))) for i in range(20)]
    for a, b in zip(first, again):
        assert a.shape == img.shape and a.dtype == np.uint8
        np.testing.assert_array_equal(a, b)
    assert sum(not np.array_equal(a, img) for a in first) >= 18  # nearly every chain changes the photo
    assert len({a.tobytes() for a in first}) == 20


def test_duplicates_reports_every_order_and_a_search_marks_the_same_picture(tiny_image_run, tmp_path):
    tree, run = tiny_image_run
    built = cli("index", "build", run, "--out", tmp_path / "ix", "--instance-bits", "16")
    assert built.exit_code == 0, built.output
    info = json.loads(cli("index", "info", tmp_path / "ix", "--json").output)
    assert info["instance_bits"] == 16 and info["code_bytes_per_item"] == 2 + 2
    assert info["instance_transform"]["bits"] == 16 and len(info["instance_transform"]["sha256"]) == 64
    result = cli("evaluate-copies", tmp_path / "ix", "--run", run, "--items", "6", "--edits", "flip,jpeg", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["items"] == 6 and report["edits"] == ["flip", "jpeg"]
    assert list(report["orders"]) == ["hamming", "codes", "blend"]
    for name, order in report["orders"].items():
        for m in order["edits"].values():
            assert 0 <= m["recall@1"] <= m["recall@10"] <= 1 and 0 <= m["class_p@10"] <= 1
            if name != "hamming":  # no calibrated mark on 48 photos: nothing marked, with the originals or without
                assert m["mark_recall"] == 0 and m["mark_precision"] is None and m["false_marks_absent"] == 0
    assert report["mark"]["mark"] is None and "too few" in report["mark"]["why"]
    assert report["orders"]["codes"]["bytes_per_item"] == 4 and report["orders"]["hamming"]["bytes_per_item"] == 2
    # a photo of the index searched as itself: first, by score, but unmarked: 48 photos are too few to
    # calibrate a same-picture mark on, and `index info` says so
    assert info["same_picture"]["mark"] is None and "too few" in info["same_picture"]["why"]
    photo = sorted((tree / "train").rglob("*.png"))[0]
    found = json.loads(cli("search", tmp_path / "ix", "--images", photo, "--run", run, "-k", "3", "--json").output)
    hits = found[0]
    assert hits["same"] == [False] * 3 and hits["sources"][0] == str(photo)
    text = cli("search", tmp_path / "ix", "--images", photo, "--run", run, "-k", "3").output
    assert "=: the same picture" not in text and " = id " not in text  # no legend for a mark never given
    assert text.strip().splitlines()[-1].startswith("no hit is marked the same picture: ") and "too few" in text
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


def test_a_run_of_photos_learns_its_instance_code_and_calibrates_its_mark(tiny_image_run, tmp_path, monkeypatch):
    """`index build` on the tiny run with the thresholds lowered to its 48 photos: the code is learned
    (and says from what), the mark is calibrated on held-out photos that the learning did not see (or,
    where these noisy one-colour photos cannot be told apart, none is given and the record says why),
    `index info` shows it, and `--instance-method itq` or a run of too few photos keeps the ITQ code."""
    from lbhash.index import CodeIndex
    from lbhash.instance import MARK_KEY
    from lbhash.indexes import index_inputs, instance_learning

    monkeypatch.setattr(instance_learning, "MIN_LEARN_PHOTOS", 10)
    monkeypatch.setattr(instance_learning, "MIN_CALIBRATION", 5)
    monkeypatch.setattr(instance_learning, "COPIES", 2)
    _, run = tiny_image_run
    built = cli("index", "build", run, "--out", tmp_path / "ix", "--instance-bits", "16")
    assert built.exit_code == 0, built.output
    index = CodeIndex.load(tmp_path / "ix")
    inst = index.metadata["instance"]
    assert inst["method"] == "learned" and inst["fitted_on"].startswith("learned from ")
    record = index.metadata[MARK_KEY]
    held = record["held"]
    assert record["photos"] == len(held) == index.ntotal // 5 and record["copies"] == len(held) * len(record["edits"])
    train = index_inputs.run_training_items(run)
    assert set(held) <= set(index.ids().tolist())
    # the held-out photos were not learned from
    assert f"learned from {len(set(train.tolist()) - set(held))} " in inst["fitted_on"]
    assert (record["mark"] is None) == ("why" in record)
    info = json.loads(cli("index", "info", tmp_path / "ix", "--json").output)
    assert info["same_picture"]["mark"] == record["mark"] and "held" not in info["same_picture"]
    itq = cli("index", "build", run, "--out", tmp_path / "itq", "--instance-bits", "16", "--instance-method", "itq")
    assert itq.exit_code == 0 and CodeIndex.load(tmp_path / "itq").metadata["instance"]["method"] == "itq"
    monkeypatch.setattr(instance_learning, "MIN_LEARN_PHOTOS", 100)
    few = cli("index", "build", run, "--out", tmp_path / "few", "--instance-bits", "16")
    assert few.exit_code == 0 and "too few to learn an instance code on" in few.output
    assert CodeIndex.load(tmp_path / "few").metadata["instance"]["method"] == "itq"
