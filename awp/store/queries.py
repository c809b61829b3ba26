"""Read-side queries behind the local API (status, read, threads, peers)."""

from __future__ import annotations

import json
import sqlite3

from ..base.echo import echo
from ..wire.address import address_hint
from ..wire.keys import KEY_PREFIX, KeyError_, normalize_key, short_key
from ..wire.names import clean_name, name_fold
from . import rotations
from .ops import out_acked

FINAL = ("done", "failed", "closed")

#: Longest text taken as a peer reference (a name is at most NAME_MAX characters,
#: a key about 52): longer cannot name a peer, and is refused before it reaches
#: a LIKE pattern (SQLite refuses patterns over 50,000 bytes).
REF_MAX = 512


class LookupFailed(Exception):
    """A peer or thread reference that names nothing, or more than one thing."""

    def __init__(self, message: str, code: str = "unknown_peer") -> None:
        super().__init__(message)
        self.code = code


def _named_peers(c: sqlite3.Connection) -> list[tuple[str, str]]:
    return c.execute("SELECT key, name FROM peers WHERE name != ''").fetchall()


def name_clashes(c: sqlite3.Connection) -> set[str]:
    """The folds (see :func:`name_fold`) of names that two or more keys claim.

    Our own aliases count as claims, so a peer that calls itself like the
    alias of another shows with its key prefix too.
    """
    first: dict[str, str] = {}
    out: set[str] = set()
    aliases = c.execute("SELECT key, alias FROM aliases").fetchall()
    for key, name in [*_named_peers(c), *aliases]:
        fold = name_fold(name)
        if fold and first.setdefault(fold, key) != key:
            out.add(fold)
    return out


def peer_label(c: sqlite3.Connection, key: str, clashes: set[str] | None = None) -> str:
    """How a peer is shown: its alias, else its name, else its key prefix.

    A name that another key also claims (or one that looks like it) gets the
    key prefix after it, so two look-alikes never show as one peer.
    """
    alias = c.execute("SELECT alias FROM aliases WHERE key = ? ORDER BY alias LIMIT 1",
                      (key,)).fetchone()
    if alias:
        return alias[0]
    row = c.execute("SELECT name FROM peers WHERE key = ?", (key,)).fetchone()
    name = clean_name(row[0]) if row else ""
    if not name:
        if row is None:  # never met: the name it signed elsewhere, marked as heard of
            from .heard import heard_name

            heard = heard_name(c, key)
            if heard is not None:
                return f"{heard[0]} (heard of, {short_key(key)})"
        return short_key(key)
    if clashes is None:
        clashes = name_clashes(c)
    return f"{name} ({short_key(key)})" if name_fold(name) in clashes else name


def owner_label(c: sqlite3.Connection, key: str) -> str:
    """How a topic's owner is written in ``OWNER/NAME``: what the user can type back.

    A met peer as :func:`peer_label`; one only heard of by the bare name it
    signed, when that name resolves back to it (else its key prefix).
    """
    if c.execute("SELECT 1 FROM peers WHERE key = ?", (key,)).fetchone() is not None:
        return peer_label(c, key)
    from .heard import heard_name

    heard = heard_name(c, key)
    if heard is not None:
        try:
            if resolve_peer(c, heard[0], heard=True) == key:
                return heard[0]
        except LookupFailed:
            pass
    return short_key(key)


class Labels(dict):
    """Peer labels for one request: the look-alike check runs once, not per key."""

    def __init__(self, c: sqlite3.Connection) -> None:
        super().__init__()
        self.c = c
        self.clashes: set[str] | None = None

    def __missing__(self, key: str) -> str:
        if self.clashes is None:
            self.clashes = name_clashes(self.c)
        label = self[key] = peer_label(self.c, key, self.clashes)
        return label


def _candidates(c: sqlite3.Connection, keys: list[str]) -> str:
    """``b@box (key AbCd012345), ...``: the peers a lookup could mean."""
    labels = Labels(c)
    shown = []
    for k in keys[:8]:
        label, short = labels[k], short_key(k)
        shown.append(label if label.endswith(f"({short})") else f"{label} (key {short})")
    more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
    return ", ".join(shown) + more


