"""The dashboard's reads of the board: the hosts it names, and its activity.

Hosts this host knows only through the board: topic owners, authors, workers.

The dashboard lists agents from peers and presence; a host that never met an
owner, an author or a worker two hops away still holds their signed records,
and the page should show them among the agents and on the network view
(issue 38). One read, bounded: the newest :data:`RECENT` records, every topic
document, and at most ``limit`` hosts.
"""

from __future__ import annotations

import json
import sqlite3

from .heard import heard_names_of

#: Board records looked at, newest first: the read costs the same on a board of any size.
RECENT = 5000
#: Topics named per host.
TOPICS_EACH = 5

AUTHORED = ("post", "edit", "delete")


def board_hosts(c: sqlite3.Connection, me: str, limit: int = 500) -> list[dict]:
    """``{key, name, name_source, roles, topics, last, via, hops}`` per host seen on the board.

    ``roles`` is a subset of ``owner``, ``author``, ``worker``; ``last`` the newest
    time (ms) a record of it arrived here; ``via`` the neighbour that brought its
    newest record and ``hops`` how far it had come (both "" / None for owners seen
    only in a topic document).
    """
    hosts: dict[str, dict] = {}

    def host(key: str) -> dict | None:
        if not isinstance(key, str) or not key or key == me:
            return None
        h = hosts.get(key)
        if h is None:
            if len(hosts) >= limit:
                return None
            h = hosts[key] = {"key": key, "roles": [], "topics": [], "last": 0, "via": "",
                              "hops": None}
        return h

    def saw(h: dict, role: str, topic: str, received: int) -> None:
        if role not in h["roles"]:
            h["roles"].append(role)
        if topic not in h["topics"] and len(h["topics"]) < TOPICS_EACH:
            h["topics"].append(topic)
        h["last"] = max(h["last"], int(received or 0))

    floor = (c.execute("SELECT coalesce(max(seq), 0) FROM board_records").fetchone()[0]
             - RECENT)
    rows = c.execute(
        "SELECT topic, kind, author, received, via, hops,"
        " CASE WHEN kind = 'lease' AND json_valid(raw) THEN json_extract(raw, '$.holder')"
        " END AS holder"
        " FROM board_records WHERE seq > ? AND kind IN ('post', 'edit', 'delete', 'lease')"
        " ORDER BY seq DESC", (floor,))
    for topic, kind, author, received, via, hops, holder in rows:
        if kind == "lease":
            h = host(holder)
            if h is not None:
                saw(h, "worker", topic, received)
            continue
        h = host(author)
        if h is None:
            continue
        if not h["via"] and via:  # the newest record's path (rows come newest first)
            h["via"], h["hops"] = via, hops
        saw(h, "author", topic, received)
    for topic, owner, received in c.execute(
            "SELECT topic, owner, received FROM board_topics ORDER BY received DESC"):
        h = host(owner)
        if h is not None:
            saw(h, "owner", topic, received)
    met = {k: n for k, n in c.execute("SELECT key, name FROM peers WHERE name != ''")
           if k in hosts}
    heard = heard_names_of(c, set(hosts) - met.keys())
    for key, h in hosts.items():
        h["name"], h["name_source"] = ((met[key], "met") if key in met
                                       else heard.get(key, ("", "")))
    return sorted(hosts.values(), key=lambda h: (-h["last"], h["key"]))


#: Lease states the feed shows (a renewal every few seconds would drown the rest).
FEED_STATES = ("claimed", "done", "failed", "released", "expired")
FEED_TEXT = 300


def _post_text(doc: dict) -> str:
    texts = []
    for p in doc.get("parts") if isinstance(doc.get("parts"), list) else []:
        if isinstance(p, dict) and p.get("k") in ("text", "code") and isinstance(p.get("text"),
                                                                                 str):
            texts.append(p["text"])
        elif isinstance(p, dict) and p.get("k") == "file":
            texts.append(f"[file {str(p.get('name', '?'))[:200]}]")
    text = " ".join(" ".join(texts).split())
    return text[:FEED_TEXT - 1] + "…" if len(text) > FEED_TEXT else text


def board_feed(c: sqlite3.Connection, *, after: int | None, limit: int) -> list[dict]:
    """Board records for the activity feed, oldest first: after seq ``after``, or the
    newest ``limit`` when ``after`` is None. Each row: ``seq``, ``topic``, ``kind``,
    ``author``, ``ts``, ``of``, ``parent``, and ``text`` (posts) or ``state``,
    ``holder`` (lease records)."""
    # filtered in SQL, so that fewer than ``limit`` rows means nothing more is there
    shown = (f"kind IN ('post', 'edit') OR (kind = 'lease' AND json_valid(raw)"
             f" AND json_extract(raw, '$.state')"
             f" IN ({','.join('?' * len(FEED_STATES))}))")
    sql = "SELECT seq, topic, kind, author, ts, of, parent, raw FROM board_records WHERE"
    if after is None:
        rows = c.execute(f"{sql} ({shown}) ORDER BY seq DESC LIMIT ?",
                         (*FEED_STATES, limit)).fetchall()[::-1]
    else:
        rows = c.execute(f"{sql} seq > ? AND ({shown}) ORDER BY seq LIMIT ?",
                         (after, *FEED_STATES, limit)).fetchall()
    out = []
    for seq, topic, kind, author, ts_ms, of, parent, raw in rows:
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        row = {"seq": seq, "topic": topic, "kind": kind, "author": author, "ts": ts_ms,
               "of": of, "parent": parent}
        if kind == "lease":
            row.update(state=doc["state"], holder=doc.get("holder", ""))
        else:
            row["text"] = _post_text(doc)
        out.append(row)
    return out
