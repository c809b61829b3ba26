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

File layout: records back to back from offset 0, each written twice in a
row (one ``pwrite``, one sync), each copy

    magic "AWPi" | payload length (u32) | serial (u64) | crc32 (u32) | payload

with the payload ``peer key \n received-at ms \n raw line``.  Serials grow
by one from record to record, and across rounds.  Recovery reads from the
start and follows the chain while magic, length, checksum and serial agree;
a copy whose serial is the one just read is the record's second copy and is
passed over.  Where the chain breaks it looks further for the next copy that
checks out with a higher serial: the next serial means nothing was lost (the
other copy of a damaged one, or the record after a damaged second copy); a
serial further on means the records in between lost both copies, and those
were acked (a later record was synced after them).  A round that ends in a
record whose copies are both written out in full but fail their checks was
damaged after its sync, so acked; one that ends in a partial write was never
acked.  What recovery met is counted (:class:`Scan`), and each lost record is
named by whatever its damaged copies still say (peer and id), so that
``awp repair`` can say which acked lines are gone; the daemon refuses to
start while the journal holds such a loss.

The file is filled with zeros when created, so appends overwrite blocks the
file already owns and the sync has no file size or block map to update.  A
file found shorter than that is extended from its end, never rewritten:
what it holds is read first.

Appends bypass the page cache where the file system allows it
(``O_DIRECT``): the blocks a record touches are written straight to the
device from an in-memory image of the round, then ``fdatasync`` flushes the
device's cache.  Through the page cache the same sync first has to find and
write back the dirty page; measured on this project's machine (a virtual
disk), the direct write and flush took 450-500 us where the buffered write
and sync took 490-580 us, and the sync is most of a quiet line's time to its
ack.  The rest of a record's last block is written as zeros: past the end
of the round the file holds only older rounds, all stored, which recovery
never reads.  A file system that refuses direct I/O (tmpfs before Linux
6.6, for one) gets the buffered write, with the same layout and the same
sync.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import re
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
_BLOCK = 4096  # direct writes are whole blocks at block offsets, from aligned memory
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


class Lost(NamedTuple):
    """An acked record neither of whose copies checks out, named as far as they tell."""

    serial: int
    peer: str  # "" when no copy still says
    id: str  # "" when no copy still says


class Scan(NamedTuple):
    """What recovery read from a journal."""

    records: list[Record]  # the lines of the current round, in order
    last: int  # the last serial read (0 if none)
    damaged: int = 0  # breaks in the chain (a damaged copy or record), later ones read
    torn: int = 0  # the round ends in a partial write (never acked)
    lost: tuple[Lost, ...] = ()  # acked records with both copies damaged


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
    lost: list[Lost] = []
    off, last, damaged, torn = 0, 0, 0, 0
    while True:
        got = _record_at(data, off)
        if got is not None and out and got[1] == last:
            off = got[2]  # the second copy of the record just read
            continue
        if got is not None and (not out or got[1] == last + 1):
            out.append(got[0])
            last, off = got[1], got[2]
            continue
        if not any(data[off:off + _HEADER.size]):
            break  # zeros: never written, or cleared after the last round was stored
        later = _next_after(data, off + 1, last)
        if later is None:
            gone = _written_out(data, off, last) if out else None
            if gone is not None:
                damaged += 1
                lost.append(gone)
            elif off == 0 or _header_serial(data, off) == last + 1:
                torn = 1  # this round's next record, cut short: never acked
            break
        damaged += 1
        rec, serial, end, at = later
        if out:  # serials between the last read and this one lost both copies
            lost += [_name(data, off, end, n) for n in range(last + 1, serial)]
        else:  # damage from offset 0: this record's first copy, or records before it?
            copy = _record_at(data, end)
            if at - off != end - at or (copy is not None and copy[1] == serial):
                seen = {x for x in map(lambda a: _header_serial(data, a), _magics(data, off, at))
                        if x is not None and serial - 64 < x < serial}
                lost += [_name(data, off, at, n) for n in sorted(seen or {serial - 1})]
        out.append(rec)
        last, off = serial, end
    return Scan(out, last, damaged, torn, tuple(lost))


