"""Board tables and the queries on them (migration 6 in :mod:`awp.store.schema`).

Records are kept as the exact text they arrived in (relayed byte for byte)
plus the columns hosts index by.  Every function takes an open connection
and does no I/O of its own; the caller runs it inside the writer's
transaction, as the rest of the store does.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from ..board import retention, view
from ..board.perms import TOO_EARLY, admit
from ..board.queue import Event
from ..board.sync import Holdings
from ..wire.board import BoardError, Known, Policy, Record, check_policy, check_record
from .schema import BOARD_MIGRATION, MIGRATIONS

SCHEMA = MIGRATIONS[BOARD_MIGRATION]


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


_POLICIES: dict[str, Policy] = {}  # document hash -> its policy (documents never change)


def policy(c: sqlite3.Connection, topic: str) -> Policy | None:
    """The policy of the newest topic document held (it was checked when stored).

    Parsed once per document: a document is named by its hash, so the hash
    alone says whether the policy parsed before still holds.
    """
    row = c.execute("SELECT hash FROM board_topics WHERE topic = ?", (topic,)).fetchone()
    if row is None:
        return None
    found = _POLICIES.get(row[0])
    if found is None:
        raw = topic_doc(c, topic)
        if raw is None:
            return None
        found = check_policy(json.loads(raw))
        if len(_POLICIES) >= 4096:
            _POLICIES.clear()
        _POLICIES[row[0]] = found
    return found


def subscribe(c: sqlite3.Connection, topic: str, now: int, grant: dict | None = None,
              via: dict | None = None) -> None:
    c.execute("INSERT INTO board_subs (topic, since, grant, via) VALUES (?, ?, ?, ?)"
              " ON CONFLICT (topic) DO UPDATE SET grant = excluded.grant, via = excluded.via",
              (topic, now, json.dumps(grant) if grant else "", json.dumps(via) if via else ""))


def unsubscribe(c: sqlite3.Connection, topic: str) -> None:
    c.execute("DELETE FROM board_subs WHERE topic = ?", (topic,))


def is_subscribed(c: sqlite3.Connection, topic: str) -> bool:
    return c.execute("SELECT 1 FROM board_subs WHERE topic = ?", (topic,)).fetchone() is not None


def subscriptions(c: sqlite3.Connection) -> list[str]:
    return [r[0] for r in c.execute("SELECT topic FROM board_subs ORDER BY topic")]


# -- records ---------------------------------------------------------------------------------


def put_record(c: sqlite3.Connection, rec: Record, now: int, via: str = "",
               hops: int = 0) -> int:
    """Store a checked, permitted record once: its arrival ``seq``, 0 when already here."""
    if rec.kind == "topic":
        raise BoardError("topic documents go to put_topic")
    cur = c.execute(
        "INSERT OR IGNORE INTO board_records (topic, hash, kind, author, ts, of, parent, size,"
        " raw, received, via, hops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (rec.topic, rec.hash, rec.kind, rec.author, rec.ts, rec.of, rec.parent, rec.size,
         rec.raw, now, via, hops))
    return int(cur.lastrowid or 0) if cur.rowcount == 1 else 0


def has(c: sqlite3.Connection, topic: str, h: str) -> bool:
    return c.execute("SELECT 1 FROM board_records WHERE topic = ? AND hash = ?",
                     (topic, h)).fetchone() is not None


def holdings(c: sqlite3.Connection, topic: str) -> Holdings:
    return Holdings((ts, h) for ts, h in c.execute(
        "SELECT ts, hash FROM board_records WHERE topic = ?", (topic,)))


def raw_records(c: sqlite3.Connection, topic: str, hashes: list[str]) -> list[str]:
    """The exact text of the named records we hold, oldest first (for a push or a want)."""
    out: list[tuple[int, str, str]] = []
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        marks = ",".join("?" * len(chunk))
        out.extend((ts, h, raw) for ts, h, raw in c.execute(
            f"SELECT ts, hash, raw FROM board_records WHERE topic = ? AND hash IN ({marks})",
            (topic, *chunk)))
    return [raw for _ts, _h, raw in sorted(out)]


def _record(row: sqlite3.Row | tuple) -> Record:
    topic, h, kind, author, ts, of, parent, raw = row
    return Record(doc=json.loads(raw), raw=raw, hash=h, kind=kind, topic=topic,
                  owner=topic.split("/", 1)[0], author=author, ts=ts, of=of, parent=parent)


_COLS = "topic, hash, kind, author, ts, of, parent, raw"


def records(c: sqlite3.Connection, topic: str, since_ms: int = 0,
            kind: str | None = None) -> list[Record]:
    """Every record of a topic from ``since_ms`` on (of one ``kind``, if given), oldest
    first; parsing is most of the cost, so a caller wanting one kind names it."""
    where = " AND kind = ?" if kind else ""
    return [_record(r) for r in c.execute(
        f"SELECT {_COLS} FROM board_records WHERE topic = ? AND ts >= ?{where}"
        " ORDER BY ts, hash", (topic, since_ms, *((kind,) if kind else ())))]


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


OVER_ARRIVAL = "author over the topic's rate on arrival (offered again later)"


def arrived_lately(c: sqlite3.Connection, topic: str, author: str, now: int) -> int:
    """How many of ``author``'s records this host took in the last minute of its clock.

    Rates are judged on arrival as well as in record time: an author that
    dates its records back spreads them over minutes it chooses, so the
    record-time rule alone let 6,000 backdated posts in at once.  A record
    dated more than a minute back is refused (and offered again on a later
    exchange) once ``CATCH_UP`` times ``rate`` of its author's records came
    in this minute; honest records a host missed while away still arrive,
    at that pace.
    """
    return c.execute("SELECT count(*) FROM board_records WHERE topic = ? AND author = ?"
                     " AND received > ?", (topic, author, now - retention.WINDOW_MS)).fetchone()[0]


@dataclass
class Taken:
    """What :func:`take` did with a batch of records."""

    new: list[Record] = field(default_factory=list)  # stored and kept: forward these
    known: int = 0  # already held (the common case in gossip)
    refused: list[str] = field(default_factory=list)  # why, one entry per refused record
    seqs: dict[str, int] = field(default_factory=dict)  # hash -> arrival seq of new records
    later: int = 0  # records dated too far ahead: offered again on a later exchange


def take(c: sqlite3.Connection, raws: list[str] | list[Record], now: int, via: str = "",
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
    unordered: set[str] = set()
    arrivals: dict[tuple[str, str], int] = {}  # (topic, author) -> records taken this minute

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
        if ts < now - retention.WINDOW_MS:
            if (topic, author) not in arrivals:  # once a batch: reading ``received`` is slow
                arrivals[(topic, author)] = arrived_lately(c, topic, author, now)
            if arrivals[(topic, author)] >= retention.CATCH_UP * pol.rate:
                raise BoardError(OVER_ARRIVAL)

    for raw in raws:
        try:
            if isinstance(raw, Record):  # ours, just signed and checked: no second check
                before_sig(raw.kind, raw.topic, raw.author, raw.ts, raw.hash)
                rec = raw
            else:
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
                unordered.add(rec.topic)  # a new policy may keep less: the full rule
                out.new.append(rec)
            else:
                out.known += 1
            continue
        why = admit(rec, pol_of(rec.topic), now)
        if why:
            out.refused.append(why)
            out.later += why == TOO_EARLY
            continue
        if rec.author != rec.owner and _has_later(c, rec):
            unordered.add(rec.topic)
        seq = put_record(c, rec, now, via, hops)
        if seq and (rec.topic, rec.author) in arrivals:
            arrivals[(rec.topic, rec.author)] += 1
        if seq:
            touched.add(rec.topic)
            out.new.append(rec)
            out.seqs[rec.hash] = seq
        else:
            out.known += 1
    dropped = False
    for topic in touched:
        pol = pol_of(topic)
        if pol is not None and (topic in unordered or retention_due(c, topic, pol, now)):
            enforce_retention(c, topic, pol, now)
            dropped = True
    if dropped:
        out.new = [r for r in out.new if r.kind == "topic" or has(c, r.topic, r.hash)]
    return out


def _has_later(c: sqlite3.Connection, rec: Record) -> bool:
    """Whether the author already has a record within the minute after ``rec``.

    Records of one author usually arrive in their own order; then the rate
    check before the signature is the whole rate rule, and a new record
    pushes no other out.  One that arrives late may, so its topic gets the
    full rule.
    """
    return c.execute(
        "SELECT 1 FROM board_records WHERE topic = ? AND author = ? AND ts >= ? AND ts < ?"
        " AND (ts > ? OR hash > ?) LIMIT 1",
        (rec.topic, rec.author, rec.ts, rec.ts + retention.WINDOW_MS, rec.ts,
         rec.hash)).fetchone() is not None


def retention_due(c: sqlite3.Connection, topic: str, pol: Policy, now: int) -> bool:
    """Whether the floor may have moved: over ``keep``, ``keep_bytes`` or ``keep_days``.

    While none of the three is reached, and every author's records came in
    their own order, the records held are exactly the ones the rule keeps,
    so the full rule (a sort of the whole topic) can be skipped.
    """
    row = c.execute("SELECT n, bytes FROM board_usage WHERE topic = ?", (topic,)).fetchone()
    if row is None:
        return False
    oldest = c.execute("SELECT min(ts) FROM board_records WHERE topic = ?", (topic,)).fetchone()[0]
    if oldest is not None and oldest < now - pol.keep_days * retention.DAY_MS:
        return True
    if row[0] <= pol.keep and row[1] <= pol.keep_bytes:
        return False
    # the owner's records and everyone else's have a budget each (retention rule 3)
    own_n, own_b = c.execute(
        "SELECT count(*), coalesce(sum(size), 0) FROM board_records WHERE topic = ?"
        " AND author = ?", (topic, topic.split("/", 1)[0])).fetchone()
    return (own_n > pol.keep or own_b > pol.keep_bytes
            or row[0] - own_n > pol.keep or row[1] - own_b > pol.keep_bytes)


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


def lease_raws(c: sqlite3.Connection, topic: str, author: str) -> list[str]:
    """The raw lease records ``author`` wrote on ``topic``, oldest first."""
    return [raw for (raw,) in c.execute(
        "SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease' AND author = ?"
        " ORDER BY ts", (topic, author))]


def queue_items(c: sqlite3.Connection, topic: str) -> list[tuple[str, int]]:
    """``(hash, ts)`` of the topic's top-level posts, the items of a queue, oldest first."""
    return c.execute("SELECT hash, ts FROM board_records WHERE topic = ? AND kind = 'post'"
                     " AND parent = '' ORDER BY ts, hash", (topic,)).fetchall()


