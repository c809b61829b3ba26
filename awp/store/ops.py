"""Every write the protocol engine makes, as functions of a connection.

Each function runs inside a transaction the caller (usually the group-commit
writer) owns, so a sequence of them is atomic: a line is queued, logged and
its thread touched together, or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable

from ..wire.canonical import compact_json
from ..wire.errors import ProtocolError
from ..wire.ids import IdGenerator
from ..wire.messages import ACKED_TYPES, default_subject, parse_line
from ..wire.names import clean_name
from ..wire.timefmt import format_ts, now_ms, parse_ts

#: Where an address came from, most trusted first: what the user dialed, what
#: the peer says of itself (hello.addr), what another peer said of it.
SOURCE_RANK = {"connect": 0, "hello": 1, "introduce": 2}
# Lines that are never acked themselves and are dropped when a later msg of
# the same thread is acked (cumulative ack).
CUMULATIVE_TYPES = ("chunk", "introduce")
# Written out, so the partial index ``outbox_cumulative`` (whose WHERE says the
# same) serves the statements that drop them.
_CUMULATIVE_SQL = "t IN ({})".format(", ".join(f"'{t}'" for t in CUMULATIVE_TYPES))
# What ``log.acked`` says of a line we sent (migration 9): 1 acked; -1 dropped
# unacked (the outbox retention, an unreadable line); 0 up to its outbox row
# when its type is acked (``ACKED_TYPES``): unacked while the row is queued,
# acked once an ack or the peer's resume deleted it.  So an ack writes nothing
# to the log, whose row (the whole line) would be written again for one flag;
# a line that leaves the outbox any other way is marked -1 as it goes.
# Lines of other types (an introduction) keep 0 as "not acked".
_ACKED_SQL = "({})".format(", ".join(f"'{t}'" for t in sorted(ACKED_TYPES)))


def out_acked(conn: sqlite3.Connection, peer: str, ident: str, t: str, acked: int) -> bool:
    """Whether a log row (``peer``, ``ident``, type ``t``, column ``acked``) is acked."""
    if acked != 0 or t not in ACKED_TYPES:
        return acked == 1
    return conn.execute("SELECT 1 FROM outbox WHERE peer = ? AND id = ?",
                        (peer, ident)).fetchone() is None


def _drop_unacked(conn: sqlite3.Connection, where: str, args: tuple) -> int:
    """Delete the outbox rows ``where`` selects, their logged lines marked -1
    (dropped, never acked: see ``_ACKED_SQL``); how many rows went."""
    conn.execute(
        "UPDATE log SET acked = -1 WHERE dir = 'out' AND acked = 0 AND (peer, id) IN"
        f" (SELECT peer, id FROM outbox WHERE {where})", args)
    return conn.execute(f"DELETE FROM outbox WHERE {where}", args).rowcount


# A queued line's text: its own, or (a logged line, whose outbox row holds '')
# the log's; ``o`` is the outbox row, ``l`` the log row joined by _TEXT_JOIN.
_TEXT = "CASE WHEN o.line != '' THEN o.line ELSE l.line END"
_TEXT_JOIN = ("FROM outbox o LEFT JOIN log l ON o.line = '' AND l.peer = o.peer"
              " AND l.dir = 'out' AND l.id = o.id")
# Ids per ``IN (...)`` list: far below SQLite's bound on parameters.
_IN_LIST = 500
FINAL_STATES = frozenset({"done", "failed", "closed"})
KNOWN_STATES = frozenset({"open", "working", "waiting"}) | FINAL_STATES


# --- meta ---------------------------------------------------------------------------


def get_meta(conn: sqlite3.Connection, k: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT v FROM meta WHERE k = ?", (k,)).fetchone()
    return row[0] if row else default


def set_meta(conn: sqlite3.Connection, k: str, v: str) -> None:
    conn.execute(
        "INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        (k, v),
    )


def del_meta(conn: sqlite3.Connection, k: str) -> None:
    conn.execute("DELETE FROM meta WHERE k = ?", (k,))


def last_issued_id(conn: sqlite3.Connection) -> str | None:
    """The largest id this node ever issued, to seed the id generator."""
    best = get_meta(conn, "last_id")
    for sql in (
        "SELECT max(id) FROM outbox",
        "SELECT max(id) FROM log WHERE dir = 'out'",
    ):
        v = conn.execute(sql).fetchone()[0]
        if v and (best is None or v > best):
            best = v
    return best


# --- peers and addresses ------------------------------------------------------------


def set_alias(conn: sqlite3.Connection, alias: str, key: str) -> None:
    """Point ``alias`` at ``key`` (a new alias, or one moved to another peer)."""
    conn.execute("INSERT INTO aliases (alias, key) VALUES (?, ?) ON CONFLICT (alias)"
                 " DO UPDATE SET key = excluded.key", (alias, key))


def ensure_peer(conn: sqlite3.Connection, key: str, now: int) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO peers (key, first_seen, last_seen) VALUES (?, ?, 0)", (key, now)
    )


def record_hello(
    conn: sqlite3.Connection, key: str, hello: dict, now: int
) -> dict:
    """Store what a peer says about itself; returns the previous row as a dict."""
    ensure_peer(conn, key, now)
    prev = dict(conn.execute("SELECT * FROM peers WHERE key = ?", (key,)).fetchone())
    name = clean_name(hello.get("name"))
    about = hello.get("about") if isinstance(hello.get("about"), str) else ""
    caps = [c for c in hello.get("caps") or [] if isinstance(c, str)] if isinstance(
        hello.get("caps"), list) else []
    shares = hello.get("shares")
    shares_json = (
        json.dumps([s for s in shares if isinstance(s, str)]) if isinstance(shares, list) else "[]"
    )
    conn.execute(
        "UPDATE peers SET name = ?, about = ?, caps = ?, shares = ?, last_seen = ? WHERE key = ?",
        (name, about[:1000], json.dumps(caps[:64]), shares_json, now, key),
    )
    return prev


def add_address(conn: sqlite3.Connection, peer: str, addr: str, source: str, now: int) -> None:
    """Remember an address for a peer; a better source upgrades an existing one."""
    row = conn.execute(
        "SELECT source FROM addresses WHERE peer = ? AND addr = ?", (peer, addr)
    ).fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO addresses (peer, addr, source, added_at) VALUES (?, ?, ?, ?)",
            (peer, addr, source, now),
        )
    elif SOURCE_RANK.get(source, 9) < SOURCE_RANK.get(row[0], 9):
        conn.execute(
            "UPDATE addresses SET source = ?, added_at = ? WHERE peer = ? AND addr = ?",
            (source, now, peer, addr),
        )


def address_result(
    conn: sqlite3.Connection, peer: str, addr: str, now: int, error: str = ""
) -> None:
    if error:
        conn.execute(
            "UPDATE addresses SET last_error = ? WHERE peer = ? AND addr = ?",
            (error[:500], peer, addr),
        )
        conn.execute(
            "UPDATE peers SET last_error = ?, last_error_at = ? WHERE key = ?",
            (error[:500], now, peer),
        )
    else:
        conn.execute(
            "UPDATE addresses SET last_success = ?, last_error = '' WHERE peer = ? AND addr = ?",
            (now, peer, addr),
        )
        conn.execute("UPDATE peers SET last_error = '' WHERE key = ?", (peer,))


def ranked_addresses(conn: sqlite3.Connection, peer: str) -> list[sqlite3.Row]:
    """What the user dialed and the peer said of itself before what others said of it;
    within each, the most recent success first, then by source, then newest."""
    rows = conn.execute("SELECT * FROM addresses WHERE peer = ?", (peer,)).fetchall()
    hearsay = SOURCE_RANK["introduce"]
    return sorted(
        rows,
        key=lambda r: (SOURCE_RANK.get(r["source"], 9) >= hearsay, -r["last_success"],
                       SOURCE_RANK.get(r["source"], 9), -r["added_at"]),
    )


def set_parked(conn: sqlite3.Connection, peer: str, parked: bool, reason: str = "") -> None:
    conn.execute(
        "UPDATE peers SET parked = ?, bye_reason = ? WHERE key = ?",
        (1 if parked else 0, reason[:500] if parked else "", peer),
    )


class LineTooLong(ValueError):
    """A line we were asked to queue would exceed the wire's line limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the message is {size:,} bytes on the wire, over the {limit:,}-byte line limit;"
            " send large content as a file")
        self.size = size


