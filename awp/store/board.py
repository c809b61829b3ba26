"""Board tables and the queries on them (migrations 6, 8 and 10 in :mod:`awp.store.schema`).

Records are kept as the exact text they arrived in (relayed byte for byte)
plus the columns hosts index by; another author's record with the owner's
stamp beside it, and ``ts`` the stamp's time.  Every function takes an open
connection and does no I/O of its own; the caller runs it inside the
writer's transaction, as the rest of the store does.

Why one module: it is every query on the board's tables.  Admission
(:func:`take`), retention, the owner's stamp counter and what readers see
all read the same columns with the same meaning (``ts`` the stamp's time,
``waiting`` rows counted by some and not others), so a change to a column
meets all its readers here.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..base.cpu import STEPS, clock
from ..board import retention, sequencer, view
from ..board.perms import TOO_EARLY, admit
from ..board.queue import Event
from ..board.sync import Holdings
from ..wire.board import (
    FUTURE_MS,
    BoardError,
    Known,
    Policy,
    Record,
    check_policy,
    is_owner,
    owned_by,
    parse_unverified,
    verify_record,
)
from . import board_conflicts as conflicts
from .schema import (
    BOARD_MIGRATION,
    CONFLICT_MIGRATION,
    LEAN_MIGRATION,
    MIGRATIONS,
    STAMP_MIGRATION,
)

SCHEMA = (MIGRATIONS[BOARD_MIGRATION] + MIGRATIONS[STAMP_MIGRATION] + MIGRATIONS[LEAN_MIGRATION]
          + MIGRATIONS[CONFLICT_MIGRATION])

Signer = Callable[[str, str, int, int], Record]  # (topic, of, seq, ts) -> the owner's stamp


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
    return _policy_named(c, topic, row[0]) if row is not None else None


def _policy_named(c: sqlite3.Connection, topic: str, doc_hash: str | None) -> Policy | None:
    """The policy of ``topic``'s document whose hash is ``doc_hash`` (the newest held)."""
    if doc_hash is None:
        return None
    found = _POLICIES.get(doc_hash)
    if found is None:
        raw = topic_doc(c, topic)
        if raw is None:
            return None
        found = check_policy(json.loads(raw))
        if len(_POLICIES) >= 4096:
            _POLICIES.clear()
        _POLICIES[doc_hash] = found
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
               hops: int = 0, *, sseq: int = 0, stamp: str = "", waiting: bool = False) -> int:
    """Store a checked, permitted record once: its arrival ``seq``, 0 when already here.

    ``stamp`` is the owner's stamp (``sseq`` its seq) of another author's
    record; ``waiting`` marks one of our own records that waits for it.  Our
    waiting record that comes back stamped is updated in place (it keeps its
    arrival ``seq``, and counts as new: it now goes to every reader).
    """
    if rec.kind == "topic":
        raise BoardError("topic documents go to put_topic")
    cur = c.execute(
        "INSERT OR IGNORE INTO board_records (topic, hash, kind, author, ts, of, parent, size,"
        " raw, received, via, hops, sseq, stamp, waiting)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (rec.topic, rec.hash, rec.kind, rec.author, rec.ts, rec.of, rec.parent, rec.size,
         rec.raw, now, via, hops, sseq, stamp, int(waiting)))
    if cur.rowcount == 1:
        return int(cur.lastrowid or 0)
    if not stamp:
        return 0
    row = c.execute("UPDATE board_records SET ts = ?, sseq = ?, stamp = ?, waiting = 0,"
                    " received = ?, via = ?, hops = ? WHERE topic = ? AND hash = ?"
                    " AND waiting = 1 RETURNING seq",
                    (rec.ts, sseq, stamp, now, via, hops, rec.topic, rec.hash)).fetchone()
    return int(row[0]) if row else 0


def has(c: sqlite3.Connection, topic: str, h: str) -> bool:
    """Whether we hold the record as admitted (our own waiting records do not count)."""
    return c.execute("SELECT 1 FROM board_records WHERE topic = ? AND hash = ? AND waiting = 0",
                     (topic, h)).fetchone() is not None


def _held_at_all(c: sqlite3.Connection, topic: str, h: str) -> bool:
    return c.execute("SELECT 1 FROM board_records WHERE topic = ? AND hash = ?",
                     (topic, h)).fetchone() is not None


# -- the owner's stamps ----------------------------------------------------------------------


