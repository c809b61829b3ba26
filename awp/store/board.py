"""Board tables and the queries on them (not yet a migration: see SPEC.md "The board").

Records are kept as the exact text they arrived in (relayed byte for byte)
plus the columns hosts index by.  Every function takes an open connection
and does no I/O of its own; the caller runs it inside the writer's
transaction, as the rest of the store does.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field

from ..board import retention
from ..board.perms import admit
from ..board.queue import Event
from ..board.sync import Holdings
from ..wire.board import BoardError, Known, Policy, Record, check_policy, check_record

SCHEMA = """
CREATE TABLE board_topics (
    topic TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    doc TEXT NOT NULL,
    received INTEGER NOT NULL
);
CREATE TABLE board_subs (
    topic TEXT PRIMARY KEY,
    since INTEGER NOT NULL,
    grant TEXT NOT NULL DEFAULT '',
    via TEXT NOT NULL DEFAULT ''
);
CREATE TABLE board_records (
    topic TEXT NOT NULL,
    hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    ts INTEGER NOT NULL,
    of TEXT NOT NULL DEFAULT '',
    parent TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL,
    raw TEXT NOT NULL,
    received INTEGER NOT NULL,
    via TEXT NOT NULL DEFAULT '',
    hops INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, hash)
);
CREATE INDEX board_records_ts ON board_records (topic, ts, hash);
CREATE INDEX board_records_received ON board_records (received);
CREATE TABLE board_queue_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX board_queue_log_topic ON board_queue_log (topic, seq);
"""


def create(c: sqlite3.Connection) -> None:
    c.executescript(SCHEMA)


# -- topics ----------------------------------------------------------------------------------


def put_topic(c: sqlite3.Connection, rec: Record, now: int) -> str:
    """Keep the owner's newest topic document: "new", "newer" or "" (not newer).

    Newer means a larger ``(seq, hash)``: an owner that signs two documents
    with one ``seq`` gets the same winner on every host.
    """
    if rec.kind != "topic":
        raise BoardError("not a topic document")
    seq = rec.doc["seq"]
    row = c.execute("SELECT seq, hash FROM board_topics WHERE topic = ?",
                    (rec.topic,)).fetchone()
    if row is not None and (row[0], row[1]) >= (seq, rec.hash):
        return ""
    c.execute("INSERT INTO board_topics (topic, owner, seq, hash, doc, received)"
              " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic) DO UPDATE SET"
              " seq = excluded.seq, hash = excluded.hash, doc = excluded.doc,"
              " received = excluded.received",
              (rec.topic, rec.owner, seq, rec.hash, rec.raw, now))
    return "new" if row is None else "newer"


def topic_doc(c: sqlite3.Connection, topic: str) -> str | None:
    row = c.execute("SELECT doc FROM board_topics WHERE topic = ?", (topic,)).fetchone()
    return row[0] if row else None


def policy(c: sqlite3.Connection, topic: str) -> Policy | None:
    """The policy of the newest topic document held (it was checked when stored)."""
    raw = topic_doc(c, topic)
    return check_policy(json.loads(raw)) if raw is not None else None


def topics(c: sqlite3.Connection) -> list[dict]:
    """Every topic known here: its document, whether we subscribe, how many records."""
    out = []
    for topic, owner, seq, doc, sub, n in c.execute(
            "SELECT t.topic, t.owner, t.seq, t.doc, s.topic IS NOT NULL,"
            " (SELECT count(*) FROM board_records r WHERE r.topic = t.topic)"
            " FROM board_topics t LEFT JOIN board_subs s ON s.topic = t.topic ORDER BY t.topic"):
        out.append({"topic": topic, "owner": owner, "seq": seq, "doc": json.loads(doc),
                    "subscribed": bool(sub), "records": n})
    return out


def subscribe(c: sqlite3.Connection, topic: str, now: int, grant: dict | None = None,
              via: dict | None = None) -> None:
    c.execute("INSERT INTO board_subs (topic, since, grant, via) VALUES (?, ?, ?, ?)"
              " ON CONFLICT (topic) DO UPDATE SET grant = excluded.grant, via = excluded.via",
              (topic, now, json.dumps(grant) if grant else "", json.dumps(via) if via else ""))


def unsubscribe(c: sqlite3.Connection, topic: str) -> None:
    c.execute("DELETE FROM board_subs WHERE topic = ?", (topic,))


def subscriptions(c: sqlite3.Connection) -> list[str]:
    return [r[0] for r in c.execute("SELECT topic FROM board_subs ORDER BY topic")]


# -- records ---------------------------------------------------------------------------------


def put_record(c: sqlite3.Connection, rec: Record, now: int, via: str = "",
               hops: int = 0) -> bool:
    """Store a checked, permitted record once; False when it was already here."""
    if rec.kind == "topic":
        raise BoardError("topic documents go to put_topic")
    cur = c.execute(
        "INSERT OR IGNORE INTO board_records (topic, hash, kind, author, ts, of, parent, size,"
        " raw, received, via, hops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (rec.topic, rec.hash, rec.kind, rec.author, rec.ts, rec.of, rec.parent, rec.size,
         rec.raw, now, via, hops))
    return cur.rowcount == 1


def has(c: sqlite3.Connection, topic: str, h: str) -> bool:
    return c.execute("SELECT 1 FROM board_records WHERE topic = ? AND hash = ?",
                     (topic, h)).fetchone() is not None


def holdings(c: sqlite3.Connection, topic: str) -> Holdings:
    return Holdings(c.execute("SELECT ts, hash FROM board_records WHERE topic = ?", (topic,)))


def raw_records(c: sqlite3.Connection, topic: str, hashes: list[str]) -> list[str]:
    """The exact text of the named records we hold, oldest first (for a push or a want)."""
    out: list[tuple[int, str, str]] = []
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        marks = ",".join("?" * len(chunk))
        out.extend(c.execute(f"SELECT ts, hash, raw FROM board_records WHERE topic = ?"
                             f" AND hash IN ({marks})", (topic, *chunk)))
    return [raw for _ts, _h, raw in sorted(out)]


def _record(row: sqlite3.Row | tuple) -> Record:
    topic, h, kind, author, ts, of, parent, raw = row
    return Record(doc=json.loads(raw), raw=raw, hash=h, kind=kind, topic=topic,
                  owner=topic.split("/", 1)[0], author=author, ts=ts, of=of, parent=parent)


_COLS = "topic, hash, kind, author, ts, of, parent, raw"


def records(c: sqlite3.Connection, topic: str, since_ms: int = 0) -> list[Record]:
    """Every record of a topic from ``since_ms`` on, oldest first."""
    return [_record(r) for r in c.execute(
        f"SELECT {_COLS} FROM board_records WHERE topic = ? AND ts >= ? ORDER BY ts, hash",
        (topic, since_ms))]


def record(c: sqlite3.Connection, h_prefix: str) -> list[Record]:
    """Records whose hash starts with ``h_prefix`` (how tools name a post), any topic."""
    return [_record(r) for r in c.execute(
        f"SELECT {_COLS} FROM board_records WHERE hash >= ? AND hash < ? LIMIT 10",
        (h_prefix.lower(), h_prefix.lower() + "g"))]


def recent_before(c: sqlite3.Connection, topic: str, author: str, ts: int, h: str) -> int:
    """How many of ``author``'s kept records precede ``(ts, h)`` within its minute.

    Those records stay counted whatever else arrives (the rate rule only
    looks back), so when there are ``rate`` of them the rule would drop the
    new record anyway: a host can refuse it before checking its signature.
    """
    return c.execute(
        "SELECT count(*) FROM board_records WHERE topic = ? AND author = ? AND ts > ?"
        " AND (ts < ? OR (ts = ? AND hash < ?))",
        (topic, author, ts - retention.WINDOW_MS, ts, ts, h)).fetchone()[0]


@dataclass
class Taken:
    """What :func:`take` did with a batch of records."""

    new: list[Record] = field(default_factory=list)  # stored and kept: forward these
    known: int = 0  # already held (the common case in gossip)
    refused: list[str] = field(default_factory=list)  # why, one entry per refused record


def take(c: sqlite3.Connection, raws: list[str], now: int, via: str = "",
         hops: int = 0) -> Taken:
    """Check, admit and store records from a peer (or from us), then apply retention.

    Only topics this host subscribes to are taken.  Duplicates, banned and
    flooding authors are turned away before their signature is checked.  A
    record that retention drops at once (older than the floor, over the rate)
    is not in ``new``, so it is never forwarded.
    """
    out = Taken()
    subs = set(subscriptions(c))
    policies: dict[str, Policy | None] = {}
    touched: set[str] = set()

    def pol_of(topic: str) -> Policy | None:
        if topic not in policies:
            policies[topic] = policy(c, topic)
        return policies[topic]

    def before_sig(kind: str, topic: str, author: str, ts: int, h: str) -> None:
        if topic not in subs:
            raise BoardError("not a topic we subscribe to")
        if kind == "topic":
            return
        if has(c, topic, h):
            raise Known("already held")
        owner = topic.split("/", 1)[0]
        pol = pol_of(topic)
        if author == owner or pol is None:
            return
        if author in pol.banned:
            raise BoardError("author is banned from this topic")
        if recent_before(c, topic, author, ts, h) >= pol.rate:
            raise BoardError("author over the topic's rate")

    for raw in raws:
        try:
            rec = check_record(raw, before_sig)
        except Known:
            out.known += 1
            continue
        except BoardError as e:
            out.refused.append(str(e))
            continue
        if rec.kind == "topic":
            if put_topic(c, rec, now):
                policies.pop(rec.topic, None)
                touched.add(rec.topic)
                out.new.append(rec)
            else:
                out.known += 1
            continue
        why = admit(rec, pol_of(rec.topic), now)
        if why:
            out.refused.append(why)
            continue
        if put_record(c, rec, now, via, hops):
            touched.add(rec.topic)
            out.new.append(rec)
        else:
            out.known += 1
    for topic in touched:
        pol = pol_of(topic)
        if pol is not None:
            enforce_retention(c, topic, pol, now)
    if touched:
        out.new = [r for r in out.new if r.kind == "topic" or has(c, r.topic, r.hash)]
    return out


def enforce_retention(c: sqlite3.Connection, topic: str, pol: Policy, now: int) -> int:
    """Drop what :mod:`awp.board.retention` does not keep; returns the floor time."""
    owner = topic.split("/", 1)[0]
    entries = [retention.Entry(ts, h, author, size) for ts, h, author, size in c.execute(
        "SELECT ts, hash, author, size FROM board_records WHERE topic = ?", (topic,))]
    keep, floor = retention.kept(entries, owner, pol, now)
    keep_set = {e.hash for e in keep}
    drop = [(topic, e.hash) for e in entries if e.hash not in keep_set]
    c.executemany("DELETE FROM board_records WHERE topic = ? AND hash = ?", drop)
    return floor


# -- the queue arbiter's log -----------------------------------------------------------------


def log_event(c: sqlite3.Connection, topic: str, ev: Event) -> None:
    c.execute("INSERT INTO board_queue_log (topic, event) VALUES (?, ?)",
              (topic, json.dumps(asdict(ev), separators=(",", ":"))))


def queue_log(c: sqlite3.Connection, topic: str) -> list[Event]:
    return [Event(**json.loads(r[0])) for r in c.execute(
        "SELECT event FROM board_queue_log WHERE topic = ? ORDER BY seq", (topic,))]
