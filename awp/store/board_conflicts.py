"""An owner's signed statements that cannot both be true: kept as evidence.

The owner of a topic is its sequencer: it stamps each other author's record
with the next ``seq`` and a time, and it numbers its documents.  An owner that
stamps two records with one seq, stamps one record twice (another seq or
another time), or signs two documents with one seq leaves hosts with
histories that differ for good.  No host can tell which statement is the
"real" one, but any host that meets both can prove the owner signed both:
this module keeps the pair, so that ``awp topics``, ``awp get`` and the web
page mark the topic "owner equivocated" and anyone can check the two
signatures for themselves.

Only statements whose signatures verified are kept (a relay cannot frame an
owner with bytes it made up).  A topic keeps at most :data:`MAX_PER_TOPIC`
pairs: one proves the point, and a hostile owner must not be able to fill
our disk with proofs of its own misconduct.
"""

from __future__ import annotations

import sqlite3

MAX_PER_TOPIC = 16

SEQ = "seq"  # two records stamped with one seq (ref: the seq)
STAMP = "stamp"  # one record stamped twice (ref: the record's hash)
DOC = "doc"  # two topic documents with one seq (ref: the seq)

WHAT = {
    SEQ: "stamped two records with one seq",
    STAMP: "stamped one record twice",
    DOC: "signed two documents with one seq",
}


def note(c: sqlite3.Connection, topic: str, kind: str, ref: str, a: str, b: str,
         now: int) -> bool:
    """Keep the pair (``a`` held first, ``b`` the one just met); True when it is new."""
    n = c.execute("SELECT count(*) FROM board_conflicts WHERE topic = ?", (topic,)).fetchone()[0]
    if n >= MAX_PER_TOPIC:
        return False
    cur = c.execute("INSERT OR IGNORE INTO board_conflicts (topic, kind, ref, a, b, found)"
                    " VALUES (?, ?, ?, ?, ?, ?)", (topic, kind, ref, a, b, now))
    return cur.rowcount > 0


def summary(c: sqlite3.Connection, topic: str) -> dict | None:
    """``{"n", "first", "kinds", "what"}`` of the topic's evidence, or None when it has none."""
    rows = c.execute("SELECT kind, found FROM board_conflicts WHERE topic = ?",
                     (topic,)).fetchall()
    if not rows:
        return None
    kinds = sorted({k for k, _ in rows})
    return {"n": len(rows), "first": min(f for _, f in rows), "kinds": kinds,
            "what": "; ".join(WHAT.get(k, k) for k in kinds)}


def evidence(c: sqlite3.Connection, topic: str) -> list[dict]:
    """Every pair kept for ``topic``, oldest first, with both signed statements."""
    return [{"kind": k, "ref": r, "a": a, "b": b, "found": f} for k, r, a, b, f in c.execute(
        "SELECT kind, ref, a, b, found FROM board_conflicts WHERE topic = ? ORDER BY found, ref",
        (topic,))]

