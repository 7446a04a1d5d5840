"""Image paths stay inside their image root (issue 27, item 4): symlinks in folders and list
roots are resolved and must not lead out of the root; tarball link members are refused. Each
is one line naming the path and the root (exit 2), even with --skip-bad-images."""

import io
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from helpers import cli, one_line_error
from lbhash.data import load_data, load_image_folder, load_image_lists
from lbhash.data.image_root import leaves_root
from lbhash.errors import InputError


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))


def png(color, size=(8, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def tree(tmp_path, name="imgs"):
    """train/{a,b}/ and test/{a,b}/, three 8 x 8 images each."""
    root = tmp_path / name
    for split in ("train", "test"):
        for c, cls in enumerate("ab"):
            (root / split / cls).mkdir(parents=True)
            for k in range(3):
                (root / split / cls / f"{k}.png").write_bytes(png((40 * k, 100 * c, 7 if split == "test" else 0)))
    return root


def outside_files(tmp_path):
    """An image and a passwd-like text file outside any image root."""
    out = tmp_path / "elsewhere"
    out.mkdir()
    (out / "secret.png").write_bytes(png((1, 2, 3)))
    (out / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return out


def error_of(call, *fragments):
    with pytest.raises(InputError) as exc:
        call()
    message = str(exc.value)
    assert "\n" not in message
    for fragment in fragments:
        assert str(fragment) in message, (fragment, message)
    return message


@pytest.mark.parametrize("target", ["secret.png", "passwd"])
def test_a_symlink_out_of_a_folder_is_refused(tmp_path, target):
    root, out = tree(tmp_path), outside_files(tmp_path)
    link = root / "train" / "a" / "9.png"
    os.symlink(out / target, link)
    error_of(lambda: load_data(f"images:{root}"), link, f"leaves the image root {root}", out / target)


def test_the_cli_refuses_it_even_with_skip_bad_images(tmp_path):
    root, out = tree(tmp_path), outside_files(tmp_path)
    os.symlink(out / "secret.png", root / "train" / "a" / "9.png")
    os.symlink("/etc/passwd", root / "train" / "b" / "9.png")
    result = cli("train", "--data", f"images:{root}", "--protocol", "given", "--epochs", "1", "--bits", "16",
                 "--skip-bad-images", "--out", tmp_path / "run", "--no-progress")
    one_line_error(result, "9.png", f"leaves the image root {root}")
    assert not (tmp_path / "run").exists()


def test_a_symlinked_folder_out_of_the_root_is_refused(tmp_path):
    root, out = tree(tmp_path), outside_files(tmp_path)
    os.symlink(out, root / "train" / "c")
    error_of(lambda: load_image_folder(root), root / "train" / "c", "leaves the image root", out)


def test_a_folder_loop_is_refused(tmp_path):
    root = tree(tmp_path)
    os.symlink(root / "train", root / "train" / "a" / "again")
    error_of(lambda: load_image_folder(root), "again", "a loop")


def test_symlinks_inside_the_root_work(tmp_path):
    root = tree(tmp_path)
    os.symlink(root / "test" / "b" / "2.png", root / "train" / "a" / "9.png")  # absolute, inside
    os.symlink("../../test/a/1.png", root / "train" / "b" / "9.png")              # relative, inside
    os.symlink("/etc/passwd", root / "train" / "a" / "notes.txt")               # never read: ignored
    linked = tmp_path / "linked"
    os.symlink(root, linked)                                                    # the root itself a link
    for where in (root, linked):
        ds = load_image_folder(where)
        names = [ds.where(i) for i in range(len(ds))]
        assert len(ds) == 14 and sum(n.endswith("9.png") for n in names) == 2
        k = names.index(str(where / "train" / "a" / "9.png"))
        np.testing.assert_array_equal(ds.image(k), np.asarray(Image.open(root / "test" / "b" / "2.png")))


def tar_with_links(path, mode, link_type):
    with tarfile.open(path, mode) as tf:
        for cls in "ab":
            for k in range(2):
                data = png((k, 10, 20))
                info = tarfile.TarInfo(f"{cls}/{k}.png")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("a/9.png")
        link.type = link_type
        link.linkname = "/etc/passwd" if link_type == tarfile.SYMTYPE else "b/0.png"
        tf.addfile(link)
    return path


@pytest.mark.parametrize("suffix, mode", [(".tar", "w"), (".tar.gz", "w:gz")])
@pytest.mark.parametrize("link_type", [tarfile.SYMTYPE, tarfile.LNKTYPE], ids=["symlink", "hardlink"])
def test_tarball_links_are_refused(tmp_path, suffix, mode, link_type):
    tar = tar_with_links(tmp_path / f"t{suffix}", mode, link_type)
    kind = "symbolic" if link_type == tarfile.SYMTYPE else "hard"
    error_of(lambda: load_data(f"images:{tar}"), f"{tar}:a/9.png", f"{kind} link", "refused")


def test_a_link_that_is_never_read_is_left_alone(tmp_path):
    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w") as tf:
        for k in range(4):
            info, data = tarfile.TarInfo(f"{'ab'[k % 2]}/{k}.png"), png((k, 0, 0))
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("README")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    assert len(load_data(f"images:{tar}")) == 4


def list_dir(tmp_path, lines):
    lists = tmp_path / "lists"
    lists.mkdir(parents=True)
    for name in ("train.txt", "test.txt", "database.txt"):
        (lists / name).write_text("".join(f"{line} 1 0\n" for line in lines))
    return lists


def test_list_paths_go_through_the_same_check(tmp_path):
    root, out = tree(tmp_path), outside_files(tmp_path)
    lists = list_dir(tmp_path, ["train/a/0.png", "../elsewhere/secret.png"])
    message = error_of(lambda: load_image_lists(lists, root=root), "train.txt:2", "'../elsewhere/secret.png'")
    assert message == str(leaves_root(f"{lists / 'train.txt'}:2: '../elsewhere/secret.png'", root,
                                      str(out / "secret.png")))
    one_line_error(cli("train", "--data", f"list:{lists}?root={root}", "--out", tmp_path / "run"),
                   "train.txt:2", "leaves the image root")


def test_list_paths_through_a_symlink_out_of_the_root(tmp_path):
    root, out = tree(tmp_path), outside_files(tmp_path)
    os.symlink(out, root / "train" / "ext")
    os.symlink(out / "passwd", root / "train" / "a" / "p.png")
    os.symlink(root / "test" / "a" / "0.png", root / "train" / "a" / "in.png")
    for bad, resolved in (("train/ext/secret.png", out / "secret.png"), ("train/a/p.png", out / "passwd")):
        lists = list_dir(tmp_path / bad.replace("/", "_"), ["train/a/0.png", bad])
        error_of(lambda: load_image_lists(lists, root=root), "train.txt:2", f"leaves the image root {root}",
                 resolved)
    ok = load_image_lists(list_dir(tmp_path / "ok", ["train/a/0.png", "train/a/in.png"]), root=root)
    np.testing.assert_array_equal(ok.image(1), np.asarray(Image.open(root / "test" / "a" / "0.png")))


def test_a_list_root_tarball_refuses_listed_links(tmp_path):
    tar = tar_with_links(tmp_path / "t.tar", "w", tarfile.SYMTYPE)
    error_of(lambda: load_image_lists(list_dir(tmp_path / "bad", ["a/0.png", "a/9.png"]), root=tar),
             f"{tar}:a/9.png", "symbolic link")
    ds = load_image_lists(list_dir(tmp_path / "ok", ["a/0.png", "b/1.png"]), root=tar)  # the link is not listed
    assert len(ds) == 2 and ds.image(1).shape == (8, 8, 3)
    error_of(lambda: load_image_lists(list_dir(tmp_path / "up", ["a/0.png", "../t.tar"]), root=tar),
             "train.txt:2", f"leaves the image root {tar}")


def test_list_file_paths_may_not_leave_the_image_root(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    for name in ("train.txt", "test.txt", "database.txt"):
        (lists / name).write_text("a.jpg 1 0\n../../../../etc/passwd 0 1\n")
    one_line_error(cli("train", "--data", f"list:{lists}", "--out", tmp_path / "run"),
                   "train.txt:2", "leaves the image root")
