"""The intake journal: a lone inbound line made durable with one write.

Storing a line in SQLite costs a transaction: a lock, B-tree updates across
half a dozen pages, a write per page and an fsync.  On a quiet daemon that
work sits between a peer's line arriving and our ack leaving.  The journal
takes it off that path: the line is appended to a small preallocated file
and ``fdatasync``-ed (one write, one sync), the ack goes out, and only then
is the line stored in SQLite the usual way.  Once everything journaled is
stored, the journal starts again from its beginning.

A crash between the ack and the SQLite commit leaves the line in the
journal; :meth:`IntakeJournal.recover` hands it back at the next start,
before any peer is served, and storing it again is harmless (inbound lines
are deduplicated by sender and id).  So the ack still promises what it
always did: the line survives ``kill -9`` and power loss.

File layout: records back to back from offset 0, each

    magic "AWPi" | payload length (u32) | serial (u64) | crc32 (u32) | payload

with the payload ``peer key \\n received-at ms \\n raw line``.  Serials grow
by one from record to record, and across rounds.  Recovery reads from the
start and follows the chain while magic, length, checksum and serial agree.
Where the chain breaks it looks further: a record that checks out and
carries a higher serial was written later in this round (acked), so the
break was damage, and reading goes on from there; leftovers of earlier
rounds carry lower serials and are ignored, as is a torn write (never acked)
at the end.  What recovery met is counted (:class:`Scan`), so the caller
can report it and keep the file for a closer look.

The file is filled with zeros when created, so appends overwrite blocks the
file already owns and the sync has no file size or block map to update.  A
file found shorter than that is extended from its end, never rewritten:
what it holds is read first.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass
from typing import NamedTuple

log = logging.getLogger("awp.store")

MAGIC = b"AWPi"
_HEADER = struct.Struct("<4sIQI")
SIZE = 1 << 20  # the file; a round of journaled lines must fit in it
MAX_RECORD = 64 * 1024  # larger lines take the ordinary path
_ROOM = 256  # a record's payload beyond the line: peer key, time, separators
_sync = getattr(os, "fdatasync", os.fsync)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Record:
    peer: str
    at: int  # Unix ms when the line was received
    text: str  # the raw line, without its newline


def encode(serial: int, rec: Record) -> bytes:
    payload = f"{rec.peer}\n{rec.at}\n{rec.text}".encode()
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<IQ", len(payload), serial)))
    return _HEADER.pack(MAGIC, len(payload), serial, crc) + payload


class Scan(NamedTuple):
    """What recovery read from a journal."""

    records: list[Record]  # the lines of the current round, in order
    last: int  # the last serial read (0 if none)
    damaged: int = 0  # breaks in the chain with good records of this round after them
    torn: int = 0  # the round ends in a record of it that does not check out


def _record_at(data: bytes, off: int) -> tuple[Record, int, int] | None:
    """The record at ``off`` as (record, serial, end), or None if it does not check out."""
    if off + _HEADER.size > len(data):
        return None
    magic, length, serial, crc = _HEADER.unpack_from(data, off)
    end = off + _HEADER.size + length
    if magic != MAGIC or length > MAX_RECORD or end > len(data):
        return None
    payload = data[off + _HEADER.size:end]
    if zlib.crc32(payload, zlib.crc32(struct.pack("<IQ", length, serial))) != crc:
        return None
    try:
        peer, at, text = payload.decode().split("\n", 2)
        return Record(peer, int(at), text), serial, end
    except ValueError:
        return None


def decode_all(data: bytes) -> Scan:
    """The records of the current round, in order, and what was met on the way."""
    out: list[Record] = []
    off, last, damaged, torn = 0, 0, 0, 0
    while True:
        got = _record_at(data, off)
        if got is not None and (not out or got[1] == last + 1):
            out.append(got[0])
            last, off = got[1], got[2]
            continue
        if not any(data[off:off + _HEADER.size]):
            break  # zeros: never written, or cleared after the last round was stored
        later = _next_after(data, off + 1, last)
        if later is None:
            # Offset 0 holds zeros or this round's first record; further on, a
            # header with the next serial is this round's too: cut short or damaged.
            if off == 0 or (off + _HEADER.size <= len(data) and data[off:off + 4] == MAGIC
                            and _HEADER.unpack_from(data, off)[2] == last + 1):
                torn = 1
            break
        damaged += 1
        rec, last, off = later
        out.append(rec)
    return Scan(out, last, damaged, torn)


def _next_after(data: bytes, start: int, last: int) -> tuple[Record, int, int] | None:
    """The next record from ``start`` on that checks out with a serial above ``last``."""
    at = data.find(MAGIC, start)
    while at != -1:
        got = _record_at(data, at)
        if got is not None and got[1] > last:
            return got
        at = data.find(MAGIC, at + 1)
    return None


class IntakeJournal:
    """The journal file of one home; used from one thread (the event loop)."""

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self.path = path
        self._off = 0
        self._serial = time.time_ns()  # above any serial a past round can have left
        self.pending = 0  # journaled lines not yet committed to SQLite
        self.broken = ""  # why appends stopped (a failed write or sync)
        self.appended = 0

    @classmethod
    def open(cls, path: str) -> IntakeJournal:
        """Open (creating and zero-filling) the journal; refuses a symlink."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            size = os.fstat(fd).st_size
            if size < SIZE:  # extend from the end: what is there is read by recover()
                os.pwrite(fd, bytes(SIZE - size), size)
                os.fsync(fd)
                _sync_dir(os.path.dirname(os.path.abspath(path)))  # the new name too
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def recover(self) -> Scan:
        """Lines journaled by an earlier run (all acked; maybe not in SQLite)."""
        return decode_all(os.pread(self._fd, max(SIZE, os.fstat(self._fd).st_size), 0))

    def keep_copy(self) -> str:
        """Copy the journal as it is to ``<path>.damaged-<UTC time>``; the copy's path."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = f"{self.path}.damaged-{stamp}"
        data = os.pread(self._fd, max(SIZE, os.fstat(self._fd).st_size), 0)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return dest

    def clear(self) -> None:
        """After the recovered lines are committed: zero the journal's start."""
        os.pwrite(self._fd, bytes(_HEADER.size), 0)
        _sync(self._fd)
        self._off, self.pending = 0, 0

    def fits(self, size: int) -> bool:
        """Whether a line of ``size`` bytes may be appended now (the peer key
        and the time take at most ``_ROOM`` bytes more)."""
        return not self.broken and size + _ROOM <= MAX_RECORD and (
            self.pending == 0 or self._off + _HEADER.size + size + _ROOM <= SIZE)

    def append(self, rec: Record) -> bool:
        """Write and sync one record; False (and the line goes the ordinary way)
        when it does not fit or the disk refused."""
        data = encode(self._serial + 1, rec)
        off = 0 if self.pending == 0 else self._off
        if self.broken or len(data) - _HEADER.size > MAX_RECORD or off + len(data) > SIZE:
            return False  # (recovery reads no payload over MAX_RECORD)
        try:
            n = os.pwrite(self._fd, data, off)
            if n != len(data):
                raise OSError(f"short write to the intake journal ({n} of {len(data)} bytes)")
            _sync(self._fd)
        except OSError as e:
            # What reached the disk may be a record: keep the round open so the
            # next start still reads (and harmlessly re-stores) it.
            self.broken = str(e)
            self.pending += 1
            log.error("intake journal disabled: %s", e)
            return False
        self._serial += 1
        self._off = off + len(data)
        self.pending += 1
        self.appended += 1
        return True

    def stored(self) -> None:
        """A journaled line is committed to SQLite."""
        if self.pending > 0:
            self.pending -= 1

    def close(self) -> None:
        os.close(self._fd)
