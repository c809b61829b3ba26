"""Storing what a peer sent: the engine's work on the writer thread.

Each method here runs on the writer thread inside the transaction that stores
one inbound line (or a run of them), so a decision about a line commits with
the line itself: the stored-bytes budget is charged (``_charge``,
``_over_stored``), a msg, state, chunk, grant or introduce is written, and the
extensions' replies are gathered (``stored_replies``).  Split from
:mod:`awp.node.engine` along the thread boundary: nothing here awaits or
touches the event loop.

:class:`InboundStore` is mixed into :class:`~awp.node.engine.Engine` and uses
its members (``ids``, ``budgets``, ``extensions``, ``mirror``, ``config``,
``identity``); it holds no state of its own.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

from ..store import blobs as blobstore
from ..store import grants as grantstore
from ..store import ops, usage
from ..wire import errors
from ..wire.address import AddressError, parse_address
from ..wire.keys import KeyError_, normalize_key
from .store_run import store_run

if TYPE_CHECKING:
    from .connection import Connection


def _refusal_line(r: blobstore.Refusal) -> dict:
    line = {"t": "err", "code": "blob_refused", "ref": r.ref, "detail": r.detail}
    if r.re:
        line["re"] = r.re
    return line


class InboundStore:
    """The engine's writer-thread handling of inbound lines (mixed into the engine)."""

    def _charge(self, c: sqlite3.Connection, key: str, log: int = 0, blob: int = 0) -> None:
        """Writer thread: ``key`` made us store (or we freed) bytes; count them."""
        usage.add(c, key, log, blob)
        self.budgets.add_stored(key, log, blob)

    def _over_stored(self, c: sqlite3.Connection, conn: Connection, line: dict,
                     nbytes: int) -> dict | None:
        """Writer thread: the ``err quota`` for a content line over the stored budgets.

        Once one line is refused, every later one on the connection is too,
        so the resume point never passes a refused line and the sender's next
        connection replays them all in order.  A duplicate is acked as usual.
        """
        why = "an earlier line on this connection was refused" if conn.quota_refused else \
            self.budgets.over_stored(conn.peer_key, nbytes)
        if not why:
            return None
        ident = line.get("id")
        if line["t"] in ("msg", "state") and c.execute(
                "SELECT 1 FROM log WHERE peer = ? AND dir = 'in' AND id = ?",
                (conn.peer_key, ident)).fetchone():
            return None
        conn.quota_refused += 1
        self.budgets.refused["quota"] += 1
        err = {"t": "err", "code": errors.QUOTA,
               "detail": f"not stored: {why} is used up; send it again later"}
        if isinstance(ident, str):
            err["re"] = ident
        return err

    def store_inbound_run(self, c: sqlite3.Connection, conn: Connection,
                          texts: list[tuple[dict, str]], now: int) -> list:
        """Runs on the writer thread: store a run of content lines, counted at once
        (see :mod:`awp.node.store_run`)."""
        return store_run(self, c, conn, texts, now)

    def store_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, text: str,
                      now: int, owed: list[int] | None = None) -> tuple[int, list[dict]]:
        """Runs on the writer thread: store a content line.

        Returns its log seq (0 for a duplicate) and the lines to send after the
        ack (refusals of the blobs it names, a ``forbidden``...).
        """
        replies: list = []
        if self.intake is not None:
            self.intake.store_unstored(c)
        th = line.get("th") or ""
        nbytes = usage.line_cost(len(text.encode("utf-8")), bool(th) and c.execute(
            "SELECT 1 FROM seen WHERE peer = ? AND th = ?", (conn.peer_key, th)).fetchone() is None)
        refusal = self._over_stored(c, conn, line, nbytes)
        if refusal is not None:
            return -1, [refusal]
        if line["t"] in ("mirror", "private"):
            # Extension lines: kept by their extension, never in the agent's inbox.
            seen = c.execute("SELECT last_id FROM seen WHERE peer = ? AND th = ?",
                             (conn.peer_key, th)).fetchone()
            if th:
                ops.note_seen(c, conn.peer_key, th, line["id"], now)
            if seen is not None and line["id"] <= seen[0]:
                return 0, replies
            seq = 1
        else:
            seq = ops.store_inbound(c, conn.peer_key, line, text, now)
        if not seq:
            return seq, replies
        if owed is None:
            self._charge(c, conn.peer_key, log=nbytes)
        else:  # the caller adds them to the table once for the run
            owed[0] += nbytes
            self.budgets.add_stored(conn.peer_key, log=nbytes)
        return seq, self.stored_replies(c, conn, line, seq, now)

    def stored_replies(self, c: sqlite3.Connection, conn: Connection, line: dict, seq: int,
                       now: int, exts: list | None = None) -> list:
        """Writer thread, once a content line is stored as ``seq``: its blobs and the
        extensions' part; the lines (or work) to follow its ack.  ``exts``: the
        extensions, when a run took the list once for all its lines."""
        replies: list = []
        if line["t"] == "msg":
            for r in blobstore.msg_named_blobs(c, self.blobs_dir, conn.peer_key, line,
                                               self.config.blob_limit, now):
                replies.append(_refusal_line(r))
        for ext in self.extensions if exts is None else exts:
            replies.extend(ext.stored_inbound(c, conn, line, seq, now))
        return replies

    def store_chunk(self, c: sqlite3.Connection, conn: Connection, line: dict,
                    now: int) -> list[dict]:
        """Runs on the writer thread: apply a chunk; returns lines to send."""
        key, ref = conn.peer_key, line.get("ref")
        before = c.execute("SELECT * FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                           (key, ref)).fetchone() if isinstance(ref, str) else None
        data = line.get("data")
        size = len(data) * 3 // 4 if isinstance(data, str) else 0
        refused = self._over_stored(c, conn, line, size + usage.BLOB_ROW)
        if refused is not None:
            return [refused]
        live = before is None or before["status"] == "pending"
        lim = self.config.limits.peer_unclaimed_blob_bytes
        if (live and isinstance(ref, str) and ref and (before is None or not before["msg_id"])
                and usage.unclaimed(c, key) + size > lim):
            self.budgets.refused["unclaimed"] += 1
            blobstore._refuse(c, self.blobs_dir, key, ref, "too many unclaimed blob bytes", now)
            refusal, done = blobstore.Refusal(
                ref, f"no message names it yet and {lim} unclaimed bytes are held"
                " (peer_unclaimed_blob_bytes)"), None
        else:
            refusal, done = blobstore.chunk_in(c, self.blobs_dir, key, line,
                                               self.config.blob_limit, now)
        if isinstance(ref, str):
            after = c.execute("SELECT * FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                              (key, ref)).fetchone()
            delta = usage.blob_cost(after) - usage.blob_cost(before)
            if delta:
                self._charge(c, key, blob=delta)
        th = line.get("th") if isinstance(line.get("th"), str) else ""
        if th and isinstance(line.get("id"), str) and refusal is None:
            ops.note_seen(c, conn.peer_key, th, line["id"], now)
        if done:
            name = os.path.basename(done)
            ops.add_notice(c, self.ids, conn.peer_key, "blob",
                           f"file {name} from {conn.peer_name or conn.peer_key} is complete: "
                           f"{done}", now, th=th, data={"path": done})
        return [_refusal_line(refusal)] if refusal else []

    def store_grants(self, c: sqlite3.Connection, conn: Connection, grants: list,
                     now: int) -> int:
        """Runs on the writer thread: keep the valid grants a peer sent.

        An auth line may list any number of grants; we look at no more than we
        would present ourselves (``present_count``).
        """
        n = 0
        lim = self.config.limits
        for g in grants[:lim.present_count]:
            if grantstore.receive(c, g, self.identity.key, conn.peer_key, now, lim):
                n += 1
        return n

    def store_introduce(self, c: sqlite3.Connection, conn: Connection, line: dict, text: str,
                        now: int) -> int:
        """Runs on the writer thread: an introduction to another peer.

        Keeps its grant (meant for the introduced peer), remembers the peer's
        key, name and address, and shows the agent how to connect.
        """
        peer = line.get("peer")
        th = line.get("th") if isinstance(line.get("th"), str) else ""
        ident = line.get("id")
        if not isinstance(peer, dict) or not isinstance(ident, str):
            return 0
        try:
            key = normalize_key(peer.get("key"))
        except (KeyError_, TypeError):
            return 0
        nbytes = usage.line_cost(len(text.encode("utf-8")), bool(th))
        if self._over_stored(c, conn, line, nbytes) is not None:
            return 0  # not seen: it comes again with the sender's next connection
        if th:
            ops.note_seen(c, conn.peer_key, th, ident, now)
        cur = c.execute(
            "INSERT OR IGNORE INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
            " VALUES (?, 'in', 'introduce', ?, ?, '', ?, ?, ?, 0, 1)",
            (conn.peer_key, ident, th, now, now, text))
        if cur.rowcount:
            self._charge(c, conn.peer_key, log=nbytes)
        if cur.rowcount == 0 or key == self.identity.key:
            return 0
        grantstore.receive(c, line.get("grant"), self.identity.key, conn.peer_key, now,
                           self.config.limits)
        ops.ensure_peer(c, key, now)
        # The introduced name is not the peer's name: only the peer itself says
        # that (hello). It stays in the logged line, where `connect NAME` finds
        # it as a last resort, and never shadows or crowds a name.
        addr = peer.get("address")
        if isinstance(addr, str) and addr:
            try:
                ops.add_address(c, key, str(parse_address(addr)), "introduce", now)
            except AddressError:
                pass
        return 1