def next_stamp(c: sqlite3.Connection, topic: str, now: int) -> tuple[int, int]:
    """The next ``(seq, ts)`` the owner stamps with, written in the caller's transaction.

    The counter is a row of its own, never derived from the records held
    (retention drops records, and a seq must never be given twice): the
    stamp leaves only after this transaction commits, so a crash before the
    commit loses the stamp and the seq together.  Stamp times strictly
    increase, so ordering by time (every view does) is ordering by seq.
    """
    row = c.execute("SELECT seq, ts FROM board_stamp_seq WHERE topic = ?", (topic,)).fetchone()
    if row is None:
        top = c.execute("SELECT coalesce(max(sseq), 0) FROM board_records WHERE topic = ?",
                        (topic,)).fetchone()[0]
        row = (top, 0)
    seq, ts = row[0] + 1, max(now, row[1] + 1)  # strictly later: views order by time
    _set_stamp_seq(c, topic, seq, ts)
    return seq, ts


def _set_stamp_seq(c: sqlite3.Connection, topic: str, seq: int, ts: int) -> None:
    c.execute("INSERT INTO board_stamp_seq (topic, seq, ts) VALUES (?, ?, ?) ON CONFLICT (topic)"
              " DO UPDATE SET seq = max(seq, excluded.seq), ts = max(ts, excluded.ts)",
              (topic, seq, ts))


def top_seqs(c: sqlite3.Connection) -> dict[str, int]:
    """The highest stamp seq held, per topic (where a host's hole tracking starts)."""
    return dict(c.execute("SELECT topic, max(sseq) FROM board_records WHERE sseq > 0"
                          " GROUP BY topic"))


def top_seq(c: sqlite3.Connection, topic: str) -> int:
    """The owner's last seq of ``topic`` (what its head names)."""
    row = c.execute("SELECT seq FROM board_stamp_seq WHERE topic = ?", (topic,)).fetchone()
    return int(row[0]) if row else 0


def waiting(c: sqlite3.Connection, limit: int = 256) -> list[Record]:
    """Our own records that wait for their owner's stamp, oldest first."""
    return [_record(r) for r in c.execute(
        f"SELECT {_COLS} FROM board_records INDEXED BY board_records_waiting WHERE waiting = 1"
        " ORDER BY seq LIMIT ?", (limit,))]


def refuse_waiting(c: sqlite3.Connection, topic: str, h: str) -> bool:
    """The owner refused our waiting record for good: it goes (it was never admitted)."""
    return c.execute("DELETE FROM board_records WHERE topic = ? AND hash = ? AND waiting = 1",
                     (topic, h)).rowcount == 1


def stamped_raws(c: sqlite3.Connection, topic: str, h: str) -> list[str]:
    """A held record with its stamp before it (what answers a record offered again)."""
    row = c.execute("SELECT raw, stamp FROM board_records WHERE topic = ? AND hash = ?"
                    " AND waiting = 0", (topic, h)).fetchone()
    if row is None:
        return []
    return [row[1], row[0]] if row[1] else [row[0]]


def unstamped_at_start(c: sqlite3.Connection, me: str, signer: Signer) -> int:
    """Records kept under the old rule (each host's own judgement) meet the new one.

    On our own topics we stamp them, in the order they reached us and at
    that time (``received`` is our arrival clock, the time a stamp
    carries).  Elsewhere another author's record without a stamp is no
    longer admitted: ours waits for the owner's stamp like a new post, and
    others' go (the owner's stamped copies come back with the next digest).
    Returns how many rows changed.
    """
    rows = c.execute(
        "SELECT topic, hash, author, received FROM board_records WHERE sseq = 0 AND waiting = 0"
        " AND kind != 'topic' AND author != substr(topic, 1, instr(topic, '/') - 1)"
        " ORDER BY received, hash").fetchall()
    for topic, h, author, received in rows:
        if owned_by(topic, me):
            seq, ts = next_stamp(c, topic, received)
            st = signer(topic, h, seq, ts)
            c.execute("UPDATE board_records SET ts = ?, sseq = ?, stamp = ? WHERE topic = ?"
                      " AND hash = ?", (ts, seq, st.raw, topic, h))
        elif author == me:
            c.execute("UPDATE board_records SET waiting = 1 WHERE topic = ? AND hash = ?",
                      (topic, h))
        else:
            c.execute("DELETE FROM board_records WHERE topic = ? AND hash = ?", (topic, h))
    return len(rows)


def holdings(c: sqlite3.Connection, topic: str) -> Holdings:
    return Holdings((ts, h) for ts, h in c.execute(
        "SELECT ts, hash FROM board_records WHERE topic = ? AND waiting = 0", (topic,)))


