"""Finding a damaged store before the daemon serves from it.

SQLite reports most damage itself, but only when it reads the damaged page,
which may be long after start (a 500 in the middle of a read) or never (a
page nobody reads until a checkpoint copies it).  Three checks run at start,
before anything opens the store for writing (:func:`verify`):

- :func:`check_wal` reads the write-ahead log before SQLite opens it.  When
  SQLite recovers a WAL it keeps the frames up to the first one whose
  checksum does not follow and silently drops the rest, committed
  transactions included: a flipped bit in an old frame would lose every
  message committed after it, with no error anywhere.  We verify each frame
  against its predecessor's stored checksum, so a committed frame *after* a
  bad one is still recognised as written by this WAL, and say so.
- :func:`check_header` compares the page count in the file's header with
  its size (a truncated file), at every start: it costs one read.
- :func:`integrity_check` runs ``PRAGMA integrity_check`` (every page of
  every B-tree is read and its structure checked, and every index is
  compared with its table: an index with a damaged key hides rows from
  every lookup through it while quick_check says ``ok``), then :func:`read_rows`
  reads every row of every table once, decoding its text as the daemon will:
  bytes changed inside a row leave the B-tree sound, so (unless an indexed
  column was hit) ``integrity_check`` says ``ok`` while
  every query that meets the row fails.  Both run at every start up to
  :data:`QUICK_CHECK_ALWAYS`, and after an unclean stop at any size.

A WAL that ends inside a frame was cut short (a torn write, a full disk, a
copy taken while the daemon ran): whatever was committed past the cut is
gone, and SQLite would start without a word, so that is damage too.

Either failure raises :class:`StoreDamaged`, whose message is one line that
says what is wrong and what to run (``awp repair``).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from dataclasses import dataclass

from .db import StoreError

_WAL_HEADER = struct.Struct(">IIIIIIII")  # magic, version, page size, ckpt seq, salts, checksum
_FRAME_HEADER = struct.Struct(">IIIIII")  # page, db size after commit, salts, checksum
_MAGIC_LE, _MAGIC_BE = 0x377F0682, 0x377F0683
_MASK = 0xFFFFFFFF


class StoreDamaged(StoreError):
    """The store's files are damaged; the message is one line for the user."""


def interrupted_message(db_path: str, aside: str, home: str) -> str:
    """The refusal for a home whose ``awp repair`` was stopped half way."""
    kept = os.path.basename(aside) if aside != "?" else "awp.db.damaged-<time>"
    return (f"{os.path.basename(db_path)}: a repair was stopped before it finished (the damaged"
            f" files are kept as {kept}), and the store in its place may be missing rows;"
            f" the daemon will not start on it: run 'awp repair --home {home}' to finish it")


def repair_hint(home: str) -> str:
    """What to tell the user to run, for the home ``home``."""
    return (f"; the daemon will not serve from it: run 'awp repair --home {home}' to move"
            " the damaged files aside and keep what is readable")


@dataclass
class WalReport:
    frames: int = 0  # frames SQLite will replay (up to the first bad one)
    commits: int = 0  # committed transactions among them
    lost_commits: int = 0  # committed transactions written after a bad frame
    bad_frame: int = -1  # index of the first bad frame, -1 if none
    dropped: int = 0  # frames of the current WAL from the first bad one on
    cut: int = -1  # the WAL ends inside this frame (its index), -1 if it ends on a boundary

    @property
    def damaged(self) -> bool:
        return self.lost_commits > 0 or self.cut >= 0


def _checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    words = iter(struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data))
    for a, b in zip(words, words, strict=False):  # pairs of words (lengths are multiples of 8)
        s0 = (s0 + a + s1) & _MASK
        s1 = (s1 + b + s0) & _MASK
    return s0, s1


