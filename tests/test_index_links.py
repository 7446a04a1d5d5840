"""Files lbhash writes beside an index (its writer lock, the service's write-ahead log) are its
own regular files: a symbolic link planted there (dangling or not), a FIFO or a directory is
refused in one line, and whatever it points to is left untouched, never truncated, written or
created."""

import os

import pytest

from lbhash.errors import InputError
from lbhash.index import CodeIndex
from lbhash.index.writer_lock import lock_path, writer_lock
from lbhash.service.store import IndexStore
from lbhash.service.wal import WriteAheadLog


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