def raw_records(c: sqlite3.Connection, topic: str, hashes: list[str]) -> list[str]:
    """The exact text of the named records we hold, oldest first (for a push or a want).

    A stamped record goes with the owner's stamp just before it.
    """
    out: list[tuple[int, str, str, str]] = []
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        marks = ",".join("?" * len(chunk))
        out.extend((ts, h, raw, stamp) for ts, h, raw, stamp in c.execute(
            f"SELECT ts, hash, raw, stamp FROM board_records WHERE topic = ? AND waiting = 0"
            f" AND hash IN ({marks})", (topic, *chunk)))
    raws: list[str] = []
    for _ts, _h, raw, stamp in sorted(out):
        if stamp:
            raws.append(stamp)
        raws.append(raw)
    return raws


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
    """Records whose hash starts with ``h_prefix`` (how tools name a post), any topic.

    Looked up topic by topic in the (topic, hash) index: an index on the hash
    alone would cost every stored record a page written, for a tool's lookup.
    """
    return [_record(r) for r in c.execute(
        f"SELECT {_COLS} FROM board_records WHERE topic IN (SELECT topic FROM board_usage)"
        " AND hash >= ? AND hash < ? LIMIT 10", (h_prefix.lower(), h_prefix.lower() + "g"))]


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
    waiting: set[str] = field(default_factory=set)  # ours, stored to wait for the owner's stamp
    stamps: dict[str, str] = field(default_factory=dict)  # hash -> its stamp, new stamped ones
    sseqs: dict[str, int] = field(default_factory=dict)  # hash -> its stamp's seq
    why: dict[str, str] = field(default_factory=dict)  # hash -> why refused (when named)
    held: list[str] = field(default_factory=list)  # hashes of records already held
    # (topic, kind, ref) of each new proof that the owner signed two statements that
    # cannot both be true (awp/store/board_conflicts.py)
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)

    def wire(self, rec: Record) -> list[str]:
        """What goes on the wire for a new record: its stamp (if any), then the record."""
        st = self.stamps.get(rec.hash)
        return [st, rec.raw] if st else [rec.raw]


