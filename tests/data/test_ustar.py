"""lbhash.data.ustar reads a compressed tarball's plain members itself (tarfile's 60,000 headers of the
CIFAR-10 tarball took 5 s): what `open_tarball` and `compressed_tarball_names` give through it equals what
tarfile reads, member for member, in every format tarfile writes and every compression; a member it
leaves to tarfile (a link, a pax header, a long GNU name) gives tarfile's answer; a cut archive is refused."""

import io
import tarfile

import numpy as np
import pytest

from lbhash.data.image_sources import compressed_tarball_names, open_tarball
from lbhash.data.ustar import plain_members
from lbhash.errors import InputError

LONG = "train/" + "a" * 90 + "/" + "b" * 60 + "/0001.jpg"  # past 100 bytes: ustar's prefix field holds the folders


def write_tar(path, members, fmt, mode="w:gz", links=()):
    """A tarball of `members` ((name, bytes), a name ending in '/' a folder) and symbolic `links` (name, target)."""
    with tarfile.open(path, mode, format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return path


def by_tarfile(path, keep=None):
    """[(name, bytes)] of the regular members tarfile reads, './' dropped, those `keep` accepts."""
    out = []
    with tarfile.open(path, "r|*") as tf:
        for m in tf:
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            if m.isreg() and (keep is None or keep(name)):
                out.append((name, tf.extractfile(m).read()))
    return out


def members(rng):
    sizes = [0, 1, 511, 512, 513, 3000]
    files = [(f"./train/cat/{i:04d}.jpg", rng.integers(0, 256, n, dtype=np.uint8).tobytes()) for i, n in enumerate(sizes)]
    return [("train/", b""), ("train/cat/", b""), *files, ("test/dog/0000.png", b"\x89PNG" * 40), ("notes.txt", b"hi")]


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT])
def test_plain_members_equal_tarfiles_reading(tmp_path, rng, fmt, mode):
    wanted = members(rng) + [(LONG, b"long" * 100)] * (fmt == tarfile.USTAR_FORMAT)
    path = write_tar(tmp_path / "a.tar", wanted, fmt, mode)
    keep = lambda name: name.endswith((".jpg", ".png"))  # noqa: E731
    expected = by_tarfile(path, keep)
    assert len(expected) == 7 + (fmt == tarfile.USTAR_FORMAT)
    assert plain_members(path, keep) == expected  # read here, not left to tarfile
    source = open_tarball(path, keep)
    assert [n.decode() for n in source.names] == [name for name, _ in expected]
    assert [source.read(i) for i in range(len(expected))] == [data for _, data in expected]
    assert compressed_tarball_names(path, keep) == [name for name, _ in expected]
    assert [name for name, _ in plain_members(path, None, data=False)] == [name for name, _ in by_tarfile(path)]


def test_members_it_leaves_to_tarfile_read_as_tarfile_reads_them(tmp_path, rng):
    long_gnu = write_tar(tmp_path / "gnu.tar.gz", members(rng) + [(LONG.replace("train/", "x" * 120 + "/"), b"x")],
                         tarfile.GNU_FORMAT)
    pax = write_tar(tmp_path / "pax.tar.gz", members(rng) + [("train/cat/caf\u00e9.jpg", b"pax")], tarfile.PAX_FORMAT)
    for path in (long_gnu, pax):
        assert plain_members(path, None) is None
        expected = by_tarfile(path)
        source = open_tarball(path)
        assert [(n.decode(), source.read(i)) for i, n in enumerate(source.names)] == expected
    linked = write_tar(tmp_path / "link.tar.gz", members(rng), tarfile.USTAR_FORMAT, links=[("train/cat/9.jpg", "/etc/passwd")])
    assert plain_members(linked, None) is None
    with pytest.raises(InputError, match="symbolic link"):
        open_tarball(linked)
    assert len(open_tarball(linked, keep=lambda name: name.endswith(".png")).names) == 1  # an unwanted link is passed


@pytest.mark.parametrize("cut", [4000, 3584, 1000])  # inside a member's data, at its header, inside a header
def test_a_cut_archive_is_refused(tmp_path, rng, cut):
    """tarfile's stream mode gave the members before some cuts as if they were all (at 4000 bytes: three of
    the six): a cut stream is refused in one line, for the members and for their names."""
    import gzip

    whole = write_tar(tmp_path / "a.tar", members(rng), tarfile.USTAR_FORMAT, "w")
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(gzip.compress(whole.read_bytes()[:cut]))
    for read in (open_tarball, compressed_tarball_names):
        with pytest.raises(InputError, match="truncated or corrupt tarball") as err:
            read(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    packed = gzip.compress(whole.read_bytes())
    path.write_bytes(packed[:len(packed) // 2])  # the gzip stream itself cut
    with pytest.raises(InputError, match="truncated or corrupt tarball"):
        open_tarball(path)