def _event_row(ev: Event) -> str:
    return json.dumps(ev.to_json(), separators=(",", ":"))


def log_event(c: sqlite3.Connection, topic: str, ev: Event) -> None:
    c.execute("INSERT INTO board_queue_log (topic, event) VALUES (?, ?)",
              (topic, _event_row(ev)))


def replace_log(c: sqlite3.Connection, topic: str, events: list[Event]) -> None:
    """The compacted log in place of the long one (in the caller's transaction)."""
    c.execute("DELETE FROM board_queue_log WHERE topic = ?", (topic,))
    c.executemany("INSERT INTO board_queue_log (topic, event) VALUES (?, ?)",
                  [(topic, _event_row(ev)) for ev in events])


def queue_log(c: sqlite3.Connection, topic: str) -> list[Event]:
    return [Event(**json.loads(r[0])) for r in c.execute(
        "SELECT event FROM board_queue_log WHERE topic = ? ORDER BY seq", (topic,))]


# -- what readers see ------------------------------------------------------------------------

# A post is gone when the owner hid it, or its author deleted it with a delete the
# owner did not hide (the rules of :mod:`awp.board.view`, as a filter).
# ``INDEXED BY``: left alone, SQLite may look a delete up by its author and
# walk every record that author wrote.
_SHOWN = (
    "p.kind = 'post' AND NOT EXISTS (SELECT 1 FROM board_records h INDEXED BY board_records_of"
    " WHERE h.topic = p.topic AND h.of = p.hash AND h.kind = 'hide') AND NOT EXISTS ("
    "SELECT 1 FROM board_records d INDEXED BY board_records_of WHERE d.topic = p.topic"
    " AND d.of = p.hash AND d.kind = 'delete' AND d.author = p.author AND NOT EXISTS ("
    "SELECT 1 FROM board_records h2 INDEXED BY board_records_of WHERE h2.topic = d.topic"
    " AND h2.of = d.hash AND h2.kind = 'hide'))")