def resolve_peer(c: sqlite3.Connection, text: str, *, introduced: bool = False,
                 heard: bool = False) -> str:
    """A peer's key from a key, alias, announced name, or key prefix (>= 4 chars).

    Names match by their fold (UTS #39 skeletons, case, accents), so
    "builder" also finds "Builder " and "builder\u200b"; when a name (or
    look-alike) belongs to several keys, or the text is both a name and
    another peer's key prefix, nothing is picked. A name that only looks like
    the one given (``buiIder`` for ``builder``) is never taken for it unless
    the user has named that key before (an alias, a line sent to it, a
    connect to its address): the error shows its key instead.

    Names from introductions (another peer saying who a key is) never count
    here, so they cannot shadow or crowd a name; with ``introduced`` (for
    ``connect`` only) an exact introduced name is the last resort.  With
    ``heard`` (a topic's owner), a name no met peer has may be one a key
    signed for itself elsewhere (:mod:`awp.store.heard`): taken when one key
    claims it, refused, with where each claim came from, when several do.
    """
    ref = text.strip()
    if not ref:
        raise LookupFailed("empty peer name")
    if len(ref) > REF_MAX:
        raise LookupFailed(f"a peer is named by a name, alias or key of at most {REF_MAX}"
                           f" characters, not {echo(ref)}", "bad_peer")
    if ref.startswith(KEY_PREFIX):
        try:
            key = normalize_key(ref)
        except KeyError_ as e:
            raise LookupFailed(f"bad key {echo(ref)}: {e}") from None
        return rotations.current(c, key)  # a key rotated away names the peer it became
    row = c.execute("SELECT key FROM aliases WHERE alias = ?", (ref,)).fetchone()
    if row:
        return row[0]
    fold = name_fold(ref)
    claims = [*_named_peers(c), *c.execute("SELECT key, alias FROM aliases").fetchall()]
    named = [k for k, n in claims if fold and name_fold(n) == fold]
    prefixed: list[str] = []
    if len(ref) >= 4:
        like = KEY_PREFIX + ref.replace("%", "").replace("_", "\\_") + "%"
        prefixed = [r[0] for r in c.execute(
            "SELECT key FROM peers WHERE key LIKE ? ESCAPE '\\'", (like,))]
    hits = list(dict.fromkeys(named + prefixed))
    if len(hits) == 1:
        key = hits[0]
        if key in prefixed or _exact_name(c, key, ref) or user_named(c, key):
            return key
        short = short_key(key)
        raise LookupFailed(
            f"no peer is called {echo(ref)}: {_candidates(c, [key])} only looks like it."
            f" If it is the one you mean, name it by its key ({short}) or give it an alias"
            f" (awp alias {short} NICKNAME)", "lookalike_peer")
    if hits:
        what = (f"{len(hits)} peers are called {echo(ref)} or a look-alike of it" if not prefixed
                else f"{echo(ref)} names or is a key prefix of {len(hits)} peers")
        raise LookupFailed(f"{what}: {_candidates(c, hits)}; use a longer key prefix or an"
                           " alias (awp alias KEYPREFIX NICKNAME)", "ambiguous_peer")
    if heard:
        from .heard import heard_as

        claims_heard = heard_as(c, ref)
        if len(claims_heard) == 1:
            return next(iter(claims_heard))
        if claims_heard:
            shown = ", ".join(f"{short_key(k)} (by its {' and '.join(src)})"
                              for k, src in list(claims_heard.items())[:8])
            raise LookupFailed(f"{len(claims_heard)} keys this host has heard of call themselves"
                               f" {echo(ref)}: {shown}; name the one you mean by its key",
                               "ambiguous_peer")
    intro = introduced_keys(c, ref)
    if introduced and len(intro) == 1:
        return intro[0]
    hint = ""
    if intro:
        keys = ", ".join(short_key(k) for k in intro[:4])
        hint = (f"; an introduction named {'a key' if len(intro) == 1 else 'keys'} {keys}"
                f" so: connect by key prefix (awp connect {short_key(intro[0])})")
    raise LookupFailed(f"unknown peer {echo(ref)}: not a name, alias or key prefix of a known peer"
                       f" (see awp peers){hint or address_hint(ref)}")