def take(c: sqlite3.Connection, raws: list[str] | list[Record], now: int, via: str = "",
         hops: int = 0, *, me: str = "", signer: Signer | None = None,
         subs: set[str] | frozenset[str] | None = None,
         docs: list[object] | None = None) -> Taken:
    """Check, admit and store records from a peer (or from us), then apply retention.

    Only topics this host subscribes to are taken.  Duplicates, banned and
    flooding authors are turned away before their signature is checked.  A
    record that retention drops at once (older than the floor, over the rate)
    is not in ``new``, so it is never forwarded.

    Another author's record is admitted by the topic's owner alone (SPEC.md
    section 14, "The owner stamps"): on the owner (``me`` with a
    ``signer``) it is judged by :func:`awp.board.sequencer.admission` and
    stamped; anywhere else it is kept only beside the owner's stamp (a
    ``stamp`` just before it in ``raws``), and its time is the stamp's.  Our
    own records (``Record`` objects) on another's topic are stored to wait
    for the stamp.

    ``subs``: the topics this host subscribes to, when the caller knows them
    (else they are read).  ``docs``: each raw record already decoded (with
    the strict decoder, from the line it came in), so it is not decoded again.
    """
    out = Taken()
    if subs is None:
        subs = set(subscriptions(c))
    policies: dict[str, Policy | None] = {}
    shape: dict[str, _Shape] = {}  # topic -> its size and time span, once a record goes in
    touched: set[str] = set()
    unordered: set[str] = set()
    arrivals: dict[tuple[str, str], int] = {}  # (topic, author) -> our own this minute
    stamps: dict[str, Record] = {}  # record hash -> the stamp just before it, unverified
    lately: dict[str, int] = {}  # record hash -> its author's stamps in the last minute
    local = False  # the element at hand is one of ours
    named = ""  # the hash of the element at hand, once known

    def pol_of(topic: str) -> Policy | None:
        if topic not in policies:  # read with the topic's shape, in one statement
            sh = shape.get(topic)
            if sh is None:
                sh = shape[topic] = _Shape.read(c, topic)
            policies[topic] = _policy_named(c, topic, sh.doc)
        return policies[topic]

    def ours(topic: str) -> bool:
        return bool(me) and signer is not None and owned_by(topic, me)

    looked = [0]  # CPU ns of the lookups before the signature: the store's, not the parse's

    def before_sig(kind: str, topic: str, author: str, ts: int, h: str) -> None:
        t = clock()
        try:
            _before_sig(kind, topic, author, ts, h)
        finally:
            looked[0] += clock() - t

    def _before_sig(kind: str, topic: str, author: str, ts: int, h: str) -> None:
        nonlocal named
        named = h
        if topic not in subs:
            raise BoardError("not a topic we subscribe to")
        if kind in ("topic", "stamp"):
            return
        if topic in shape:
            if has(c, topic, h):
                raise Known("already held")
        else:  # the topic's first record here: its shape and whether it is held, at once
            sh = shape[topic] = _Shape.read(c, topic, h)
            if sh.held:
                raise Known("already held")
        owner = topic.split("/", 1)[0]
        pol = pol_of(topic)
        if is_owner(owner, author):
            return
        if pol is not None and author in pol.banned:
            raise BoardError("author is banned from this topic")
        if ours(topic):
            if pol is not None and h not in stamps:
                lately[h] = stamped_lately(c, topic, author, next_ts(c, topic, now))
                if lately[h] >= pol.rate:
                    raise BoardError(sequencer.OVER_RATE)  # before paying for the signature
        elif local:  # ours: the owner's rate, judged here first so that a post fails at once
            key = (topic, author)
            if pol is not None and key not in arrivals:
                arrivals[key] = c.execute(
                    "SELECT count(*) FROM board_records WHERE topic = ? AND author = ?"
                    " AND ts > ?", (topic, author, now - retention.WINDOW_MS)).fetchone()[0]
            if pol is not None and arrivals[key] >= pol.rate:
                raise BoardError("author over the topic's rate")
        elif h not in stamps:
            raise BoardError(sequencer.NO_STAMP)

    def refuse(why: str) -> None:
        out.refused.append(why)
        out.later += not sequencer.final(why)
        if named:
            out.why[named] = why

    for i, raw in enumerate(raws):
        named = ""
        try:
            if isinstance(raw, Record):  # ours, just signed and checked: no second check
                local = True
                _before_sig(raw.kind, raw.topic, raw.author, raw.ts, raw.hash)
                rec = raw
            else:
                local = False
                t, looked[0] = clock(), 0
                try:
                    rec = parse_unverified(raw, before_sig, doc=docs[i] if docs else None)
                finally:
                    STEPS["parse"] += clock() - t - looked[0]
                # Every author's signature is checked here, beside a stamp too: a stamp
                # orders a record, it never vouches for it, or the owner could publish
                # in anyone's name.  Each host pays this once a record: one it holds
                # stops at the check before the signature ("already held").
                if rec.kind != "stamp":
                    t = clock()
                    good = verify_record(rec)
                    STEPS["verify"] += clock() - t
                    if not good:
                        raise BoardError("signature does not verify")
        except Known:
            out.known += 1
            if named:
                out.held.append(named)
                st_in = stamps.get(named)
                if st_in is not None and not ours(st_in.topic):
                    _second_stamp(c, st_in, named, now, out)
            continue
        except BoardError as e:
            refuse(str(e))
            continue
        if rec.kind == "stamp":
            stamps[rec.of] = rec
            continue
        if rec.kind == "topic":
            _same_seq_doc(c, rec, now, out)
            if put_topic(c, rec, now):
                policies.pop(rec.topic, None)
                if rec.topic in shape:
                    shape[rec.topic].doc = rec.hash  # the newest document now
                touched.add(rec.topic)
                unordered.add(rec.topic)  # a new policy may keep less: the full rule
                out.new.append(rec)
            else:
                out.known += 1
            continue
        st: Record | None = None
        if rec.author == rec.owner:
            why = admit(rec, pol_of(rec.topic), now)
        else:
            why, st = _stamp_of(c, rec, stamps.get(rec.hash), pol_of(rec.topic), now,
                                signer if ours(rec.topic) else None, local,
                                lately.get(rec.hash))
        if why:
            refuse(why)
            continue
        if st is not None:
            if not ours(rec.topic):
                _seq_taken(c, rec, st, now, out)
            rec = rec.at(st.ts)  # the stamp's time is the record's
        sh = shape.get(rec.topic)
        if sh is None:
            sh = shape[rec.topic] = _Shape.read(c, rec.topic)
        if rec.author != rec.owner and st is not None and rec.ts <= sh.newest \
                and _has_later(c, rec):  # past the newest record held, nothing comes later
            unordered.add(rec.topic)
        seq = put_record(c, rec, now, via, hops, sseq=st.doc["seq"] if st else 0,
                         stamp=st.raw if st else "", waiting=st is None and rec.author != rec.owner)
        if seq:
            sh.added(rec)
            touched.add(rec.topic)
            out.new.append(rec)
            out.seqs[rec.hash] = seq
            if st is not None:
                out.stamps[rec.hash] = st.raw
                out.sseqs[rec.hash] = st.doc["seq"]
            elif rec.author != rec.owner:
                out.waiting.add(rec.hash)
                key = (rec.topic, rec.author)
                arrivals[key] = arrivals.get(key, 0) + 1
        else:
            out.known += 1
    dropped = False
    for topic in touched:
        pol = pol_of(topic)
        sh = shape.get(topic)
        if pol is not None and (topic in unordered or (
                sh.may_be_due(pol, now) if sh is not None else True)
                and retention_due(c, topic, pol, now)):
            enforce_retention(c, topic, pol, now)
            dropped = True
    if dropped:
        out.new = [r for r in out.new if r.kind == "topic" or _held_at_all(c, r.topic, r.hash)]
    return out