# --- queuing what we send -----------------------------------------------------------


def queue_line(
    conn: sqlite3.Connection,
    gen: IdGenerator,
    peer: str,
    build: Callable[[str, str], dict],
    *,
    log: bool = True,
    ref: str = "",
    now: int | None = None,
    max_bytes: int | None = None,
    first: tuple[str, dict, str] | None = None,
) -> tuple[int, dict, str]:
    """Allocate an id, queue the line for ``peer`` and (optionally) log it.

    The id is taken inside the transaction, so outbox order equals id order;
    a caller passing ``first`` (id, line, text) built the line with ``now``
    from an id it drew while holding the store (same rule).
    Queuing anything un-parks the peer.  Returns ``(seq, line, text)``.
    """
    now = now_ms() if now is None else now
    if first is not None:
        ident, line, text = first
    else:
        ident = gen.next()
        line = build(ident, format_ts(now))
        text = compact_json(line)
    if max_bytes is not None and len(text.encode("utf-8")) > max_bytes:
        raise LineTooLong(len(text.encode("utf-8")), max_bytes)
    th = line.get("th") or ""
    # A logged line's text is read from the log when it is sent (migration 9).
    cur = conn.execute(
        "INSERT INTO outbox (peer, id, t, th, ref, line, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (peer, ident, line["t"], th, ref, "" if log else text, now),
    )
    if log:
        conn.execute(
            "INSERT INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
            " VALUES (?, 'out', ?, ?, ?, ?, ?, ?, ?, 1, 0)",
            (peer, line["t"], ident, th, line.get("re") or "", now, now, text),
        )
    conn.execute("UPDATE peers SET parked = 0, bye_reason = '' WHERE key = ? AND parked = 1",
                 (peer,))
    return cur.lastrowid, line, text