def _exact_name(c: sqlite3.Connection, key: str, ref: str) -> bool:
    """Whether ``key`` calls itself ``ref`` (cleaned, case aside): not a mere look-alike."""
    row = c.execute("SELECT name FROM peers WHERE key = ?", (key,)).fetchone()
    want = clean_name(ref).casefold()
    return bool(row and want and clean_name(row[0]).casefold() == want)


def user_named(c: sqlite3.Connection, key: str) -> bool:
    """Whether the user has named ``key`` before: an alias, a line sent, a connect to it."""
    return bool(
        c.execute("SELECT 1 FROM aliases WHERE key = ? LIMIT 1", (key,)).fetchone()
        or c.execute("SELECT 1 FROM log WHERE peer = ? AND dir = 'out' LIMIT 1",
                     (key,)).fetchone()
        or c.execute("SELECT 1 FROM addresses WHERE peer = ? AND source = 'connect' LIMIT 1",
                     (key,)).fetchone())


#: Introductions looked through for a name (the newest first).
INTRODUCED_SCAN = 500


def introduced_keys(c: sqlite3.Connection, ref: str) -> list[str]:
    """Keys that introductions named exactly ``ref`` (cleaned, case aside), newest first."""
    want = clean_name(ref).casefold()
    if not want:
        return []
    keys: list[str] = []
    for (line,) in c.execute("SELECT line FROM log WHERE t = 'introduce' AND dir = 'in'"
                             " ORDER BY seq DESC LIMIT ?", (INTRODUCED_SCAN,)):
        try:
            peer = json.loads(line).get("peer")
            if clean_name(peer.get("name")).casefold() == want:
                keys.append(normalize_key(peer.get("key")))
        except (ValueError, AttributeError, TypeError, KeyError_):
            continue
    return list(dict.fromkeys(keys))


def thread_peers(c: sqlite3.Connection, th: str) -> list[str]:
    """Every peer that used thread id ``th`` with us, the first to use it first.

    Thread ids are chosen by whoever opens a thread, so another peer can use
    the same id; each (peer, id) is its own thread.
    """
    keys = {r[0] for r in c.execute("SELECT peer FROM threads WHERE th = ?", (th,))}
    keys.update(r[0] for r in c.execute(
        "SELECT key FROM peers WHERE EXISTS"
        " (SELECT 1 FROM log WHERE log.peer = peers.key AND log.th = ?)", (th,)))

    def first_use(key: str) -> tuple[int, str]:
        seq = c.execute("SELECT min(seq) FROM log WHERE peer = ? AND th = ?",
                        (key, th)).fetchone()[0]
        return (seq if seq is not None else 1 << 62, key)

    return sorted(keys, key=first_use)


def thread_peer(c: sqlite3.Connection, th: str, peer: str | None = None,
                how: str = "", starts: bool = False) -> str:
    """The peer of thread ``th``; errors when unknown or used by several peers.

    ``how`` shows how to name the peer, with ``{peer}`` and ``{th}`` filled in;
    ``starts`` says the command can start a thread (``send``), so naming the
    peer is the way out of an unknown id.
    """
    if peer:
        return peer
    found = scope_thread(c, th, None, how)
    if found is None:
        raise unknown_thread(th, starts)
    return found


def unknown_thread(th: str, starts: bool = False) -> LookupFailed:
    """The one error for a thread id nobody used with us."""
    hint = "; name the peer to start it" if starts else ""
    return LookupFailed(f"unknown thread {echo(th)} (see awp threads){hint}", "unknown_thread")


def scope_thread(c: sqlite3.Connection, th: str, peer: str | None, how: str = "") -> str | None:
    """The one peer a bare thread id means here: ``None`` when nobody used it yet.

    Two peers using the same id is refused (``ambiguous_thread``) with the
    candidates and how to pick one, never merged into one conversation.
    """
    if peer:
        return peer
    keys = thread_peers(c, th)
    if len(keys) <= 1:
        return keys[0] if keys else None
    example = (how or "name the peer too, e.g. with --peer {peer}").format(
        peer=short_key(keys[0]), th=th)
    raise LookupFailed(f"thread {echo(th)} is used by {len(keys)} peers here, each its own"
                       f" conversation: {_candidates(c, keys)}; pick one: {example}",
                       "ambiguous_thread")


