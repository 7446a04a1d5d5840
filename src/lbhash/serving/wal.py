"""The write-ahead log: every acknowledged change, fsynced before the answer.

One record a line: 8 hex digits of CRC-32, a space, the JSON record. Sequence numbers increase
and the saved index records the last it holds ("wal_seq"), so replay applies nothing twice. A
torn last line (no newline: never acknowledged) is cut off on open; a damaged whole line is
refused, the last one too (its change may have been acknowledged), naming the line.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from lbhash._io import open_own_file
from lbhash.errors import InputError


class WriteAheadLog:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.records: list[dict] = []
        self._fh = os.fdopen(open_own_file(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND), "a+b")
        try:
            self._fh.seek(0)
            good_bytes = self._read(self._fh.read())
        except BaseException:
            self._fh.close()
            raise
        if self._fh.seek(0, os.SEEK_END) != good_bytes:  # cut a torn tail before appending after it
            self._fh.truncate(good_bytes)
            os.fsync(self._fh.fileno())
        self.last_seq = self.records[-1]["seq"] if self.records else 0

    def _read(self, data: bytes) -> int:
        lines, good = data.split(b"\n"), 0
        for number, line in enumerate(lines[:-1], start=1):
            record = _parse(line)
            if record is None:
                # a whole line (its newline written) may be an acknowledged change, even the last:
                # an append is acknowledged only after the write of its whole line is fsynced
                last = " (the last; it may be an acknowledged change)" if number == len(lines) - 1 else ""
                raise InputError(f"{self.path}: damaged record at line {number}{last}; refusing to replay the "
                                 "log: restore the file, or delete that line to drop its change")
            if self.records and record["seq"] <= self.records[-1]["seq"]:
                raise InputError(f"{self.path}: sequence numbers go backwards at line {number}")
            self.records.append(record)
            good += len(line) + 1
        return good  # whatever follows (a line without its newline) is a torn append

    def append(self, record: dict) -> int:
        """Write a record with the next sequence number and fsync it; return the number."""
        seq = self.last_seq + 1
        body = json.dumps({"seq": seq, **record}, separators=(",", ":")).encode()
        self._fh.write(b"%08x %s\n" % (zlib.crc32(body), body))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.last_seq = seq
        return seq

    def truncate(self) -> None:
        """Empty the log (after its records were saved into the index)."""
        self._fh.truncate(0)
        self._fh.seek(0)
        os.fsync(self._fh.fileno())
        self.records = []

    def close(self) -> None:
        self._fh.close()


def _parse(line: bytes) -> dict | None:
    crc, _, body = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
            return None
        record = json.loads(body)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("seq"), int) else None