def touch_thread_out(
    conn: sqlite3.Connection, peer: str, th: str, now: int, *, subject: str = "",
    state: str | None = None, note: str = "",
) -> None:
    """Create or update a thread from our side (a msg or a state we send)."""
    _ensure_thread(conn, peer, th, subject, now)
    if state is not None:
        conn.execute(
            "UPDATE threads SET mine = ?, my_note = ?, my_since = ?, updated = ?"
            " WHERE peer = ? AND th = ?",
            (state, note, now, now, peer, th),
        )


THREAD_RECENCY_MS = 1000


def _ensure_thread(conn: sqlite3.Connection, peer: str, th: str, subject: str, now: int) -> None:
    """Create a thread, or move its ``updated`` forward.

    ``updated`` only orders threads by recency, so within a second of the
    last move it is left alone: the row and its index stay out of the
    commit, which is two pages less to sync for each message of a busy
    thread.
    """
    conn.execute(
        "INSERT INTO threads (peer, th, subject, created, updated, my_since, their_since)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (peer, th) DO UPDATE SET"
        " subject = CASE WHEN threads.subject = '' THEN excluded.subject ELSE threads.subject END,"
        " updated = max(threads.updated, excluded.updated)"
        " WHERE excluded.updated >= threads.updated + ?"
        " OR (threads.subject = '' AND excluded.subject != '')",
        (peer, th, subject[:500], now, now, now, now, THREAD_RECENCY_MS),
    )