def _conflict(c: sqlite3.Connection, topic: str, kind: str, ref: str, a: str, b: str,
              now: int, out: Taken) -> None:
    if conflicts.note(c, topic, kind, ref, a, b, now):
        out.conflicts.append((topic, kind, ref))


def _second_stamp(c: sqlite3.Connection, st: Record, h: str, now: int, out: Taken) -> None:
    """A record we hold came with a stamp: another seq or time than ours is evidence.

    The common case (the same stamp again, from another path) costs one
    lookup and a string comparison; only a stamp that says something else
    is verified, so a relay's made-up bytes frame no one.
    """
    row = c.execute("SELECT stamp FROM board_records WHERE topic = ? AND hash = ?",
                    (st.topic, h)).fetchone()
    if row is None or not row[0] or row[0] == st.raw:
        return
    try:
        held = parse_unverified(row[0])
    except BoardError:
        return
    if (held.doc.get("seq"), held.ts) == (st.doc.get("seq"), st.ts):
        return
    if st.author != st.owner or not verify_record(st):
        return
    _conflict(c, st.topic, conflicts.STAMP, h, held.raw, st.raw, now, out)


def _seq_taken(c: sqlite3.Connection, rec: Record, st: Record, now: int, out: Taken) -> None:
    """A new stamped record: another record held with the same seq is evidence (the
    stamp was verified by :func:`_stamp_of`, the held one when it was taken)."""
    row = c.execute("SELECT stamp FROM board_records WHERE topic = ? AND sseq = ? AND sseq > 0"
                    " AND hash != ? LIMIT 1", (rec.topic, st.doc["seq"], rec.hash)).fetchone()
    if row is not None and row[0]:
        _conflict(c, rec.topic, conflicts.SEQ, str(st.doc["seq"]), row[0], st.raw, now, out)


def _same_seq_doc(c: sqlite3.Connection, rec: Record, now: int, out: Taken) -> None:
    """Two signed documents with one seq: kept as evidence (the tie is still settled
    the same way on every host by :func:`put_topic`)."""
    row = c.execute("SELECT hash, doc FROM board_topics WHERE topic = ? AND seq = ?",
                    (rec.topic, rec.doc["seq"])).fetchone()
    if row is not None and row[0] != rec.hash:
        a, b = sorted((row[1], rec.raw))
        _conflict(c, rec.topic, conflicts.DOC, str(rec.doc["seq"]), a, b, now, out)


def _stamp_of(c: sqlite3.Connection, rec: Record, st: Record | None, pol: Policy | None,
              now: int, signer: Signer | None, local: bool,
              arrived: int | None = None) -> tuple[str, Record | None]:
    """Why another author's record is refused (or ""), and the owner's stamp it is kept with.

    On the owner (``signer``): a stamp of ours that comes back (we lost the
    record, not the counter) is kept as it is and the counter moved past
    it; otherwise the record is judged once and stamped with the next seq.
    Elsewhere: the stamp must be the owner's, for this record, and not dated
    ahead; the record's rights are not judged again (the owner did).  Ours
    without a stamp waits for one, after the same checks as the owner's (so
    that a post the owner would refuse fails at once, with its reason).
    ``arrived``: the author's stamps in the last minute, when the check before
    the signature counted them already (nothing was stored since).
    """
    if st is not None:
        if st.topic != rec.topic or not verify_record(st):
            return "the owner's stamp does not verify", None
        if st.ts - now > FUTURE_MS:
            return TOO_EARLY, None
        if signer is not None:
            _set_stamp_seq(c, rec.topic, st.doc["seq"], st.ts)
        return "", st
    if signer is not None:
        if arrived is None:
            arrived = stamped_lately(c, rec.topic, rec.author, next_ts(c, rec.topic, now))
        why = sequencer.admission(rec, pol, now, arrived)
        if why:
            return why, None
        seq, ts = next_stamp(c, rec.topic, now)
        return "", signer(rec.topic, rec.hash, seq, ts)
    if local:
        return admit(rec, pol, now), None
    return sequencer.NO_STAMP, None