def check_wal(db_path: str) -> WalReport:
    """Read ``<db>-wal`` (if any) the way SQLite's recovery does, and further.

    A frame belongs to the current WAL when its salts match the header's.  A
    frame is *intact* when its checksum, computed from the previous frame's
    stored checksum, matches its own.  SQLite replays the intact frames up to
    the first frame that is not; a commit frame of the current WAL that is
    intact but lies beyond that point is a transaction SQLite would drop.
    (Frames left over from before the WAL was last restarted carry other
    salts and are ignored, as SQLite ignores them.)
    """
    report = WalReport()
    try:
        with open(db_path + "-wal", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return report
    if len(data) < _WAL_HEADER.size:
        # SQLite writes the header in one piece with the first frame, so only
        # a cut leaves part of it; SQLite treats that as an empty WAL.
        report.cut = 0 if data else -1
        return report
    magic, _version, page, _seq, salt1, salt2, c0, c1 = _WAL_HEADER.unpack_from(data)
    if magic not in (_MAGIC_LE, _MAGIC_BE):
        return report  # not a WAL SQLite would replay either: nothing committed in it
    big = magic == _MAGIC_BE
    if _checksum(data[:24], 0, 0, big) != (c0, c1) or page < 512 or page & (page - 1):
        # A damaged header hides every frame: report if any frame looks committed.
        size = page if 512 <= page <= 65536 and not page & (page - 1) else 4096
        n = (len(data) - _WAL_HEADER.size) // (_FRAME_HEADER.size + size)
        if n and any(_FRAME_HEADER.unpack_from(data, _WAL_HEADER.size + i * (
                _FRAME_HEADER.size + size))[1] for i in range(n)):
            report.bad_frame, report.lost_commits = 0, 1
        return report
    step = _FRAME_HEADER.size + page
    prev = (c0, c1)
    replaying = True
    last_ours = False
    off = _WAL_HEADER.size
    i = 0
    while off + step <= len(data):
        pgno, commit, s1, s2, f0, f1 = _FRAME_HEADER.unpack_from(data, off)
        ours = last_ours = (s1, s2) == (salt1, salt2)
        if ours and pgno:
            sums = _checksum(data[off:off + 8], *prev, big)
            sums = _checksum(data[off + _FRAME_HEADER.size:off + step], *sums, big)
            intact = sums == (f0, f1)
        else:
            intact = False
        if replaying:
            if intact:
                report.frames += 1
                report.commits += bool(commit)
            else:
                replaying = False
                report.bad_frame = i
        elif intact and commit:
            report.lost_commits += 1
        if ours and not replaying:
            report.dropped += 1
        # The next frame chains from this one's stored checksum even when this
        # one is damaged (salts included): that is what lets us see past it.
        prev = (f0, f1)
        off += step
        i += 1
    if off < len(data):
        # The file ends inside a frame.  SQLite writes a frame by appending
        # its header and then its page, so a partial frame at the end means
        # the file was cut there: a frame of the current WAL (its salts, or
        # those of the frame before it when the cut left fewer bytes) is data
        # that was written and is now gone.  A cut frame with older salts is
        # a leftover from before the WAL was last restarted.  A frame header
        # alone is what a process killed between SQLite's two writes of a
        # frame leaves (that transaction never committed): only a warning.
        tail = data[off + 8:off + 16]
        ours = (tail == struct.pack(">II", salt1, salt2) if len(tail) == 8
                else i == 0 or last_ours)
        if ours and len(data) - off == _FRAME_HEADER.size:
            report.dropped += 1
        elif ours:
            report.cut = i
    return report


def quick_check(conn: sqlite3.Connection) -> str:
    """``PRAGMA quick_check``: '' when the store is sound, else SQLite's first finding."""
    rows = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    return "" if rows == ["ok"] else "; ".join(str(r) for r in rows)


def integrity_check(conn: sqlite3.Connection) -> str:
    """``PRAGMA integrity_check``: '' when the store is sound, else its first findings.

    Everything quick_check verifies, and also that every index holds exactly
    the entries of its table.  quick_check alone passed a store whose index
    ``log_thread`` had eight bytes flipped inside a key: the B-tree stayed
    well formed, but lookups through it skipped rows, so reads returned part
    of a thread without an error.  Only comparing each row with its index
    entries finds that; rebuilding the index (what repair's new store does)
    loses nothing.  It costs about 2.5x quick_check (0.18 s against 0.07 s
    on a 98 MB store here, warm).
    """
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check(5)")]
    return "" if rows == ["ok"] else "; ".join(str(r) for r in rows)


def read_rows(conn: sqlite3.Connection) -> str:
    """Read every row of every table once: '' when all read, else where one failed.

    Bytes changed inside a row (a flipped bit on disk, a stray write) leave
    every B-tree sound, so ``quick_check`` passes, yet each query that meets
    the row fails: text that is no longer UTF-8 cannot be decoded, a record
    header that no longer fits its cell is "malformed".  Reading each row as
    the daemon will is what finds them (about 4 ms per MiB here, warm).
    """
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        select = f'SELECT rowid, * FROM "{table}" WHERE rowid > ? ORDER BY rowid'
        after = -(1 << 63)
        try:
            cur = conn.execute(select, (after,))
            while rows := cur.fetchmany(512):
                after = rows[-1][0]
        except sqlite3.DatabaseError as e:
            try:  # again one row at a time from the last good batch, to say where
                for row in conn.execute(select, (after,)):
                    after = row[0]
            except sqlite3.DatabaseError:
                pass
            where = "its first row" if after == -(1 << 63) else f"the row after rowid {after}"
            return f"table {table}: {where} cannot be read: {describe(e)}"
    return ""


_UNDECODABLE = "could not decode to utf-8"


def describe(e: BaseException) -> str:
    """An SQLite error in a few words: a decoding error quotes the whole
    damaged value (up to a 1 MiB line), which is cut to its column's name."""
    text = str(e)
    if text.lower().startswith(_UNDECODABLE):
        head = text.split(" with text ", 1)[0]
        return head.replace("Could not decode to UTF-8 column", "text that is not UTF-8 in column")
    return text if len(text) <= 200 else text[:200] + "..."


def is_damage(e: BaseException) -> bool:
    """Whether an SQLite error means a damaged file (not a busy or full disk).

    Text the file holds that is not UTF-8 counts: awp only ever writes UTF-8,
    so bytes changed on disk are the only way it gets there.
    """
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
    text = str(e).lower()
    return "malformed" in text or "not a database" in text or text.startswith(_UNDECODABLE)


def wal_message(path: str, report: WalReport) -> str:
    name = os.path.basename(path)
    n = report.lost_commits
    if not n:
        where = "its header" if report.cut == 0 and not report.frames else (
            f"frame {report.cut + 1}")
        return (f"{name}-wal is cut short inside {where} (a torn write, a full disk or a copy"
                " taken while the daemon ran): whatever was committed after that point is"
                " gone and SQLite would start without it, without a word")
    return (f"{name}-wal is damaged at frame {report.bad_frame + 1}:"
            f" {n} committed transaction{'s' if n != 1 else ''} after it would be dropped"
            " by SQLite without a word")


# Up to this size integrity_check and read_rows run at every start (together
# about 3.5 ms per MiB from a warm cache on a quiet 2-vCPU machine: 0.33 s
# for 98 MB in bench/repair.py, 3-4 times that under load); a larger store
# is checked in full only after a run that did not stop cleanly, and by
# ``awp repair --check`` at any size.
QUICK_CHECK_ALWAYS = 128 << 20


def check_header(db_path: str) -> str:
    """The file's own header against the file: '' when they agree.

    Cheap, so it runs at every start: a file that is not an SQLite database,
    or shorter than the page count its header records (a truncated store;
    SQLite notices that itself only when no WAL is present).
    """
    with open(db_path, "rb") as f:
        head = f.read(100)
        size = os.fstat(f.fileno()).st_size
    if not head:
        return ""  # created, never written: SQLite makes it a new database
    if len(head) < 100 or head[:16] != b"SQLite format 3\0":
        return "file is not a database"
    page = struct.unpack(">H", head[16:18])[0]
    page = 65536 if page == 1 else page
    pages, counter, valid_for = (struct.unpack(">I", head[o:o + 4])[0] for o in (28, 24, 92))
    if counter == valid_for and pages and size < pages * page:
        return f"file is {size} bytes, its header records {pages} pages of {page}: truncated"
    return ""


def verify(db_path: str, *, hint: str = "", everything: bool = False) -> str:
    """Check the store's files before anything opens them for writing.

    Runs :func:`check_wal` first (opening the store replays the WAL and, at
    the last close, checkpoints and deletes it, which would erase the
    evidence), then :func:`check_header`, then :func:`integrity_check` and
    :func:`read_rows` on a read-only connection that reads through the WAL,
    when ``everything`` is set (``awp repair``), the store is at most
    :data:`QUICK_CHECK_ALWAYS` bytes or a WAL is present (the last run did
    not stop cleanly: a clean stop checkpoints and removes it).  Raises
    :class:`StoreDamaged` with one line naming the damage and ``hint`` (what
    to run); a store that does not exist yet is sound.

    Returns a warning ('' if none) for a WAL that ends in frames that do not
    check out with no committed transaction after them: a write cut short by
    a crash or power loss looks exactly like that (SQLite rightly leaves it
    out, and it was never acknowledged), and so does damage to the very last
    transaction, which is why it is worth a line in the log.
    """
    name = os.path.basename(db_path)
    if not os.path.exists(db_path):
        return ""
    try:
        wal = check_wal(db_path)
        # A checkpoint writes page 1 (and the page count in its header) before
        # the pages that grow the file, so kill -9 in the middle of one leaves
        # a file shorter than its header says while the WAL still holds every
        # page: SQLite finishes the checkpoint on the next open. With committed
        # frames in the WAL the header proves nothing; quick_check and
        # read_rows below read every page through the WAL and find a real cut.
        finding = check_header(db_path) if not wal.commits else ""
        full = (everything or os.path.getsize(db_path) <= QUICK_CHECK_ALWAYS
                or os.path.exists(db_path + "-wal"))
    except OSError as e:
        raise StoreError(f"cannot read {name}: {e}") from None
    if wal.damaged:
        raise StoreDamaged(wal_message(db_path, wal) + hint)
    if not finding and full:
        finding = _quick_check(db_path)
    if finding:
        raise StoreDamaged(f"{name} is damaged ({_first_line(finding)}){hint}")
    if wal.dropped:
        return (f"{name}-wal ends in {wal.dropped} frame(s) that do not check out (a write"
                " cut short by a crash, or damage to the last transaction): SQLite leaves"
                " them out")
    return ""


def _quick_check(db_path: str) -> str:
    name = os.path.basename(db_path)
    try:
        # Read-only: a writable connection would, at its close, checkpoint the
        # WAL into the very file being judged (and delete the WAL).
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None,
                               timeout=10)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {name}: {e}") from None
    try:
        return integrity_check(conn) or read_rows(conn)
    except sqlite3.Error as e:
        if not is_damage(e):
            raise StoreError(f"cannot check {name}: {e}") from None
        return describe(e)
    finally:
        conn.close()


def _first_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("***")]
    out = lines[0] if lines else text.strip()
    return out if len(lines) <= 1 else f"{out}, and {len(lines) - 1} more"


def damage_in(exc: BaseException) -> BaseException | None:
    """The damage error inside ``exc`` (an exception group from the event loop
    included), or None when it holds anything else too."""
    if isinstance(exc, BaseExceptionGroup):
        found = [damage_in(e) for e in exc.exceptions]
        return found[0] if found and all(found) else None
    return exc if isinstance(exc, StoreDamaged) or is_damage(exc) else None
