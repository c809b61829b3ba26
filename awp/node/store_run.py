"""The writer's job for a run of a peer's content lines, stored together.

A run of msgs (the usual case: a backlog replayed, a burst) is stored with a
few statements for the whole run (:mod:`awp.store.inbound`); a run holding
any other type is stored line by line (:meth:`Engine.store_inbound`), as the
order of states, mirrors and privates among the msgs matters.  Either way
each line gets what ``store_inbound`` gives it, in order: ``(-1, [err])``
when it is refused over a stored budget, ``(0, [])`` for a duplicate (acked
again, stored once), else ``(seq, replies)``; and the bytes stored are added
to the peer's usage row once for the run.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..store import inbound, usage

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine


def _nbytes(text: str) -> int:
    """UTF-8 length of ``text``, without encoding it when it is ASCII (an O(1) test)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def store_run(eng: Engine, c: sqlite3.Connection, conn: Connection,
              texts: list[tuple[dict, str]], now: int) -> list:
    """Writer thread: store ``texts`` (``(line, text)`` of one peer, in arrival order)."""
    peer = conn.peer_key
    if eng.intake is not None:
        eng.intake.store_unstored(c)
    if any(line["t"] != "msg" for line, _text in texts):
        owed = [0]
        out = [eng.store_inbound(c, conn, line, text, now, owed) for line, text in texts]
        if owed[0]:
            usage.add(c, peer, log=owed[0])
        return out
    dups = inbound.stored_ids(c, peer, [line["id"] for line, _text in texts])
    ths = list({line.get("th") or "" for line, _text in texts} - {""})
    opened = inbound.seen_threads(c, peer, ths) if ths else set()
    results: list = [(0, []) for _line in texts]
    keep: list[tuple[dict, str]] = []
    where: list[int] = []
    owed = 0
    for i, (line, text) in enumerate(texts):
        ident = line["id"]
        if ident in dups:  # never refused: acked again, as stored once already
            continue
        th = line.get("th") or ""
        nbytes = usage.line_cost(_nbytes(text), bool(th) and th not in opened)
        refusal = eng._over_stored(c, conn, line, nbytes)
        if refusal is not None:
            results[i] = (-1, [refusal])
            continue
        dups.add(ident)
        if th:
            opened.add(th)
        owed += nbytes
        eng.budgets.add_stored(peer, log=nbytes)
        keep.append((line, text))
        where.append(i)
    seqs = inbound.store_msgs(c, peer, keep, now)
    if owed:
        usage.add(c, peer, log=owed)
    for i, (line, _text), seq in zip(where, keep, seqs, strict=True):
        results[i] = (seq, eng.stored_replies(c, conn, line, seq, now))
    return results