@dataclass(frozen=True)
class Post:
    """A visible post with where it came in (``seq``) and how many replies it has."""

    shown: view.Shown
    topic: str
    seq: int
    replies: int


def _with_edits(c: sqlite3.Connection, rows: list[tuple]) -> list[Post]:
    """Posts from ``(seq, topic, hash, kind, author, ts, of, parent, raw)`` rows, edits applied."""
    if not rows:
        return []
    recs = [_record(r[1:]) for r in rows]
    seqs = {r[2]: r[0] for r in rows}
    extra: list[Record] = []
    by_topic: dict[str, list[str]] = {}
    for r in recs:
        by_topic.setdefault(r.topic, []).append(r.hash)
    for topic, hashes in by_topic.items():
        for i in range(0, len(hashes), 400):
            chunk = hashes[i:i + 400]
            marks = ",".join("?" * len(chunk))
            edits = [_record(x) for x in c.execute(
                f"SELECT {_COLS} FROM board_records WHERE topic = ? AND kind = 'edit'"
                f" AND of IN ({marks})", (topic, *chunk))]
            extra.extend(edits)
            if edits:
                em = ",".join("?" * len(edits))
                extra.extend(_record(x) for x in c.execute(
                    f"SELECT {_COLS} FROM board_records WHERE topic = ? AND kind = 'hide'"
                    f" AND of IN ({em})", (topic, *[e.hash for e in edits])))
    replies: dict[str, int] = {}
    for topic, hashes in by_topic.items():
        for i in range(0, len(hashes), 400):
            chunk = hashes[i:i + 400]
            replies.update(c.execute(
                "SELECT parent, count(*) FROM board_records p INDEXED BY board_records_parent"
                " WHERE p.topic = ? AND p.parent IN (" + ",".join("?" * len(chunk))
                + f") AND {_SHOWN} GROUP BY parent", (topic, *chunk)))
    topic_of = {r.hash: r.topic for r in recs}
    return [Post(s, topic_of[s.hash], seqs[s.hash], replies.get(s.hash, 0))
            for s in view.visible(recs + extra)]