def _header_serial(data: bytes, off: int) -> int | None:
    if off + _HEADER.size > len(data) or data[off:off + 4] != MAGIC:
        return None
    return _HEADER.unpack_from(data, off)[2]


def _written_out(data: bytes, off: int, last: int) -> Lost | None:
    """The round's last record, if both its copies were written out in full but
    fail their checks (damage after the sync: it was acked); None for a partial
    write (never acked) or a damaged second copy of the record already read."""
    for at in _magics(data, off, off + 2 * (_HEADER.size + MAX_RECORD)):
        magic, length, serial, _crc = _HEADER.unpack_from(data, at)
        if serial != last + 1 or length > MAX_RECORD:
            continue
        copy2 = at + _HEADER.size + length
        end2 = copy2 + _HEADER.size + length
        if end2 <= len(data) and data[copy2:copy2 + 4] == MAGIC and any(data[end2 - 8:end2]):
            return _name(data, off, end2, serial)
    return None


def _magics(data: bytes, start: int, stop: int):
    at = data.find(MAGIC, start, stop)
    while at != -1:
        if at + _HEADER.size <= len(data):
            yield at
        at = data.find(MAGIC, at + 1, stop)


_ID = re.compile(rb'"id":"([0-9A-HJKMNP-TV-Z]{26})"')
_KEY = re.compile(rb"ed25519:[A-Za-z0-9_-]{43}")


def _name(data: bytes, start: int, end: int, serial: int) -> Lost:
    """Name a lost record by what its damaged copies between ``start`` and ``end``
    still say: the peer key and line id, or each copy's reading (``a or b``)
    when the copies disagree."""
    peers: dict[str, None] = {}
    ids: dict[str, None] = {}
    for at in _magics(data, start, end):
        if _HEADER.unpack_from(data, at)[2] != serial:
            continue
        chunk = data[at + _HEADER.size:min(end, at + _HEADER.size + MAX_RECORD)]
        if (m := _KEY.match(chunk)) is not None:
            peers[m.group().decode()] = None
        if (m := _ID.search(chunk)) is not None:
            ids[m.group(1).decode()] = None
    return Lost(serial, " or ".join(peers), " or ".join(ids))


def _next_after(data: bytes, start: int, last: int) -> tuple[Record, int, int, int] | None:
    """The next copy from ``start`` on that checks out with a serial above ``last``,
    as (record, serial, end, where it starts)."""
    at = data.find(MAGIC, start)
    while at != -1:
        got = _record_at(data, at)
        if got is not None and got[1] > last:
            return (*got, at)
        at = data.find(MAGIC, at + 1)
    return None