def stamped_lately(c: sqlite3.Connection, topic: str, author: str, at: int) -> int:
    """How many of ``author``'s records the owner stamped in the minute before stamp time
    ``at`` (the window retention's rate rule looks at for a record stamped at ``at``).

    On the owner, the only host that asks, every record of another author is
    stamped: it stamps what it admits, a stamp of its own comes back with
    its seq, records from before stamps are stamped at start-up
    (:func:`unstamped_at_start`), and only a host that is not the owner keeps
    a record waiting.  So the count needs no ``sseq``, and reads the author
    index alone: with the table's ``sseq`` it read a row for every record
    counted, up to ``rate`` (6,000) of them for every record stamped.
    """
    return c.execute("SELECT count(*) FROM board_records WHERE topic = ? AND author = ?"
                     " AND ts > ?", (topic, author, at - retention.WINDOW_MS)).fetchone()[0]


def next_ts(c: sqlite3.Connection, topic: str, now: int) -> int:
    """The time the owner's next stamp of ``topic`` will carry (see :func:`next_stamp`)."""
    row = c.execute("SELECT ts FROM board_stamp_seq WHERE topic = ?", (topic,)).fetchone()
    return max(now, row[0] + 1) if row else now


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


@dataclass
class _Shape:
    """A topic's record count, bytes, oldest and newest times and document, read once
    a take.

    What :func:`take` needs per record (is anything held later than it? may
    retention have something to drop?) from one statement a topic, kept up
    to date in memory as records go in, instead of two or three queries a
    record.  It may only err towards the full rule: a record stored again in
    place (ours, back with its stamp) counts as one more.
    """

    n: int
    size: int
    oldest: int | None
    newest: int
    doc: str | None  # the hash of the newest topic document held
    held: bool = False  # the record named when reading is held (as :func:`has` says)

    @classmethod
    def read(cls, c: sqlite3.Connection, topic: str, h: str = "") -> _Shape:
        row = c.execute(
            "SELECT (SELECT n FROM board_usage WHERE topic = ?1),"
            " (SELECT bytes FROM board_usage WHERE topic = ?1),"
            " (SELECT min(ts) FROM board_records WHERE topic = ?1),"
            " (SELECT max(ts) FROM board_records WHERE topic = ?1),"
            " (SELECT hash FROM board_topics WHERE topic = ?1),"
            " EXISTS (SELECT 1 FROM board_records WHERE topic = ?1 AND hash = ?2"
            " AND waiting = 0)", (topic, h)).fetchone()
        return cls(row[0] or 0, row[1] or 0, row[2], -1 if row[3] is None else row[3], row[4],
                   bool(row[5]))

    def added(self, rec: Record) -> None:
        self.n += 1
        self.size += rec.size
        self.oldest = rec.ts if self.oldest is None else min(self.oldest, rec.ts)
        self.newest = max(self.newest, rec.ts)

    def may_be_due(self, pol: Policy, now: int) -> bool:
        """False when :func:`retention_due` would surely say so (nothing to read)."""
        if self.oldest is not None and self.oldest < now - pol.keep_days * retention.DAY_MS:
            return True
        return self.n > pol.keep or self.size > pol.keep_bytes


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
        "SELECT ts, hash, author, size FROM board_records WHERE topic = ? AND waiting = 0",
        (topic,))]
    # a banned author's records go on every host that holds the document with the ban,
    # whenever they came: the same set on every host, whatever the arrival order
    keep, floor = retention.kept([e for e in entries if e.author not in pol.banned], owner,
                                 pol, now)
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