def thread_ref(c: sqlite3.Connection, key: str, th: str) -> str:
    """``th``, or ``th -p KEYPREFIX`` when another peer uses the same id (for hints)."""
    return th if len(thread_peers(c, th)) <= 1 else f"{th} -p {short_key(key)}"


def record(c: sqlite3.Connection, row: sqlite3.Row, labels: dict | None = None) -> dict:
    """A log row as the API shows it."""
    labels = labels if labels is not None else Labels(c)
    key = row["peer"]
    if not isinstance(labels, Labels) and key not in labels:
        labels[key] = peer_label(c, key)
    try:
        line = json.loads(row["line"])
    except ValueError:
        line = {}
    rec = {
        "seq": row["seq"], "dir": row["dir"], "t": row["t"], "id": row["id"], "th": row["th"],
        "re": row["re"], "peer": key, "peer_name": labels[key], "ts": row["ts"],
        "at": row["at"], "read": bool(row["read"]),
        "acked": out_acked(c, key, row["id"], row["t"], row["acked"]), "line": line,
    }
    if row["t"] == "msg" and '"k":"blob"' in row["line"]:
        from .blobs import files_of

        rec["files"] = files_of(c, key, row["dir"], line)
    if row["request"]:
        try:
            rec["request"] = json.loads(row["request"])
        except ValueError:
            pass
    return rec


def _filters(peer: str | None, th: str | None) -> tuple[str, list]:
    where, args = [], []
    if peer:
        where.append("peer = ?")
        args.append(peer)
    if th:
        where.append("th = ?")
        args.append(th)
    return (" AND ".join(where) or "1"), args


def read_log(c: sqlite3.Connection, *, peer: str | None = None, th: str | None = None,
             last: int = 50) -> list[dict]:
    """The last ``last`` records (both directions and notices), oldest first."""
    where, args = _filters(peer, th)
    rows = c.execute(
        f"SELECT * FROM log WHERE {where} ORDER BY seq DESC LIMIT ?", (*args, last)
    ).fetchall()
    labels = Labels(c)
    return [record(c, r, labels) for r in reversed(rows)]


def unread(c: sqlite3.Connection, *, peer: str | None = None, th: str | None = None,
           include_notices: bool = True, after: int = 0, limit: int = 10_000) -> list[dict]:
    where, args = _filters(peer, th)
    dirs = "('in', 'notice')" if include_notices else "('in')"
    rows = c.execute(
        f"SELECT * FROM log WHERE read = 0 AND dir IN {dirs} AND seq > ? AND {where}"
        " ORDER BY seq LIMIT ?", (after, *args, limit)
    ).fetchall()
    labels = Labels(c)
    return [record(c, r, labels) for r in rows]


def unread_newest(c: sqlite3.Connection, limit: int, max_bytes: int) -> tuple[list[dict], int]:
    """The newest unread records (inbound and notices) that fit, oldest first; and all unread.

    For the hooks, which show the newest first and leave the rest unread: at
    most ``limit`` records, and no more once their lines pass ``max_bytes``
    (the newest one always comes, whatever its size), so an answer stays
    small enough for the hook's time budget however much is waiting.
    """
    total = c.execute("SELECT count(*) FROM log WHERE read = 0 AND dir IN ('in', 'notice')"
                      ).fetchone()[0]
    rows = []
    size = 0
    for row in c.execute("SELECT * FROM log WHERE read = 0 AND dir IN ('in', 'notice')"
                         " ORDER BY seq DESC LIMIT ?", (max(1, limit),)):
        size += len(row["line"] or "")
        if rows and size > max_bytes:
            break
        rows.append(row)
    labels = Labels(c)
    return [record(c, r, labels) for r in reversed(rows)], total