class IntakeJournal:
    """The journal file of one home; used from one thread (the event loop)."""

    def __init__(self, fd: int, path: str, direct: int = -1) -> None:
        self._fd = fd
        self.path = path
        # An O_DIRECT descriptor of the same file for appends, or -1, and
        # the image of the round they are written from (see the module
        # docstring): a round starts at offset 0 and only this process
        # writes it, so the image holds every byte before the next append.
        self._direct = direct
        self._image = mmap.mmap(-1, SIZE) if direct >= 0 else None
        self._off = 0
        self._serial = time.time_ns()  # above any serial a past round can have left
        self.pending = 0  # journaled lines not yet committed to SQLite
        self.broken = ""  # why appends stopped (a failed write or sync)
        self.appended = 0

    @classmethod
    def open(cls, path: str, *, direct: bool = True) -> IntakeJournal:
        """Open (creating and zero-filling) the journal; refuses a symlink.

        ``direct`` asks for appends that bypass the page cache; they are
        buffered anyway where the file system refuses ``O_DIRECT``.
        """
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            size = os.fstat(fd).st_size
            if size < SIZE:  # extend from the end: what is there is read by recover()
                os.pwrite(fd, bytes(SIZE - size), size)
                os.fsync(fd)
                _sync_dir(os.path.dirname(os.path.abspath(path)))  # the new name too
            dfd = _open_direct(path, fd) if direct else -1
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path, dfd)

    @property
    def direct(self) -> bool:
        """Whether appends bypass the page cache (see the module docstring)."""
        return self._direct >= 0

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
        self._put(bytes(_HEADER.size), 0)
        self._off, self.pending = 0, 0

    def fits(self, size: int, rewind: bool = True) -> bool:
        """Whether a line of ``size`` bytes may be appended now (the peer key
        and the time take at most ``_ROOM`` bytes more); ``rewind`` as for
        :meth:`append`."""
        return not self.broken and size + _ROOM <= MAX_RECORD and (
            self.pending == 0 and rewind
            or self._off + 2 * (_HEADER.size + size + _ROOM) <= SIZE)

    def append(self, rec: Record, rewind: bool = True) -> bool:
        """Write and sync one record; False (and the line goes the ordinary way)
        when it does not fit or the disk refused.

        With everything journaled stored, a new round starts at offset 0,
        unless ``rewind`` is False: lines stored by commits whose fsync is
        still owed (see :mod:`awp.store.writer`) are not durable in SQLite
        yet, so their records must stay and the round goes on.
        """
        one = encode(self._serial + 1, rec)
        data = one + one  # two copies: a flipped bit in one leaves the other
        off = 0 if self.pending == 0 and rewind else self._off
        if self.broken or len(one) - _HEADER.size > MAX_RECORD or off + len(data) > SIZE:
            return False  # (recovery reads no payload over MAX_RECORD)
        try:
            self._put(data, off)
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

    def _put(self, data: bytes, off: int) -> None:
        """Write ``data`` at ``off`` and sync it, straight to the device where
        the file system allows; raises OSError when the disk refuses."""
        if self._direct >= 0:
            try:
                self._put_direct(data, off)
                return
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                # Refused as a request (alignment, or no direct I/O after
                # all): buffered from now on.  Writing the same bytes again
                # is harmless if the refusal came after they were written.
                log.info("the intake journal's direct writes were refused (%s);"
                         " appends go through the page cache", e)
                self._drop_direct()
        _write_all(self._fd, data, off)
        _sync(self._fd)

    def _put_direct(self, data: bytes, off: int) -> None:
        """The whole blocks ``data`` touches, from the round's image, then the sync."""
        image = self._image
        assert image is not None
        end = off + len(data)
        start, stop = off - off % _BLOCK, -(-end // _BLOCK) * _BLOCK
        image[off:end] = data
        image[end:stop] = bytes(stop - end)  # past the round: older rounds only
        with memoryview(image) as whole, whole[start:stop] as blocks:
            _write_all(self._direct, blocks, start)
        _sync(self._direct)

    def _drop_direct(self) -> None:
        if self._direct >= 0:
            os.close(self._direct)
            self._direct = -1
        if self._image is not None:
            self._image.close()
            self._image = None

    def close(self) -> None:
        self._drop_direct()
        os.close(self._fd)


def _write_all(fd: int, data, off: int) -> None:
    n = os.pwrite(fd, data, off)
    if n != len(data):
        raise OSError(f"short write to the intake journal ({n} of {len(data)} bytes)")


def _open_direct(path: str, fd: int) -> int:
    """A second, O_DIRECT descriptor of the file open as ``fd``, or -1 where
    the platform or file system has none (the check that it is the same file
    keeps a name swapped in between from taking the appends)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return -1
    try:
        dfd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flag)
    except OSError:
        return -1
    a, b = os.fstat(fd), os.fstat(dfd)
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        os.close(dfd)
        return -1
    return dfd
