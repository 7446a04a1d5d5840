"""The members of a compressed tarball whose every member is a plain file or folder (ustar, GNU or v7
headers: what `tar` and Python's tarfile write for names of ordinary length), read in one pass over the
decompressed stream with their headers parsed here, as tarfile would read them: tarfile spends about
80 us a member in Python, 5 s of the CIFAR-10 tarball's 60,000 (docs/results/benchmarks/bench_tarball.md). Anything else
(a link, a pax or GNU long-name header, a sparse or device member, a bad checksum, a size in base 256,
a number it cannot parse) makes `plain_members` give up, and the caller reads the tarball with tarfile,
which refuses or reports it as before. A stream cut short is an EOFError (tarfile's stream mode stopped
quietly at some cuts, giving the members before it as if they were all); a corrupt one, the
decompressor's error.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path
from typing import Callable

_BLOCK = 512
_END = bytes(_BLOCK)  # an end-of-archive block
_PLAIN = {b"0": "file", b"\0": "file", b"5": "folder"}  # typeflags read here; any other: tarfile reads it


class _NotPlain(Exception):
    """A member this reader leaves to tarfile."""


def plain_members(path: Path, keep: Callable[[str], bool] | None, data: bool = True,
                  limit: int | None = None) -> list[tuple[str, bytes | None]] | None:
    """[(name, bytes)] of the regular members that `keep(name)` accepts (None: all), in the archive's
    order, names as `lbhash.data.image_sources` gives them (a leading './' dropped); bytes None where
    `data` is False. None where a member is not plain (the caller reads the tarball with tarfile), or
    the kept bytes pass `limit` (the caller's own pass then says so). EOFError where the stream is cut."""
    opener = _opener(path)
    if opener is None:
        return None
    out: list[tuple[str, bytes | None]] = []
    total = 0
    try:
        with opener(path, "rb") as fh:
            while True:
                header = fh.read(_BLOCK)
                if len(header) < _BLOCK:
                    raise EOFError(f"the archive ends after {len(out)} members, with no end-of-archive block")
                if header == _END:
                    return out
                name, kind, size = _parse(header)
                padded = -(-size // _BLOCK) * _BLOCK
                while name.startswith("./"):
                    name = name[2:]
                if kind == "file" and (keep is None or keep(name)):
                    body = fh.read(padded) if data else None
                    if body is not None:
                        if len(body) < padded:
                            raise EOFError(f"the archive ends inside member {name}")
                        body = body[:size]
                        total += size
                        if limit is not None and total > limit:
                            return None
                    elif padded:
                        _skip(fh, padded)
                    out.append((name, body))
                elif padded:
                    _skip(fh, padded)
    except (_NotPlain, ValueError):
        return None


def _opener(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open
    if magic[:3] == b"BZh":
        return bz2.open
    if magic == b"\xfd7zXZ\x00":
        return lzma.open
    return None


def _skip(fh, count: int) -> None:
    before = fh.tell()
    if fh.seek(count, 1) - before != count:  # (a compressed stream reads forward to it; a cut one stops short)
        raise EOFError("the archive ends inside a member")


def _parse(header: bytes) -> tuple[str, str, int]:
    """(name, "file" or "folder", size) of a plain member's header, as tarfile.TarInfo.frombuf reads a file's."""
    kind = _PLAIN.get(header[156:157])
    if kind is None:
        raise _NotPlain
    if header[124] & 0x80 or header[148] & 0x80:
        raise _NotPlain  # a number in base 256
    try:
        size = int(_nts(header[124:136]).strip() or "0", 8)
        checksum = int(_nts(header[148:156]).strip() or "0", 8)
    except ValueError:
        raise _NotPlain from None
    unsigned = 256 + sum(header) - sum(header[148:156])  # the checksum field counted as 8 spaces
    if checksum != unsigned and checksum != unsigned - 256 * sum(b > 127 for b in header[:148] + header[156:]):
        raise _NotPlain  # (the second: the sum of signed bytes, which some old tars wrote)
    name = _nts(header[:100])
    if kind == "file" and header[156:157] == b"\0" and name.endswith("/"):
        kind = "folder"  # a v7 folder (a folder's name is not read further: only files are kept)
    prefix = _nts(header[345:500])
    if prefix:
        name = f"{prefix}/{name}"
    return name, kind, size


def _nts(field: bytes) -> str:
    end = field.find(b"\0")
    return (field if end < 0 else field[:end]).decode("utf-8", "surrogateescape")
