"""The writer's job for a run of a peer's content lines, stored together.

A run of msgs (the usual case: a backlog replayed, a burst) is stored with a
few statements for the whole run (:mod:`awp.store.inbound`); a run holding
any other type is stored line by line (:meth:`Engine.store_inbound`), as the
order of states, mirrors and privates among the msgs matters, and so is a
lone line, which the run's look-ups would only cost a statement more.  Either way
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
    if len(texts) == 1 or any(line["t"] != "msg" for line, _text in texts):
        owed = [0]
        out = [eng.store_inbound(c, conn, line, text, now, owed) for line, text in texts]
        if owed[0]:
            usage.add(c, peer, log=owed[0])
        return out
    dups = inbound.stored_ids(c, peer, [line["id"] for line, _text in texts])
    ths = list({line.get("th") or "" for line, _text in texts} - {""})
    opened = inbound.seen_threads(c, peer, ths) if ths else set()
    results: list = [(0, []) for _line in texts]
    keep = _within_budget(eng, conn, texts, dups, opened)
    if keep is None:
        keep = _one_by_one(eng, c, conn, texts, dups, opened, results)
    owed = sum(cost for _i, _line, _text, cost in keep)
    seqs = inbound.store_msgs(c, peer, [(line, text) for _i, line, text, _cost in keep], now)
    if owed:
        usage.add(c, peer, log=owed)
    exts = list(eng.extensions)
    for (i, line, _text, _cost), seq in zip(keep, seqs, strict=True):
        results[i] = (seq, eng.stored_replies(c, conn, line, seq, now, exts))
    return results


def _fresh(texts: list[tuple[dict, str]], dups: set[str],
           opened: set[str]) -> list[tuple[int, dict, str, int]]:
    """``(index, line, text, cost)`` of the lines not stored yet, the first of
    each id; ``dups`` and ``opened`` grow as if they were all stored."""
    out = []
    for i, (line, text) in enumerate(texts):
        ident = line["id"]
        if ident in dups:
            continue
        dups.add(ident)
        th = line.get("th") or ""
        out.append((i, line, text, usage.line_cost(_nbytes(text), bool(th) and th not in opened)))
        if th:
            opened.add(th)
    return out


def _within_budget(eng: Engine, conn: Connection, texts: list[tuple[dict, str]],
                   dups: set[str], opened: set[str]) -> list | None:
    """The run's new lines when all of them fit the stored budgets (then counted
    at once: if the whole run fits, each line fits after those before it);
    None, with nothing changed, when some line may be refused."""
    fresh = _fresh(texts, set(dups), set(opened))
    total = sum(cost for _i, _line, _text, cost in fresh)
    if conn.quota_refused or eng.budgets.over_stored(conn.peer_key, total):
        return None
    eng.budgets.add_stored(conn.peer_key, log=total)
    return fresh


def _one_by_one(eng: Engine, c: sqlite3.Connection, conn: Connection,
                texts: list[tuple[dict, str]], dups: set[str], opened: set[str],
                results: list) -> list[tuple[int, dict, str, int]]:
    """Near a budget: each line is checked after those before it, as stored one
    at a time; a refused line gets its ``err quota`` in ``results``, opens no
    thread and may come again later in the run."""
    keep = []
    for i, (line, text) in enumerate(texts):
        ident = line["id"]
        if ident in dups:  # never refused: acked again, as stored once already
            continue
        th = line.get("th") or ""
        cost = usage.line_cost(_nbytes(text), bool(th) and th not in opened)
        refusal = eng._over_stored(c, conn, line, cost)
        if refusal is not None:
            results[i] = (-1, [refusal])
            continue
        dups.add(ident)
        if th:
            opened.add(th)
        eng.budgets.add_stored(conn.peer_key, log=cost)
        keep.append((i, line, text, cost))
    return keep