def item_history(c: sqlite3.Connection, topic: str,
                 item: str) -> tuple[list[str], list[tuple[str, str]]]:
    """An item's lease records (raw) and its replies (``(author, raw)``), any order."""
    leases = [raw for (raw,) in c.execute(
        "SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease' AND of = ?"
        " AND of != ''", (topic, item))]
    replies = c.execute("SELECT author, raw FROM board_records WHERE topic = ? AND kind = 'post'"
                        " AND parent = ? AND parent != ''", (topic, item)).fetchall()
    return leases, [(a, r) for a, r in replies]


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
# walk every record that author wrote.  ``board_records_of`` and
# ``board_records_parent`` hold only the records that name another (migration
# 10): a query can use them only when it says ``of != ''`` (``parent != ''``)
# in so many words, as every one here does.
_SHOWN = (
    "p.kind = 'post' AND NOT EXISTS (SELECT 1 FROM board_records h INDEXED BY board_records_of"
    " WHERE h.topic = p.topic AND h.of = p.hash AND h.of != '' AND h.kind = 'hide')"
    " AND NOT EXISTS (SELECT 1 FROM board_records d INDEXED BY board_records_of"
    " WHERE d.topic = p.topic AND d.of = p.hash AND d.of != '' AND d.kind = 'delete'"
    " AND d.author = p.author AND NOT EXISTS (SELECT 1 FROM board_records h2 INDEXED BY"
    " board_records_of WHERE h2.topic = d.topic AND h2.of = d.hash AND h2.of != ''"
    " AND h2.kind = 'hide'))")


@dataclass(frozen=True)
class Post:
    """A visible post with where it came in (``seq``) and how many replies it has."""

    shown: view.Shown
    topic: str
    seq: int
    replies: int


def _with_edits(c: sqlite3.Connection, rows: list[tuple], marked: bool = False) -> list[Post]:
    """Posts from ``(seq, topic, hash, kind, author, ts, of, parent, raw)`` rows, edits applied.

    ``marked``: each row ends with two flags, whether the post has an edit and
    whether it has a reply (:data:`_MARKS`); only those are looked up, so a
    new post, which has neither, costs no second query.
    """
    if not rows:
        return []
    recs = [_record(r[1:9]) for r in rows]
    seqs = {r[2]: r[0] for r in rows}
    edited = {r[2] for r in rows if r[9]} if marked else set(seqs)
    replied = {r[2] for r in rows if r[10]} if marked else set(seqs)
    extra: list[Record] = []
    for topic, hashes in _by_topic(recs, edited).items():
        for i in range(0, len(hashes), 400):
            chunk = hashes[i:i + 400]
            marks = ",".join("?" * len(chunk))
            edits = [_record(x) for x in c.execute(
                f"SELECT {_COLS} FROM board_records WHERE topic = ? AND kind = 'edit'"
                f" AND of IN ({marks}) AND of != ''", (topic, *chunk))]
            extra.extend(edits)
            if edits:
                em = ",".join("?" * len(edits))
                extra.extend(_record(x) for x in c.execute(
                    f"SELECT {_COLS} FROM board_records WHERE topic = ? AND kind = 'hide'"
                    f" AND of IN ({em}) AND of != ''", (topic, *[e.hash for e in edits])))
    replies: dict[str, int] = {}
    for topic, hashes in _by_topic(recs, replied).items():
        for i in range(0, len(hashes), 400):
            chunk = hashes[i:i + 400]
            replies.update(c.execute(
                "SELECT parent, count(*) FROM board_records p INDEXED BY board_records_parent"
                " WHERE p.topic = ? AND p.parent IN (" + ",".join("?" * len(chunk))
                + f") AND p.parent != '' AND {_SHOWN} GROUP BY parent", (topic, *chunk)))
    topic_of = {r.hash: r.topic for r in recs}
    return [Post(s, topic_of[s.hash], seqs[s.hash], replies.get(s.hash, 0))
            for s in view.visible(recs + extra)]


def _by_topic(recs: list[Record], wanted: set[str]) -> dict[str, list[str]]:
    """The hashes in ``wanted`` of these records, by topic."""
    out: dict[str, list[str]] = {}
    for r in recs:
        if r.hash in wanted:
            out.setdefault(r.topic, []).append(r.hash)
    return out


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


# Whether a post has an edit, and a reply: what :func:`_with_edits` looks up only when so.
_MARKS = (
    ", EXISTS (SELECT 1 FROM board_records e INDEXED BY board_records_of WHERE e.topic = p.topic"
    " AND e.of = p.hash AND e.of != '' AND e.kind = 'edit'), EXISTS (SELECT 1 FROM board_records"
    " r INDEXED BY board_records_parent WHERE r.topic = p.topic AND r.parent = p.hash"
    " AND r.parent != '')")


def posts_after(c: sqlite3.Connection, topics: list[str] | None, after: int, me: str,
                mine: bool = False, limit: int = 500) -> list[Post]:
    """Visible posts that arrived after cursor ``after`` on these topics (None: on every
    topic), in arrival order.

    The seqs lead the search (``+p.topic`` keeps SQLite off the topic's
    indexes): a waiter's cursor is near the newest seq, and walking the
    topic's records from its first, as a topic index does, costs time in the
    topic's size on every look.
    """
    if topics is not None and not topics:
        return []
    where, args = "p.seq > ?", [after]
    if topics is not None:
        where += f" AND +p.topic IN ({','.join('?' * len(topics))})"
        args += topics
    if not mine:
        where += " AND p.author != ?"
        args.append(me)
    return _posts(c, where, args, limit)


