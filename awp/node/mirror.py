"""Conversation sharing (cap ``mirror``): copies of our threads for a dashboard host.

A sharer lists its hosts in ``hello.shares`` and queues a ``mirror`` line to
each host for every msg and state of its threads, in both directions, in the
same transaction as the original line, so the copy is exactly as durable as
the conversation.  Files are never copied: blob parts keep name, type and
size only.  ``private`` asks the other party to stop mirroring a thread, and
every host with a copy gets a withdraw.  A host keeps mirrored lines in a
table of their own, never in its inbox.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import TYPE_CHECKING

from ..store import ops
from ..store.queries import peer_label
from ..wire.canonical import compact_json
from ..wire.framing import MAX_LINE
from ..wire.names import clean_name
from .extension import Extension

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.mirror")


def strip_files(line: dict) -> dict:
    """The line as mirrored: blob parts keep their description, chunks never travel."""
    parts = line.get("parts")
    if not isinstance(parts, list):
        return line
    out = []
    for p in parts:
        if isinstance(p, dict) and p.get("k") == "blob":
            out.append({k: p[k] for k in ("k", "ref", "name", "mime", "size") if k in p})
        else:
            out.append(p)
    return dict(line, parts=out)


class Mirror(Extension):
    """Engine extension: queue mirror lines, answer private, store what hosts get."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- sharer side (writer thread) -----------------------------------------------

    def queue_copies(self, c: sqlite3.Connection, other: str, line: dict, direction: str,
                     now: int) -> list[tuple[str, tuple]]:
        """Queue a copy of ``line`` (a msg or state with ``other``) to every host."""
        hosts = [h for h in (self.engine.shares or []) if h != other]
        th = line.get("th") or ""
        if not hosts or not th or line.get("t") not in ("msg", "state"):
            return []
        row = c.execute("SELECT subject, private FROM threads WHERE peer = ? AND th = ?",
                        (other, th)).fetchone()
        if row is not None and row["private"]:
            return []
        name = c.execute("SELECT name FROM peers WHERE key = ?", (other,)).fetchone()
        copy = strip_files(line)
        queued = []
        for host in hosts:
            def build(ident: str, ts: str) -> dict:
                return {"t": "mirror", "id": ident, "ts": ts, "th": th, "of": other,
                        "of_name": name[0] if name else "",
                        "subject": row["subject"] if row is not None else "",
                        "dir": direction, "line": copy}
            try:
                ops.ensure_peer(c, host, now)
                res = ops.queue_line(c, self.engine.ids, host, build, log=False, now=now,
                                     max_bytes=MAX_LINE)
            except ops.LineTooLong:
                log.info("not mirroring an oversized line of %s", th)
                continue
            queued.append((host, (*res, [])))
        return queued

    def stored_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, seq: int,
                       now: int) -> list:
        t = line["t"]
        if t in ("msg", "state"):
            return [("queued", q) for q in self.queue_copies(c, conn.peer_key, line, "in", now)]
        if t == "mirror":
            self._host_store(c, conn.peer_key, line, now)
        elif t == "private":
            th = line.get("th") or ""
            c.execute("UPDATE threads SET private = 1 WHERE peer = ? AND th = ?",
                      (conn.peer_key, th))
            ops.add_notice(c, self.engine.ids, conn.peer_key, "private",
                           f"{conn.peer_name or conn.peer_key} made {th} private: it is no"
                           " longer mirrored to dashboard hosts", now, th=th)
            return [("queued", q) for q in self.withdraw(c, th, now, conn.peer_key)]
        return []

    def withdraw(self, c: sqlite3.Connection, th: str, now: int,
                 of: str) -> list[tuple[str, tuple]]:
        """Tell every host to forget our thread ``th`` with ``of``.

        ``of`` scopes the withdraw to that one thread: another peer that uses
        the same id cannot make hosts forget a different conversation.
        """
        out = []
        for host in self.engine.shares or []:
            def build(ident: str, ts: str) -> dict:
                return {"t": "mirror", "id": ident, "ts": ts, "th": th, "of": of,
                        "withdraw": True}
            ops.ensure_peer(c, host, now)
            out.append((host, (*ops.queue_line(c, self.engine.ids, host, build, log=False,
                                               now=now), [])))
        return out

    # -- host side ---------------------------------------------------------------------

    @staticmethod
    def _host_store(c: sqlite3.Connection, sharer: str, line: dict, now: int) -> None:
        th = line.get("th") or ""
        if line.get("withdraw") is True:
            of = line.get("of")
            if isinstance(of, str) and of:  # one thread; without "of", every thread with that id
                c.execute("DELETE FROM mirrors WHERE sharer = ? AND th = ? AND of = ?",
                          (sharer, th, of))
            else:
                c.execute("DELETE FROM mirrors WHERE sharer = ? AND th = ?", (sharer, th))
            return
        orig = line.get("line")
        if not isinstance(orig, dict):
            return
        def s(k: str) -> str:
            v = line.get(k)
            return v if isinstance(v, str) else ""
        c.execute(
            "INSERT OR IGNORE INTO mirrors (sharer, id, th, of, of_name, subject, dir, line, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sharer, line["id"], th, s("of"), clean_name(s("of_name")), s("subject")[:500],
             s("dir"), compact_json(orig), now))

    # -- when a peer connects: has its sharing changed? -----------------------------------

    def stored_hello(self, c: sqlite3.Connection, conn: Connection, prev: dict,
                     now: int) -> list[dict]:
        """Tell the user when a peer starts or stops sharing its conversations.

        Runs in the transaction that records the hello: were the notice left
        to a later step, a connection replaced right after its handshake
        would store the new sharing list and never say that it changed.
        """
        shares = conn.hs.peer.get("shares")
        now_list = sorted(s for s in shares if isinstance(s, str)) if isinstance(
            shares, list) else []
        try:
            before = sorted(json.loads(prev.get("shares") or "[]"))
        except (ValueError, TypeError):
            before = []
        if now_list == before:
            return []
        eng = self.engine
        key, name = conn.peer_key, conn.peer_name or conn.peer_key
        if now_list:
            hosts = ", ".join(peer_label(c, h) if h != eng.identity.key else "you"
                              for h in now_list)
            text = (f"{name} shares its conversations with {hosts}, so they can read your"
                    " messages to it. `awp private <thread>` keeps a thread out.")
        else:
            text = f"{name} stopped sharing its conversations"
        ops.add_notice(c, eng.ids, key, "sharing", text, now)
        return [{"kind": "notice", "peer": key}]