def since(c: sqlite3.Connection, after: int, *, peer: str | None = None, th: str | None = None,
          all_dirs: bool = False, limit: int = 1000) -> list[dict]:
    """Records after ``after`` (for following streams)."""
    where, args = _filters(peer, th)
    dirs = "" if all_dirs else "AND dir IN ('in', 'notice')"
    rows = c.execute(
        f"SELECT * FROM log WHERE seq > ? {dirs} AND {where} ORDER BY seq LIMIT ?",
        (after, *args, limit),
    ).fetchall()
    labels = Labels(c)
    return [record(c, r, labels) for r in rows]


def max_seq(c: sqlite3.Connection) -> int:
    return c.execute("SELECT coalesce(max(seq), 0) FROM log").fetchone()[0]


def presence_origins(c: sqlite3.Connection) -> int:
    """How many origins' presence documents we hold."""
    return c.execute("SELECT count(*) FROM presence").fetchone()[0]


def their_state(c: sqlite3.Connection, peer: str, th: str) -> str | None:
    """The state the peer last set on thread ``th`` (``None``: no such thread)."""
    row = c.execute("SELECT theirs FROM threads WHERE peer = ? AND th = ?", (peer, th)).fetchone()
    return row[0] if row else None


def counts(c: sqlite3.Connection) -> dict:
    unread_n = c.execute("SELECT count(*) FROM log WHERE read = 0 AND dir = 'in'").fetchone()[0]
    notices = c.execute("SELECT count(*) FROM log WHERE read = 0 AND dir = 'notice'").fetchone()[0]
    queued = c.execute("SELECT count(*) FROM outbox WHERE t IN ('msg', 'state')").fetchone()[0]
    return {"unread": unread_n, "notices": notices, "queued": queued}


def unread_in_thread(c: sqlite3.Connection, peer: str, th: str) -> tuple[int, int]:
    """(count, newest arrival ms) of unread inbound lines in a thread."""
    row = c.execute(
        "SELECT count(*), coalesce(max(at), 0) FROM log WHERE read = 0 AND dir = 'in'"
        " AND peer = ? AND th = ?", (peer, th)).fetchone()
    return row[0], row[1]


TABLE_COLUMNS = ("th", "peer_name", "mine", "my_since", "theirs", "their_since", "unread",
                 "subject")


def thread_table(c: sqlite3.Connection, *, peer: str | None = None, open_only: bool = False,
                 limit: int = 10_000) -> list[tuple]:
    """What ``awp threads`` prints, as bare rows: a tenth of the JSON of thread_rows."""
    where, args = _thread_filter(peer, open_only)
    unread_by = _unread_by_thread(c)
    labels = Labels(c)
    out = []
    for key, th, subject, mine, my_since, theirs, their_since in c.execute(
            "SELECT peer, th, subject, mine, my_since, theirs, their_since FROM threads t"
            f" WHERE {where} ORDER BY updated DESC LIMIT ?", (*args, limit)):
        out.append((th, labels[key], mine, my_since, theirs, their_since,
                    unread_by.get((key, th), 0), subject))
    return out


def _thread_filter(peer: str | None, open_only: bool) -> tuple[str, list]:
    where, args = ["1"], []
    if peer:
        where.append("t.peer = ?")
        args.append(peer)
    if open_only:
        where.append("t.mine NOT IN ('done','failed','closed')"
                     " AND t.theirs NOT IN ('done','failed','closed')")
    return " AND ".join(where), args