def queue_chunks(conn: sqlite3.Connection, gen: IdGenerator, peer: str, th: str, blob: dict,
                 now: int) -> list[tuple[int, str, str]]:
    """Queue the chunk lines of a staged file, without their data.

    The data (256 KiB a chunk) is read from the staged copy when the line is
    sent, so the outbox never holds a second copy of the file.
    """
    from .blobs import CHUNK

    count = max(1, -(-blob["size"] // CHUNK))
    rows = []
    for n in range(count):
        def build(ident: str, ts: str, n: int = n) -> dict:
            return {"t": "chunk", "id": ident, "ts": ts, "th": th, "ref": blob["ref"], "n": n,
                    "last": n == count - 1}
        seq, _line, text = queue_line(conn, gen, peer, build, log=False, ref=blob["ref"], now=now)
        rows.append((seq, "chunk", text))
    conn.execute(
        "INSERT INTO blobs (peer, dir, ref, th, name, mime, size, status, path, created, updated)"
        " VALUES (?, 'out', ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
        (peer, blob["ref"], th, blob["name"], blob["mime"], blob["size"], blob["path"], now, now))
    return rows


def blob_refused_out(conn: sqlite3.Connection, peer: str, ref: str, detail: str,
                     now: int) -> None:
    """The peer refused a blob we send: stop sending its chunks."""
    conn.execute("DELETE FROM outbox WHERE peer = ? AND t = 'chunk' AND ref = ?", (peer, ref))
    conn.execute("UPDATE blobs SET status = 'refused', error = ?, updated = ?"
                 " WHERE peer = ? AND dir = 'out' AND ref = ?", (detail[:300], now, peer, ref))


def fetch_outbox(
    conn: sqlite3.Connection, peer: str, after_seq: int, limit: int = 500
) -> list[tuple[int, str, str, str]]:
    """``(seq, id, t, line)`` for queued lines after ``after_seq``, in order.

    A logged line's text comes from the log; a row whose log row is gone
    (only a repaired store can lose one) has nothing to send and is left out.
    """
    return conn.execute(
        f"SELECT o.seq, o.id, o.t, {_TEXT} {_TEXT_JOIN}"
        " WHERE o.peer = ? AND o.seq > ? AND (o.line != '' OR l.line IS NOT NULL)"
        " ORDER BY o.seq LIMIT ?",
        (peer, after_seq, limit),
    ).fetchall()


def fetch_outbox_ids(conn: sqlite3.Connection, peer: str, ids: list[str]) -> list[tuple[str, str]]:
    """``(id, line)`` of those of ``ids`` still queued for ``peer``, in outbox order."""
    rows: list[tuple[int, str, str]] = []
    for i in range(0, len(ids), _IN_LIST):
        part = ids[i:i + _IN_LIST]
        rows += conn.execute(
            f"SELECT o.seq, o.id, {_TEXT} {_TEXT_JOIN} WHERE o.peer = ?"
            f" AND o.id IN ({','.join('?' * len(part))})"
            " AND (o.line != '' OR l.line IS NOT NULL)",
            (peer, *part)).fetchall()
    return [(r[1], r[2]) for r in sorted(rows, key=lambda r: r[0])]


def apply_ack(conn: sqlite3.Connection, peer: str, th: str, re: str) -> bool:
    """The peer stored our line ``re``: drop it, and the never-acked lines before it.

    Only a line queued for ``peer`` itself is touched: an ack naming a line
    we sent someone else changes nothing.  Returns whether the ack was news
    (the line was still queued, or not yet marked acked).
    """
    seq = _apply_one_ack(conn, peer, th, re)
    if seq:
        _drop_introductions_before(conn, peer, seq)
    return seq is not None


def _apply_one_ack(conn: sqlite3.Connection, peer: str, th: str, re: str) -> int | None:
    """:func:`apply_ack` but the introductions: the acked line's outbox seq, 0 when it
    was only marked acked in the log, ``None`` when the ack was no news.

    The one-at-a-time form of :func:`apply_acks`, kept as the reference its
    test compares the batched form with.
    """
    row = conn.execute(
        "SELECT seq, th, t FROM outbox WHERE peer = ? AND id = ?", (peer, re)
    ).fetchone()
    if row is None or row[2] not in ACKED_TYPES:
        marked = conn.execute(
            "UPDATE log SET acked = 1 WHERE peer = ? AND dir = 'out' AND id = ? AND"
            f" (acked = -1 OR (acked = 0 AND t NOT IN {_ACKED_SQL}))", (peer, re)).rowcount
        if row is None:
            return 0 if marked > 0 else None
    seq, qth, _t = row
    conn.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
    conn.execute("UPDATE blobs SET status = 'sent' WHERE peer = ? AND dir = 'out'"
                 " AND msg_id = ? AND status = 'queued'", (peer, re))
    if qth:
        conn.execute(
            f"DELETE FROM outbox WHERE peer = ? AND th = ? AND seq < ? AND {_CUMULATIVE_SQL}",
            (peer, qth, seq),
        )
    return seq


def _drop_introductions_before(conn: sqlite3.Connection, peer: str, seq: int) -> None:
    """An introduction is never acked, and one in a thread of its own has no
    later msg there to carry it: the peer read it before the acked line at
    ``seq`` (lines go out in outbox order), so stop replaying it."""
    conn.execute("DELETE FROM outbox WHERE peer = ? AND seq < ? AND t = 'introduce'",
                 (peer, seq))


def apply_acks(conn: sqlite3.Connection, peer: str, acks: list[tuple[str, str]]) -> list[str]:
    """:func:`apply_ack` for a run of ``(th, re)``; the ids that were news, in order.

    A backlog's acks arrive by the thousand, so a run costs a few statements
    per :data:`_IN_LIST` ids instead of five per ack: the queued lines are
    deleted with one statement, which saying which were queued also marks
    them acked (see ``_ACKED_SQL``),
    the cumulative lines are dropped once per thread below its last acked
    line, and the introductions once below the last acked line of all.
    That is what the acks one at a time leave behind: each drops what lies
    below it, so the highest of a thread (of all, for introductions) drops
    the union.
    """
    ids = list(dict.fromkeys(re for _th, re in acks))
    news: set[str] = set()
    top: dict[str, int] = {}  # thread -> highest acked seq in it
    for start in range(0, len(ids), _IN_LIST):
        part = ids[start:start + _IN_LIST]
        marks = ",".join("?" * len(part))
        found = conn.execute(
            f"DELETE FROM outbox INDEXED BY outbox_id WHERE peer = ? AND id IN ({marks})"
            " RETURNING seq, id, th, t", (peer, *part)).fetchall()
        gone = [r[1] for r in found]
        # A deleted row of an acked type is acked by that alone (``_ACKED_SQL``);
        # the log is written only for an ack of a line that had left the
        # outbox unacked, or of a type that is never acked.
        left = set(part).difference(gone)
        odd = [i for i in part if i in left] + [r[1] for r in found if r[3] not in ACKED_TYPES]
        if odd:
            news.update(r[0] for r in conn.execute(
                "UPDATE log SET acked = 1 WHERE peer = ? AND dir = 'out'"
                f" AND id IN ({','.join('?' * len(odd))})"
                f" AND (acked = -1 OR (acked = 0 AND t NOT IN {_ACKED_SQL})) RETURNING id",
                (peer, *odd)))
        if not found:
            continue
        news.update(gone)
        conn.execute(
            "UPDATE blobs SET status = 'sent' WHERE peer = ? AND dir = 'out'"
            f" AND msg_id IN ({','.join('?' * len(gone))}) AND status = 'queued'",
            (peer, *gone))
        for seq, _ident, qth, _t in found:
            if seq > top.get(qth, 0):
                top[qth] = seq
    for qth, seq in top.items():
        if qth:
            conn.execute(
                f"DELETE FROM outbox WHERE peer = ? AND th = ? AND seq < ? AND {_CUMULATIVE_SQL}",
                (peer, qth, seq))
    if top:
        _drop_introductions_before(conn, peer, max(top.values()))
    return [i for i in ids if i in news]


def apply_resume(conn: sqlite3.Connection, peer: str, seen: dict[str, str]) -> list[str]:
    """Drop what the peer says it has; returns the ids that count as acked."""
    acked: list[str] = []
    for th, last in seen.items():
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM outbox WHERE peer = ? AND th = ? AND id <= ?", (peer, th, last)
            )
        ]
        if not ids:
            continue
        conn.execute(
            "DELETE FROM outbox WHERE peer = ? AND th = ? AND id <= ?", (peer, th, last)
        )
        conn.executemany(
            "UPDATE log SET acked = 1 WHERE peer = ? AND dir = 'out' AND id = ?",
            [(peer, i) for i in ids],
        )
        conn.executemany(
            "UPDATE blobs SET status = 'sent' WHERE peer = ? AND dir = 'out' AND msg_id = ?"
            " AND status = 'queued'", [(peer, i) for i in ids])
        acked.extend(ids)
    return acked