def posts_at(c: sqlite3.Connection, seqs: list[int]) -> list[Post]:
    """The visible posts among the records that arrived as these seqs, in arrival order."""
    return _posts(c, f"p.seq IN ({','.join('?' * len(seqs))})", seqs, len(seqs)) if seqs else []


def _posts(c: sqlite3.Connection, where: str, args: list, limit: int) -> list[Post]:
    rows = c.execute(f"SELECT {_PCOLS}{_MARKS} FROM board_records p WHERE {where}"
                     f" AND {_SHOWN} ORDER BY p.seq LIMIT {int(limit)}", args).fetchall()
    return sorted(_with_edits(c, rows, marked=True), key=lambda p: p.seq)


def plain_posts(c: sqlite3.Connection, after: int, upto: int, limit: int) -> list[tuple[int, bool]]:
    """``(seq, plain)`` for the posts with ``after < seq <= upto``, in arrival order.

    ``plain``: no record names the post (no edit, delete or hide, no reply), so
    readers see it as its author wrote it, with no replies: the board's feed
    then shapes it from the record it just stored instead of reading it back.
    """
    return [(seq, bool(plain)) for seq, plain in c.execute(
        "SELECT p.seq, NOT EXISTS (SELECT 1 FROM board_records x INDEXED BY board_records_of"
        " WHERE x.topic = p.topic AND x.of = p.hash AND x.of != '') AND NOT EXISTS (SELECT 1"
        " FROM board_records r INDEXED BY board_records_parent WHERE r.topic = p.topic"
        " AND r.parent = p.hash AND r.parent != '') FROM board_records p"
        " WHERE p.seq > ? AND p.seq <= ?"
        f" AND p.kind = 'post' ORDER BY p.seq LIMIT {int(limit)}", (after, upto))]


def named(c: sqlite3.Connection, posts: Iterable[Record]) -> set[str]:
    """The hashes of ``posts`` some stored record names (an edit, delete or hide of it,
    a reply to it): the others are plain (:func:`plain_posts`).  Asked in the
    transaction that stored them, so the board's feed can shape them as they are;
    one small statement a post (a post or two a commit is the common case)."""
    return {r.hash for r in posts if c.execute(
        "SELECT EXISTS (SELECT 1 FROM board_records INDEXED BY board_records_of WHERE"
        " topic = ?1 AND of = ?2 AND of != '') OR EXISTS (SELECT 1 FROM board_records"
        " INDEXED BY board_records_parent WHERE topic = ?1 AND parent = ?2"
        " AND parent != '')",
        (r.topic, r.hash)).fetchone()[0]}


def last_seq(c: sqlite3.Connection) -> int:
    return c.execute("SELECT coalesce(max(seq), 0) FROM board_records").fetchone()[0]


def version_and_last(c: sqlite3.Connection) -> tuple[int, int]:
    """A number that changes whenever another connection (the writer's) commits (what was
    read on ``c`` before is current while it stays the same), and :func:`last_seq`: one
    statement, which a waiter of the board runs on every wake-up."""
    return c.execute("SELECT (SELECT data_version FROM pragma_data_version),"
                     " (SELECT coalesce(max(seq), 0) FROM board_records)").fetchone()


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
    """Move each topic's read mark forward (never back) to the given seq.

    Never past the newest seq held (seqs rise across all topics, so every post
    still to come gets a larger one): a caller's mark far past the end
    (``10**15``) would otherwise hide them all. ``max(seq)`` of the rowid is
    one index step, so a hook's confirm stays cheap.
    """
    newest = c.execute("SELECT coalesce(max(seq), 0) FROM board_records").fetchone()[0]
    c.executemany("UPDATE board_subs SET read_seq = max(read_seq, ?) WHERE topic = ?",
                  [(min(seq, newest), topic) for topic, seq in upto.items()])


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
        if is_owner(owner, str(g.get("iss"))):
            continue
        for (raw,) in c.execute(
                "SELECT grant FROM grants WHERE kind IN ('presented', 'held') AND iss = ?"
                " AND sub = ? AND exp > ? AND aud = '' LIMIT 16", (owner, g.get("iss"), now)):
            via = json.loads(raw)
            if grant_counts(g, owner=owner, sub=me, topic=topic, what=what, at_ms=now,
                            policy=pol, via=via):
                return g, via
    return None
