"""Files lbhash writes beside an index (its writer lock, the service's write-ahead log, the
folder of kept uploads and its files) are its own regular files: a symbolic link planted there (dangling or not), a FIFO or a directory is
refused in one line, and whatever it points to is left untouched, never truncated, written or
created."""

import os

import pytest

from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.index.writer_lock import lock_path, writer_lock
from lbhash.serving.index_store import IndexStore
from lbhash.serving.wal import WriteAheadLog


@pytest.fixture
def index_dir(tmp_path):
    CodeIndex(32).save(tmp_path / "idx")
    return tmp_path / "idx"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "precious.txt"
    path.write_text("do not touch\n")
    return path


def test_a_link_at_the_lock_is_refused_and_its_target_untouched(index_dir, victim, tmp_path):
    os.symlink(victim, lock_path(index_dir))
    with pytest.raises(InputError, match=r"\.idx\.serve\.lock: is a symbolic link"):
        writer_lock(index_dir, "lbhash index add")
    with pytest.raises(InputError, match="is a symbolic link"):
        IndexStore(index_dir)
    assert victim.read_text() == "do not touch\n"
    os.remove(lock_path(index_dir))
    os.symlink(tmp_path / "created.txt", lock_path(index_dir))  # dangling: the target is not created
    with pytest.raises(InputError, match="is a symbolic link"):
        writer_lock(index_dir, "lbhash serve")
    assert not (tmp_path / "created.txt").exists()


def test_a_link_at_the_log_is_refused_and_its_target_untouched(index_dir, victim, tmp_path):
    wal = tmp_path / "idx.wal"
    os.symlink(victim, wal)
    with pytest.raises(InputError, match=r"idx\.wal: is a symbolic link"):
        WriteAheadLog(wal)
    with pytest.raises(InputError, match="is a symbolic link"):
        IndexStore(index_dir)
    assert victim.read_text() == "do not touch\n"
    writer_lock(index_dir, "x").release()  # the store that failed to open released its lock


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_at_the_lock_or_log_is_refused_at_once(index_dir, tmp_path, kind):
    for path in (lock_path(index_dir), tmp_path / "idx.wal"):
        os.mkfifo(path) if kind == "fifo" else path.mkdir()
        with pytest.raises(InputError, match="is not a regular file"):
            (writer_lock(index_dir, "x") if path == lock_path(index_dir) else WriteAheadLog(path))
        os.remove(path) if kind == "fifo" else path.rmdir()


def test_the_regular_files_still_work(index_dir, tmp_path):
    with writer_lock(index_dir, "lbhash index add"):
        assert lock_path(index_dir).read_text().split()[1:] == ["lbhash", "index", "add"]
    log = WriteAheadLog(tmp_path / "idx.wal")
    assert log.append({"op": "add"}) == 1 and log.append({"op": "delete"}) == 2
    log.close()
    again = WriteAheadLog(tmp_path / "idx.wal")
    assert [r["op"] for r in again.records] == ["add", "delete"] and again.last_seq == 2
    again.close()


# --- the images the service keeps beside an index (NAME.media/) -----------------------------------

def test_links_in_the_media_folder_are_refused_and_their_targets_untouched(index_dir, victim, tmp_path):
    from lbhash.serving.uploads import KeptImages, media_dir_for

    media = media_dir_for(index_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, media)  # the whole folder
    with pytest.raises(InputError, match=r"idx\.media: is not a folder of its own"):
        KeptImages(media)
    os.remove(media)
    media.mkdir()
    os.symlink(victim, media / "gone.log")  # the log of removed ids: appended to, never through a link
    with pytest.raises(InputError, match="gone.log: is a symbolic link"):
        KeptImages(media)
    os.remove(media / "gone.log")
    kept = KeptImages(media)  # opened, as a running server has it, before the link is planted
    os.symlink(victim, media / "7.item")  # an upload's image
    with pytest.raises(InputError, match=r"7\.item: is not a regular file"):
        KeptImages(media)  # a server starting now refuses
    assert not kept.has(7) and kept.name(7) is None
    with pytest.raises(InputError, match="is a symbolic link"):
        kept.read(7)
    os.remove(media / "7.item")
    os.mkfifo(media / "gone.log")  # would block a reader for ever
    with pytest.raises(InputError, match="gone.log: is not a regular file"):
        KeptImages(media)
    assert victim.read_text() == "do not touch\n" and list(elsewhere.iterdir()) == []


def test_concurrent_first_uploads_share_the_new_media_folder(tmp_path, monkeypatch):
    """The first uploads of a server arriving together: each found no folder and created it, and all
    but one failed with FileExistsError (a 500 in test_upload_pixels). A slow mkdir widens that window."""
    import threading
    import time
    from pathlib import Path

    from lbhash.serving.uploads import KeptImages

    kept = KeptImages(tmp_path / "ix.media")
    real_mkdir, start = Path.mkdir, threading.Barrier(4)

    def slow_mkdir(self, *args, **kwargs):
        time.sleep(0.2)
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", slow_mkdir)
    staged, errors = [], []

    def upload(i):
        start.wait()
        try:
            staged.append(kept.stage([b"image %d" % i], [f"{i}.png"]))
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and len(staged) == 4
    kept.commit([s[0] for s in staged], range(4))
    assert sorted(p.name for p in (tmp_path / "ix.media").iterdir()) == ["0.item", "1.item", "2.item", "3.item"]