_PCOLS = "p.seq, p.topic, p.hash, p.kind, p.author, p.ts, p.of, p.parent, p.raw"


def visible_posts(c: sqlite3.Connection, topic: str, n: int = 20, since_ms: int = 0,
                  parent: str = "") -> list[Post]:
    """The newest ``n`` (0: all) posts readers see, oldest first; with ``parent``, a thread."""
    where, args = f"p.topic = ? AND p.ts >= ? AND {_SHOWN}", [topic, since_ms]
    if parent:
        where += " AND (p.hash = ? OR p.parent = ?)"
        args += [parent, parent]
    limit = f" LIMIT {int(n)}" if n > 0 else ""
    rows = c.execute(f"SELECT {_PCOLS} FROM board_records p WHERE {where}"
                     f" ORDER BY p.ts DESC, p.hash DESC{limit}", args).fetchall()
    return _with_edits(c, rows)


def posts_after(c: sqlite3.Connection, topics: list[str], after: int, me: str,
                mine: bool = False, limit: int = 500) -> list[Post]:
    """Visible posts that arrived after cursor ``after`` on these topics, in arrival order."""
    if not topics:
        return []
    marks = ",".join("?" * len(topics))
    who = "" if mine else " AND p.author != ?"
    args: list = [after, *topics] + ([] if mine else [me])
    rows = c.execute(f"SELECT {_PCOLS} FROM board_records p WHERE p.seq > ?"
                     f" AND p.topic IN ({marks}){who} AND {_SHOWN} ORDER BY p.seq"
                     f" LIMIT {int(limit)}", args).fetchall()
    return sorted(_with_edits(c, rows), key=lambda p: p.seq)


def last_seq(c: sqlite3.Connection) -> int:
    return c.execute("SELECT coalesce(max(seq), 0) FROM board_records").fetchone()[0]