def drop_unreadable(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Drop queued lines no peer can read; ``(peer, id)`` of each.

    Versions before the strict decoder (``wire/strictjson.py``) let ``NaN``
    or an infinity into a line we queued (``--data '{"a": NaN}'``).  Every
    peer refuses such a line and closes, and the replay sends it first on
    each reconnect: left queued, it would cut the link for good.  Only lines
    with one of those tokens are parsed, so this costs one scan at start.
    """
    out = []
    for seq, peer, ident, line in conn.execute(
            f"SELECT o.seq, o.peer, o.id, {_TEXT} AS text {_TEXT_JOIN}"
            " WHERE text LIKE '%NaN%' OR text LIKE '%Infinity%'").fetchall():
        try:
            parse_line(line.encode("utf-8"))
        except ProtocolError:
            _drop_unacked(conn, "seq = ?", (seq,))
            out.append((peer, ident))
    return out


def sweep_outbox(conn: sqlite3.Connection, cutoff_ms: int) -> int:
    """Drop unacked lines older than the retention; returns how many."""
    return _drop_unacked(conn, "created < ?", (cutoff_ms,))


def resume_seen(conn: sqlite3.Connection, peer: str, since_ms: int) -> dict[str, str]:
    return {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT th, last_id FROM seen WHERE peer = ? AND updated >= ?", (peer, since_ms)
        )
    }


# --- what we receive ----------------------------------------------------------------


def line_ts(line: dict, now: int) -> int:
    """A peer's line's own stamp in Unix ms, or ``now`` when it has none we can read."""
    try:
        return parse_ts(line.get("ts", ""))
    except ValueError:
        return now


def store_inbound(
    conn: sqlite3.Connection, peer: str, line: dict, text: str, now: int
) -> int:
    """Store a content line from ``peer``; returns its log seq, 0 for a duplicate.

    A duplicate (same sender, same id) changes nothing; the caller acks it
    again all the same.
    """
    ident = line["id"]
    th = line.get("th") or ""
    ts = line_ts(line, now)
    cur = conn.execute(
        "INSERT OR IGNORE INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
        " VALUES (?, 'in', ?, ?, ?, ?, ?, ?, ?, 0, 1)",
        (peer, line["t"], ident, th, line.get("re") or "", ts, now, text),
    )
    if cur.rowcount == 0:
        return 0
    seq = cur.lastrowid
    if th:
        note_seen(conn, peer, th, ident, now)
    t = line["t"]
    if t == "msg" and th:
        subject = line.get("subject") if isinstance(line.get("subject"), str) else ""
        if not subject:
            parts = line.get("parts") if isinstance(line.get("parts"), list) else []
            subject = default_subject(parts)
        _ensure_thread(conn, peer, th, subject, now)
    elif t == "state" and th:
        _ensure_thread(conn, peer, th, "", now)
        note = line.get("note") if isinstance(line.get("note"), str) else ""
        conn.execute(
            "UPDATE threads SET theirs = ?, their_note = ?, their_since = ?, updated = ?"
            " WHERE peer = ? AND th = ?",
            (line["state"][:100], note[:2000], now, now, peer, th),
        )
    return seq


def note_seen(conn: sqlite3.Connection, peer: str, th: str, ident: str, now: int) -> None:
    """Advance the per-thread resume point (ids only grow)."""
    conn.execute(
        "INSERT INTO seen (peer, th, last_id, updated) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (peer, th) DO UPDATE SET"
        " last_id = max(seen.last_id, excluded.last_id), updated = excluded.updated",
        (peer, th, ident, now),
    )


def add_notice(
    conn: sqlite3.Connection, gen: IdGenerator, peer: str, kind: str, text: str,
    now: int | None = None, th: str = "", data: dict | None = None,
) -> int:
    """A local event for the agent (bye, refusal, received file, ...)."""
    now = now_ms() if now is None else now
    ident = gen.next()
    body = {"t": "notice", "id": ident, "ts": format_ts(now), "kind": kind, "text": text}
    if th:
        body["th"] = th
    if data:
        body["data"] = data
    cur = conn.execute(
        "INSERT INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
        " VALUES (?, 'notice', 'notice', ?, ?, '', ?, ?, ?, 0, 1)",
        (peer, ident, th, now, now, compact_json(body)),
    )
    return cur.lastrowid


def mark_seen(conn: sqlite3.Connection, seqs: Iterable[int]) -> None:
    """Mark inbound records and notices read by seq (what a hook printed); others stay."""
    conn.executemany("UPDATE log SET read = 1 WHERE seq = ? AND read = 0"
                     " AND dir IN ('in', 'notice')", [(s,) for s in seqs])


def mark_read(conn: sqlite3.Connection, seqs: Iterable[int]) -> None:
    conn.executemany("UPDATE log SET read = 1 WHERE seq = ? AND read = 0", [(s,) for s in seqs])