def _unread_by_thread(c: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """Unread counts in one pass over the (small) partial index of unread rows."""
    return {(p, th): n for p, th, n in c.execute(
        "SELECT peer, th, count(*) FROM log WHERE read = 0 AND dir = 'in' GROUP BY peer, th")}


def thread_rows(c: sqlite3.Connection, *, peer: str | None = None, open_only: bool = False,
                limit: int = 10_000) -> list[dict]:
    where, args = _thread_filter(peer, open_only)
    rows = c.execute(
        f"SELECT t.* FROM threads t WHERE {where} ORDER BY t.updated DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    unread_by = _unread_by_thread(c)
    labels = Labels(c)
    out = []
    for r in rows:
        key = r["peer"]
        out.append({
            "th": r["th"], "thread": r["th"], "peer": key, "peer_name": labels[key],
            "subject": r["subject"], "mine": r["mine"], "my_note": r["my_note"],
            "my_since": r["my_since"], "theirs": r["theirs"], "their_note": r["their_note"],
            "their_since": r["their_since"], "created": r["created"], "updated": r["updated"],
            "unread": unread_by.get((key, r["th"]), 0), "private": bool(r["private"]),
            "open": r["mine"] not in FINAL and r["theirs"] not in FINAL,
        })
    return out


def peer_rows(c: sqlite3.Connection) -> list[dict]:
    clashes = name_clashes(c)
    conflicted = rotations.conflicts(c)
    out = []
    for r in c.execute("SELECT * FROM peers ORDER BY last_seen DESC, key").fetchall():
        key = r["key"]
        queued = c.execute("SELECT count(*) FROM outbox WHERE peer = ? AND t IN ('msg','state')",
                           (key,)).fetchone()[0]
        open_threads = c.execute(
            "SELECT count(*) FROM threads WHERE peer = ? AND mine NOT IN ('done','failed','closed')"
            " AND theirs NOT IN ('done','failed','closed')", (key,)).fetchone()[0]
        unread_n = c.execute("SELECT count(*) FROM log WHERE peer = ? AND dir = 'in' AND read = 0",
                             (key,)).fetchone()[0]
        aliases = [a[0] for a in c.execute("SELECT alias FROM aliases WHERE key = ?", (key,))]
        addrs = [dict(a) for a in c.execute(
            "SELECT addr, source, last_success, last_error, hs_ms FROM addresses WHERE peer = ?",
            (key,))]
        out.append({
            "key": key, "short": short_key(key), "name": clean_name(r["name"]),
            "lookalike": bool(r["name"]) and name_fold(r["name"]) in clashes, "about": r["about"],
            "aliases": aliases, "caps": json.loads(r["caps"] or "[]"),
            "shares": json.loads(r["shares"]) if r["shares"] else [],
            "first_seen": r["first_seen"], "last_seen": r["last_seen"],
            "parked": bool(r["parked"]), "bye_reason": r["bye_reason"],
            "last_error": r["last_error"], "queued": queued, "open_threads": open_threads,
            "unread": unread_n, "addresses": addrs,
            "rotated_from": rotations.history(c, key), "verified": r["verified"],
            "verified_at": r["verified_at"], "opcert": r["opcert"],
        })
        if key in conflicted:
            out[-1]["rotation_conflict"] = {k: conflicted[key][k] for k in ("n", "first")}
    _identity_warnings(out)
    return out


def _identity_warnings(rows: list[dict]) -> None:
    """``warning`` on a verified peer whose key seems to have changed without a record.

    A valid rotation keeps the mark (the row moved to the new key, and
    ``verified`` still names the key the user checked).  Anything else that
    looks like the same agent under another key is said loudly: another key
    answering at its address ("key mismatch"), or another key using its name.
    """
    by_name: dict[str, list[dict]] = {}
    for p in rows:
        if p["name"]:
            by_name.setdefault(name_fold(p["name"]), []).append(p)
    for p in rows:
        if p.get("rotation_conflict"):
            p["warning"] = ("ONE OF THIS PEER'S KEYS WAS ROTATED TO TWO DIFFERENT KEYS: both"
                            " records verify, so its keys signed two histories (see GET"
                            " /v1/rotation/conflicts)")
        if not p["verified"]:
            continue
        why = []
        for a in p["addresses"]:
            if str(a.get("last_error") or "").startswith("key mismatch"):
                why.append(f"{a['addr']} answered with another key ({a['last_error']})")
        for other in by_name.get(name_fold(p["name"]), []) if p["name"] else []:
            if other is not p and other["key"] != p["key"] and not other["verified"]:
                why.append(f"{other['key']} also calls itself {p['name']!r}, with no rotation"
                           " record from the verified key")
        if why:
            p["warning"] = ("VERIFIED PEER'S KEY MAY HAVE CHANGED WITHOUT A VALID ROTATION: "
                            + "; ".join(why))
