"""Image list files (`list:` data): the lists protocol, presets, bad rows and missing images."""

import os
import tarfile

import numpy as np
from helpers import make_list_set, one_line_message, raises

from lbhash.data import LIST_PRESETS, check_images, load_data, load_image_folder, load_image_lists, make_split


def test_lists_protocol(tmp_path):
    d = make_list_set(tmp_path)
    ds = load_data(f"list:{d}?root={tmp_path / 'imgs'}")
    s = make_split(ds, "lists", seed=3)
    assert (len(s.train), len(s.query), len(s.database), s.topk) == (2, 2, 4, None)
    np.testing.assert_array_equal(s.train, [0, 1])
    np.testing.assert_array_equal(s.query, [2, 3])
    np.testing.assert_array_equal(np.sort(s.database), [0, 1, 4, 5])  # train items are database items
    np.testing.assert_array_equal(make_split(ds, "lists", seed=3).database, s.database)
    with raises("protocol 'lists'", "images:", "has none"):
        make_split(load_image_folder(tmp_path / "imgs"), "lists", 0)
    assert make_split(ds, "given", 0).sizes() == {"train": 4, "query": 2, "database": 4, "validation": 0}


def test_list_presets(tmp_path):
    multi = [{0, 5}, {1}, {2, 20}, {3}, {4}, {7, 8}]
    d = make_list_set(tmp_path / "nus", 21, multi)
    ds = load_data(f"list:{d}?root={tmp_path / 'nus' / 'imgs'}&preset=nuswide21")
    assert ds.name == "nuswide21" and ds.topk == 5000 and ds.multi_label and ds.num_classes == 21
    assert make_split(ds, "lists", 0).topk == 5000
    d = make_list_set(tmp_path / "inet", 100)
    ds = load_data(f"list:{d}?root={tmp_path / 'inet' / 'imgs'}&preset=imagenet100")
    assert ds.topk == 1000 and not ds.multi_label and make_split(ds, "lists", 0).topk == 1000
    assert LIST_PRESETS["imagenet100"].num_labels == 100
    with raises("train.txt:1", "3 label values, expected 21"):
        load_image_lists(make_list_set(tmp_path / "few", 3), preset="nuswide21")
    with raises("train.txt:1", "2 labels", "single-label"):
        load_image_lists(make_list_set(tmp_path / "two", 100, multi), preset="imagenet100")
    with raises("option preset must be one of", "nuswide21", "'coco'"):
        load_data(f"list:{d}?preset=coco")


def test_list_file_errors(tmp_path):
    d = make_list_set(tmp_path)
    text = (d / "database.txt").read_text().splitlines()
    (d / "database.txt").write_text("\n".join(text[:2] + ["c1/4.png 0 1"] + text[3:]) + "\n")
    with raises("database.txt:3", "2 label values, expected 3") as exc:
        load_image_lists(d, root=tmp_path / "imgs")
    one_line_message(exc)
    (d / "database.txt").write_text("\n".join(text[:3] + ["c2/5.png 0 2 0"]) + "\n")
    with raises("database.txt:4", "label value '2' is not 0 or 1"):
        load_image_lists(d, root=tmp_path / "imgs")
    (d / "database.txt").write_text("\n".join(["c0/0.png 0 0 1"] + text[1:]) + "\n")
    with raises("database.txt:1", "c0/0.png has other labels than at", "train.txt:1"):
        load_image_lists(d, root=tmp_path / "imgs")
    (d / "database.txt").unlink()
    with raises("no database.txt"):
        load_image_lists(d)


def test_missing_image_in_list(tmp_path):
    d = make_list_set(tmp_path)
    os.remove(tmp_path / "imgs" / "c1" / "4.png")
    ds = load_image_lists(d, root=tmp_path / "imgs")
    with raises(str(tmp_path / "imgs" / "c1" / "4.png"), "cannot read image") as exc:
        check_images(ds)
    one_line_message(exc)
    ok, bad = check_images(ds, skip_bad=True)
    np.testing.assert_array_equal(ok, [0, 1, 2, 3, 5])
    assert bad == 1
    with tarfile.open(tmp_path / "imgs.tar", "w") as tf:
        tf.add(tmp_path / "imgs", arcname=".")
    ds = load_image_lists(d, root=tmp_path / "imgs.tar")
    with raises("imgs.tar:c1/4.png", "no such member"):
        check_images(ds)
