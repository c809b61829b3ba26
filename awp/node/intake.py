"""Which inbound lines may go through the intake journal, and getting them
into SQLite afterwards (the journal itself: :mod:`awp.store.intake`).

A line qualifies when storing it is nothing but :func:`ops.store_inbound`:
a ``msg`` or ``state`` that names no file, asks for no capability, and is not
mirrored to a dashboard host.  Those are exactly the lines a restart can
re-store from the journal without the connection they came on.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass, field

from ..serve import requests as rq
from ..store import ops
from ..store.db import StoreError
from ..store.intake import IntakeJournal, Lost, Record, Scan, decode_all

log = logging.getLogger("awp.node")

FILENAME = "intake.journal"


class JournalLost(StoreError):
    """The journal lost acked lines (both copies damaged): the daemon does not
    start until ``awp repair`` has stored what reads and named what is gone."""


def describe(lost: tuple[Lost, ...] | list[Lost]) -> list[str]:
    """One line per lost record: its id and peer as far as its copies still say."""
    return [f"id {x.id or '(unreadable)'} from {x.peer or '(an unreadable peer key)'}"
            for x in lost]


def check(home: str) -> None:
    """Refuse (``JournalLost``) a journal that lost acked lines; read-only, before
    the daemon starts.  A missing or sound journal passes."""
    path = os.path.join(home, FILENAME)
    try:
        with open(path, "rb") as f:
            scan = decode_all(f.read())
    except FileNotFoundError:
        return
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None
    if scan.lost:
        raise JournalLost(
            f"{path} is damaged: {len(scan.lost)} acked line(s) lost both their copies"
            f" ({'; '.join(describe(scan.lost)[:3])}{' ...' if len(scan.lost) > 3 else ''});"
            f" run 'awp repair --home {home}' to store the {len(scan.records)} line(s) that"
            " still read, keep the file, and list the lost lines")


@dataclass
class JournalRepair:
    """What ``awp repair`` did with a damaged journal."""

    read: int = 0  # lines that still read
    stored: int = 0  # of those, lines not in the store yet
    lost: list[Lost] = field(default_factory=list)
    kept: str = ""  # where the damaged file was copied


def repair(home: str, conn: sqlite3.Connection) -> JournalRepair | None:
    """Store what a damaged journal still holds, keep a copy, clear it; ``None``
    when there is no journal or it lost nothing (the daemon's start handles it)."""
    path = os.path.join(home, FILENAME)
    if not os.path.exists(path):
        return None
    journal = IntakeJournal.open(path)
    try:
        scan: Scan = journal.recover()
        if not scan.lost:
            return None
        out = JournalRepair(read=len(scan.records), lost=list(scan.lost), kept=_keep(journal))
        out.stored = replay(conn, scan.records) if scan.records else 0
        for line in describe(scan.lost):
            log.error("intake journal: acked line lost: %s", line)
        journal.clear()
        return out
    finally:
        journal.close()


class Intake:
    """The journal of one daemon plus the lines it could not hand to SQLite."""

    def __init__(self, journal: IntakeJournal) -> None:
        self.journal = journal
        # Journaled (so acked) lines whose SQLite commit failed.  Every later
        # inbound job stores them first, which keeps them ahead of newer lines.
        self._unstored: list[Record] = []
        self._lock = threading.Lock()

    @classmethod
    def start(cls, home: str, conn: sqlite3.Connection) -> Intake | None:
        """Open the journal and store what an earlier run left in it (worker thread).

        Returns None, and lines take the ordinary way, when the journal cannot
        be opened (the daemon still works; it only acks a little later).
        """
        try:
            journal = IntakeJournal.open(os.path.join(home, FILENAME))
        except OSError as e:
            log.warning("no intake journal (%s): inbound lines are acked after SQLite commits",
                        e)
            return None
        try:
            scan = journal.recover()
            if scan.lost:  # the start check refuses this first; never clear it here
                raise JournalLost(f"{journal.path} lost acked lines: run awp repair")
            kept = _keep(journal) if scan.damaged or scan.torn else ""
            if scan.damaged:
                log.error("the intake journal is damaged: %d stretch(es) failed their checksum;"
                          " every line read from its other copy (%d lines); the file is kept"
                          " as %s", scan.damaged, len(scan.records), kept)
            elif scan.torn:
                log.warning("the intake journal ends in a record that fails its checksum (a"
                            " write cut short by a crash, never acked, or damage to the last"
                            " line); %d lines read before it; the file is kept as %s",
                            len(scan.records), kept)
            if scan.records:
                n = replay(conn, scan.records)
                log.info("stored %d of %d lines from the intake journal (the rest were"
                         " already stored)", n, len(scan.records))
            journal.clear()
        except BaseException:
            journal.close()
            raise
        return cls(journal)

    def eligible(self, line: dict, size: int, *, mirrored: bool, rewind: bool = True) -> bool:
        if mirrored or not self.journal.fits(size, rewind) or self._unstored:
            return False
        t = line["t"]
        if t == "state":
            return True
        if t != "msg":
            return False
        parts = line.get("parts")
        return isinstance(parts, list) and rq.request_in(parts) is None and not any(
            isinstance(p, dict) and p.get("k") == "blob" for p in parts)

    def append(self, peer: str, at: int, text: str, rewind: bool = True) -> bool:
        return self.journal.append(Record(peer, at, text), rewind)

    def stored(self) -> None:
        self.journal.stored()

    def store_failed(self, peer: str, at: int, text: str, error: BaseException) -> None:
        """A journaled line did not reach SQLite: keep it for the next inbound job.

        The journal keeps its round for the rest of this run (it is read again
        at the next start) and takes no more lines.
        """
        log.error("a journaled line from %s could not be stored yet: %s", peer[:18], error)
        self.journal.broken = self.journal.broken or f"a journaled line was not stored: {error}"
        with self._lock:
            self._unstored.append(Record(peer, at, text))

    def store_unstored(self, c: sqlite3.Connection) -> None:
        """Writer thread, inside an inbound job: store lines left by a failed commit.

        A line found already stored was committed by an earlier job and is
        dropped from the list; the others stay until a later job sees them so.
        """
        if not self._unstored:  # the usual case, without the lock
            return
        with self._lock:
            keep = [rec for rec in self._unstored if _store(c, rec)]
            self._unstored = keep

    def status(self) -> dict:
        j = self.journal
        return {"journaled": j.appended, "pending": j.pending, "off": j.broken,
                "direct": j.direct}

    def close(self) -> None:
        self.journal.close()


def _keep(journal: IntakeJournal) -> str:
    """Copy a damaged journal aside before it is cleared; where it went, or why not."""
    try:
        return journal.keep_copy()
    except OSError as e:
        return f"nowhere (cannot copy it: {e})"


def replay(conn: sqlite3.Connection, records: list[Record]) -> int:
    """Store recovered lines in one transaction; returns how many were new."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        n = sum(1 for rec in records if _store(conn, rec))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return n


def _store(c: sqlite3.Connection, rec: Record) -> bool:
    """Store one journaled line; True if it was not in the log yet."""
    try:
        line = json.loads(rec.text)
    except ValueError:
        line = None
    if not isinstance(line, dict) or line.get("t") not in ("msg", "state") or not isinstance(
            line.get("id"), str):
        log.error("skipping an unreadable intake journal record from %s", rec.peer[:18])
        return False
    c.execute("SAVEPOINT intake")
    try:
        seq = ops.store_inbound(c, rec.peer, line, rec.text, rec.at)
    except (KeyError, TypeError, ValueError) as e:
        c.execute("ROLLBACK TO intake")
        log.error("skipping a malformed intake journal record from %s: %s", rec.peer[:18], e)
        seq = 0
    c.execute("RELEASE intake")
    return bool(seq)
