"""The owner's newest signed head of each topic we follow, kept across restarts.

A head is the owner's signed summary of its topic (awp/board/heads.py).  A
subscriber keeps only the newest by the owner's time, in memory and here: a
relay that hands a host an older head after the host restarted would
otherwise make it compare against a summary from before what it withheld.
"""

from __future__ import annotations

import json
import sqlite3

from ..wire.board import BoardError, check_head
from ..wire.timefmt import parse_ts


def keep(c: sqlite3.Connection, head: dict) -> bool:
    """Store ``head`` (already checked) unless one as new is kept; True when stored."""
    ts = parse_ts(head["ts"])
    cur = c.execute(
        "INSERT INTO board_heads (topic, ts, doc) VALUES (?, ?, ?) ON CONFLICT (topic)"
        " DO UPDATE SET ts = excluded.ts, doc = excluded.doc WHERE excluded.ts > board_heads.ts",
        (head["topic"], ts, json.dumps(head, separators=(",", ":"), ensure_ascii=False)))
    return cur.rowcount > 0


def load(c: sqlite3.Connection) -> dict[str, dict]:
    """Every kept head, checked again (the home is not trusted either): a row that no
    longer verifies is left out, as if it never came."""
    out: dict[str, dict] = {}
    for topic, doc in c.execute("SELECT topic, doc FROM board_heads"):
        try:
            head = check_head(json.loads(doc))
        except (BoardError, ValueError, TypeError):
            continue
        if head["topic"] == topic:
            out[topic] = head
    return out