def unread(c: sqlite3.Connection, me: str, limit: int = 50) -> tuple[list[Post], int]:
    """Others' posts on subscribed topics past each topic's read mark; and how many more."""
    rows = c.execute(
        f"SELECT {_PCOLS} FROM board_records p JOIN board_subs s ON s.topic = p.topic"
        f" WHERE p.seq > s.read_seq AND p.author != ? AND {_SHOWN} ORDER BY p.seq"
        f" LIMIT {int(limit) + 1}", (me,)).fetchall()
    more = 0
    if len(rows) > limit:
        more = c.execute(
            f"SELECT count(*) FROM board_records p JOIN board_subs s ON s.topic = p.topic"
            f" WHERE p.seq > s.read_seq AND p.author != ? AND {_SHOWN}", (me,)).fetchone()[0]
        more -= limit
        rows = rows[:limit]
    return sorted(_with_edits(c, rows), key=lambda p: p.seq), more


def mark_read(c: sqlite3.Connection, upto: dict[str, int]) -> None:
    """Move each topic's read mark forward (never back) to the given seq."""
    c.executemany("UPDATE board_subs SET read_seq = max(read_seq, ?) WHERE topic = ?",
                  [(seq, topic) for topic, seq in upto.items()])


def unread_count(c: sqlite3.Connection, topic: str, me: str) -> int:
    return c.execute(
        f"SELECT count(*) FROM board_records p JOIN board_subs s ON s.topic = p.topic"
        f" WHERE p.topic = ? AND p.seq > s.read_seq AND p.author != ? AND {_SHOWN}",
        (topic, me)).fetchone()[0]


def post_by_hash(c: sqlite3.Connection, topic: str, h: str) -> Post | None:
    """One visible post, with its latest edit (None when gone or not held)."""
    rows = c.execute(f"SELECT {_PCOLS} FROM board_records p WHERE p.topic = ? AND p.hash = ?"
                     f" AND {_SHOWN}", (topic, h)).fetchall()
    posts = _with_edits(c, rows)
    return posts[0] if posts else None


def topic_stats(c: sqlite3.Connection, topic: str) -> dict:
    """Records held, posts readers see, and the newest record's time."""
    n, newest = c.execute("SELECT count(*), coalesce(max(ts), 0) FROM board_records"
                          " WHERE topic = ?", (topic,)).fetchone()
    posts = c.execute(f"SELECT count(*) FROM board_records p WHERE p.topic = ? AND {_SHOWN}",
                      (topic,)).fetchone()[0]
    return {"records": n, "posts": posts, "newest": newest}


def known_topics(c: sqlite3.Connection) -> list[str]:
    """Topics with a document or a subscription here."""
    return [r[0] for r in c.execute(
        "SELECT topic FROM board_topics UNION SELECT topic FROM board_subs ORDER BY 1")]


def sub_authority(c: sqlite3.Connection, topic: str) -> tuple[dict | None, dict | None]:
    row = c.execute("SELECT grant, via FROM board_subs WHERE topic = ?", (topic,)).fetchone()
    if row is None:
        return None, None
    return (json.loads(row[0]) if row[0] else None), (json.loads(row[1]) if row[1] else None)


# -- the grants that let us read or post -----------------------------------------------------


def find_authority(c: sqlite3.Connection, me: str, topic: str, what: str, now: int,
                   pol: Policy | None) -> tuple[dict, dict | None] | None:
    """A grant we hold for ``what`` on ``topic`` (with the introducer's, one level on).

    Looks at grants given to us (``held``): the owner's own first; then one
    from a key that holds ``introduce`` and the capability from the owner,
    with that owner grant as ``via`` (the introducer showed it to us in its
    auth, so we keep it as ``presented``).  None when nothing counts now.
    """
    from ..board.perms import grant_counts

    owner = topic.split("/", 1)[0]
    held = [json.loads(r[0]) for r in c.execute(
        "SELECT grant FROM grants WHERE kind = 'held' AND sub = ? AND exp > ? AND aud = ''"
        " ORDER BY iss != ?, exp DESC LIMIT 64", (me, now, owner))]
    for g in held:
        if grant_counts(g, owner=owner, sub=me, topic=topic, what=what, at_ms=now, policy=pol):
            return g, None
    for g in held:
        if g.get("iss") == owner:
            continue
        for (raw,) in c.execute(
                "SELECT grant FROM grants WHERE kind IN ('presented', 'held') AND iss = ?"
                " AND sub = ? AND exp > ? AND aud = '' LIMIT 16", (owner, g.get("iss"), now)):
            via = json.loads(raw)
            if grant_counts(g, owner=owner, sub=me, topic=topic, what=what, at_ms=now,
                            policy=pol, via=via):
                return g, via
    return None
