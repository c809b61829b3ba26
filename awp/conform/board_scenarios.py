"""The board's conformance scenarios (SPEC.md section 14), for peers that list cap ``board``.

The runner is a stranger to the peer: it holds no grant and the peer holds
none of its topics.  What a conforming peer must do is still checkable from
there:

* ``board-unknown-topic``: a subscription, a digest, a want, a claim (plain,
  and carried with a signed ``ask`` as hosts pass claims on towards the
  owner) and a signed head for a topic the peer does not hold draw nothing
  about that topic (no document, digest, head or records, no lease: only
  the owner arbitrates) and no err.
* ``board-malformed``: malformed board lines are dropped silently: no err, no
  close, the connection stays usable; among them claims with forged or
  mismatched asks, heads not signed by the topic's owner and ``board-none``
  lines that are not a topic (or not the sender's).
* ``board-unsubscribed``: records of a topic the peer does not subscribe to are
  neither relayed to a second party that does subscribe nor served on a want.
* ``board-sync`` (with ``--board-topic``, a topic the peer holds and lets
  anyone read): our ``board-sub`` draws the topic document before any digest,
  the digest exchange runs by the smaller-key rule and converges: an ``ask``
  over the whole range is answered with exactly the hashes we received.
* ``board-relay`` (with ``--board-topic``): a post from us reaches a second
  party once, byte for byte, with ``hops`` + 1 and never comes back to us; a
  future-dated and a badly signed record are not relayed; when the topic is
  not open to post, our post is not relayed at all.  A peer that is not the
  topic's owner relays no record of ours (another author's record needs the
  owner's stamp).
* ``board-stamp`` (with ``--board-topic`` owned by the peer): our post in a
  ``board-submit`` comes back stamped: a ``stamp`` signed by the owner,
  naming our post, with a positive ``seq``, just before the post in a
  ``board-posts`` line; offering it again draws the same stamp (a record is
  stamped once).  When the topic is not open to post, the answer is a
  ``board-refused`` signed by the owner, final.

All waits are bounded by the scenario's deadline; the "nothing came" checks
watch for a fixed second (as ``grant`` does) on top of a ping round trip.

Why one module: it is one table, SPEC.md section 14 as checks a stranger
can run, read side by side with the spec; the scenarios share their probes
(gathering lines, the digest exchange of a replica of our own) and nothing
else uses them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..board import sync
from ..wire.board import (
    FUTURE_MS,
    BoardError,
    Policy,
    Record,
    check_policy,
    check_record,
    check_refusal,
    make_ask,
    make_delete,
    make_head,
    make_post,
    make_topic,
    record_hash,
)
from ..wire.canonical import canonical_bytes, compact_json
from ..wire.keys import Identity
from ..wire.timefmt import format_ts, now_ms
from .conn import Fail, PeerConn, Skip, describe, is_bad
from .session import Ctx, Scenario, Session, _ping

QUIET = 1.0  # seconds of watching for lines that must not come
SETTLE = 0.5  # seconds without board traffic after which an exchange has gone quiet
DAY_MS = 86_400_000
PROBE_CHUNK = 2000  # our hashes per ask range of the convergence probe (a list stays < 4,096)
RECORD_LINES = ("board-topic", "board-posts", "board-digest", "board-want")


def _board_session(ctx: Ctx) -> Session:
    s = ctx.session()
    if "board" not in s.caps:
        raise Skip("the peer does not list cap board")
    return s


def _need_topic(ctx: Ctx) -> str:
    if not ctx.board_topic:
        raise Skip("needs --board-topic: a topic the peer holds and lets anyone read")
    return ctx.board_topic


def _name() -> str:
    alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
    return "conform-" + "".join(alphabet[b % 32] for b in os.urandom(8))


def _own_topic(identity: Identity) -> Record:
    """A fresh open topic of the runner's own, which the peer has never seen."""
    return make_topic(identity, _name(), 1, now_ms(), title="awp conform", read="open",
                      post="open")


def _needing_post(identity: Identity, topic: str, text: str, needs: object) -> dict:
    """A post whose ``needs`` (the market's field) is ``needs``, signed whatever its shape."""
    body = {k: v for k, v in _text_post(identity, topic, text).doc.items() if k != "sig"}
    body["needs"] = needs
    body["sig"] = identity.sign(canonical_bytes(body))
    return body


def _text_post(identity: Identity, topic: str, text: str, ts_ms: int | None = None) -> Record:
    return make_post(identity, topic, [{"k": "text", "text": text}],
                     now_ms() if ts_ms is None else ts_ms)


def _sub(ctx: Ctx, conn: PeerConn, topics: list[str], drop: tuple[str, ...] = ()) -> None:
    conn.board_subs_sent += 1
    conn.send({"t": "board-sub", "topics": [{"topic": t} for t in topics], "drop": list(drop)},
              ctx.deadline)


def _posts(ctx: Ctx, conn: PeerConn, topic: str, recs: list[dict], hops: int = 0) -> None:
    conn.send({"t": "board-posts", "topic": topic, "hops": hops, "recs": recs}, ctx.deadline)


def _about(line: dict, topic: str) -> bool:
    """Whether a line from the peer carries something of ``topic``."""
    t = line.get("t")
    if t == "board-topic":
        doc = line.get("doc")
        return isinstance(doc, dict) and doc.get("topic") == topic
    return t in RECORD_LINES and line.get("topic") == topic


def _hashes_in(line: dict) -> list[str]:
    """The hashes of the well-formed records a board-posts line carries."""
    out = []
    recs = line.get("recs")
    for doc in recs if isinstance(recs, list) else []:
        try:
            out.append(check_record(compact_json(doc)).hash)
        except (BoardError, TypeError, ValueError):
            continue
    return out


def _gather(conns: list[PeerConn], seconds: float, deadline: float) -> list[list[dict]]:
    """Every line each connection receives within ``seconds`` (bounded by
    ``deadline``), reading them in turns so that none of them stalls."""
    until = min(deadline, time.monotonic() + seconds)
    out: list[list[dict]] = [[] for _ in conns]
    while True:
        last_round = time.monotonic() >= until
        for i, c in enumerate(conns):
            while not c.eof:
                try:
                    line = c.next_line(time.monotonic() + (0.002 if last_round else 0.02))
                except TimeoutError:
                    break
                if line is None:
                    break
                out[i].append(line)
        if last_round:
            return out


def _no_err(lines: list[dict], who: str = "") -> None:
    for line in lines:
        if is_bad(line):
            raise Fail(f"expected no err{who}, got {describe(line, full=True)}")


def _await_doc(ctx: Ctx, conn: PeerConn, topic: str, who: str = "") -> tuple[Record, Policy]:
    """Read until the peer sends ``topic``'s document (after our board-sub)."""

    def early_digest(x: dict) -> bool:
        if x.get("t") == "board-digest" and x.get("topic") == topic:
            raise Fail(f"the peer sent a board-digest for {topic}{who} before its board-topic"
                       " (the document goes first, before any digest)")
        return is_bad(x)

    line = conn.expect(lambda x: x.get("t") == "board-topic" and _about(x, topic), ctx.deadline,
                       f"board-topic for {topic}{who} after our board-sub (does the peer hold"
                       " the topic, and may anyone read it?)", reject=early_digest)
    try:
        rec = check_record(compact_json(line.get("doc")))
        if rec.kind != "topic":
            raise BoardError("not a topic document")
        return rec, check_policy(rec.doc)
    except (BoardError, TypeError, ValueError) as e:
        raise Fail(f"the board-topic for {topic} is not a valid topic document ({e})") from None


def _lists(line: dict, topic: str) -> bool:
    """Whether a peer's board-sub line subscribes to ``topic``."""
    topics = line.get("topics")
    return line.get("t") == "board-sub" and isinstance(topics, list) and any(
        isinstance(e, dict) and e.get("topic") == topic for e in topics)


# -- board-unknown-topic ---------------------------------------------------------------------


def s_board_unknown_topic(ctx: Ctx) -> str:
    s = _board_session(ctx)
    topic = _own_topic(ctx.identity).topic  # never published: the peer cannot hold it
    now = now_ms()
    stranger_hashes = [os.urandom(16).hex() for _ in range(3)]
    _sub(ctx, s.conn, [topic])
    s.conn.send({"t": "board-digest", "topic": topic, "floor": now - DAY_MS, "ranges": [
        {"lo": now - DAY_MS, "hi": now - 1000, "n": 3, "fp": os.urandom(12).hex()},
        {"lo": now - 1000, "hi": now, "ids": stranger_hashes[:2]},
        {"lo": now, "hi": now + FUTURE_MS, "ask": True}]}, ctx.deadline)
    s.conn.send({"t": "board-want", "topic": topic, "ids": stranger_hashes[2:]}, ctx.deadline)
    s.conn.send({"t": "board-claim", "topic": topic, "op": "claim",
                 "req": "conform-" + os.urandom(4).hex()}, ctx.deadline)
    req = "conform-" + os.urandom(4).hex()
    s.conn.send({"t": "board-claim", "topic": topic, "op": "claim", "req": req, "hops": 0,
                 "ask": make_ask(ctx.identity, topic, "claim", now, req=req)}, ctx.deadline)
    s.conn.send({"t": "board-head", "hops": 0, "doc": make_head(
        ctx.identity, topic, now, 1, now - DAY_MS, [])}, ctx.deadline)
    lines = _gather([s.conn], QUIET, ctx.deadline)[0]
    notes = []

    def judge(x: dict) -> bool:
        if x.get("t") == "board-lease" and x.get("topic") == topic:
            if "doc" in x:
                raise Fail("the peer answered a claim on a topic it does not own with a lease"
                           " (only the owner arbitrates)")
            notes.append(f"answered the claim with error {x.get('error')!r}")
            return False
        if _about(x, topic):
            raise Fail(f"the peer sent {x.get('t')} for a topic it does not hold: "
                       + describe(x, full=True))
        return is_bad(x)

    for line in lines:
        if judge(line):
            raise Fail(f"expected nothing about the unknown topic, got {describe(line, full=True)}")
    _ping(ctx, s.conn, reject=judge)
    _sub(ctx, s.conn, [], drop=(topic,))
    return "note: " + "; ".join(notes) if notes else ""


# -- board-malformed -------------------------------------------------------------------------


def _malformed(ctx: Ctx, topic: str) -> list[dict]:
    """Board lines whose envelope is fine and whose body is not."""
    me = ctx.identity
    ts = format_ts(now_ms())
    signed = _text_post(me, topic, "conformance: this record's signature will not verify").doc
    forged = dict(signed, parts=[{"k": "text", "text": "conformance: changed after signing"}])
    no_sig = {k: v for k, v in signed.items() if k != "sig"}
    doc = {"k": "topic", "topic": topic, "seq": 1, "ts": ts, "read": "open", "sig": "A" * 86}
    ask = make_ask(me, topic, "renew", now_ms(), lease="x.1")
    head = make_head(me, topic, now_ms(), 1, now_ms() - DAY_MS, [])
    stranger_head = dict(make_head(Identity.generate(), topic, now_ms(), 1, 0, []),
                         author=topic.split("/", 1)[0])
    return [
        {"t": "board-sub", "topics": "everything"},
        {"t": "board-sub", "topics": [{"topic": "not-a-topic"}, 7, {"topic": topic[:-1] + "/"}],
         "drop": 5},
        {"t": "board-topic", "hops": 0, "doc": "not an object"},
        {"t": "board-topic", "hops": "zero", "doc": doc},
        {"t": "board-topic", "hops": 0, "doc": doc},  # signature does not verify
        {"t": "board-digest", "topic": topic, "floor": "yesterday", "ranges": {"lo": 1}},
        {"t": "board-digest", "topic": "ed25519:short/x", "floor": 0, "ranges": []},
        {"t": "board-digest", "topic": topic, "floor": 0, "ranges": [
            {"lo": 5, "hi": 1, "n": -1, "fp": "zz"}, "range", {"lo": 0, "hi": 10 ** 30},
            {"lo": 0, "hi": 10, "ids": "all"}, {"lo": 0, "hi": 10, "ask": "yes"}]},
        {"t": "board-want", "topic": topic, "ids": "all"},
        {"t": "board-want", "topic": topic, "ids": ["NOT-A-HASH", 5, None]},
        {"t": "board-want", "ids": [os.urandom(16).hex()]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": "records"},
        {"t": "board-posts", "topic": topic, "hops": -1, "recs": [{"k": "post"}, "text", 5]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": [forged, no_sig]},
        {"t": "board-posts", "topic": topic, "hops": 99, "recs": [forged]},
        {"t": "board-claim", "topic": topic, "op": "steal"},
        {"t": "board-claim", "topic": topic, "op": "complete"},
        {"t": "board-lease", "topic": topic, "re": "not-a-request-of-ours", "doc": "granted"},
        {"t": "board-lease", "topic": topic, "re": ctx.ids.next(), "error": ["not", "text"]},
        {"t": "board-claim", "topic": topic, "op": "renew", "lease": "x.1",
         "ask": dict(ask, lease="changed.after-signing")},
        {"t": "board-claim", "topic": topic, "op": "complete", "lease": "x.1", "ask": ask},
        {"t": "board-claim", "topic": topic, "op": "fail", "lease": "x.1", "ask": "me"},
        {"t": "board-claim", "topic": topic, "op": "renew", "lease": "x.1", "hops": 99,
         "ask": ask},
        {"t": "board-head", "hops": 0, "doc": "a head"},
        {"t": "board-head", "hops": "none", "doc": head},
        {"t": "board-head", "hops": 0, "doc": dict(head, doc=99)},  # changed after signing
        {"t": "board-head", "hops": 0, "doc": stranger_head},  # not the owner's signature
        {"t": "board-none", "topic": ["not", "a", "topic"]},
        {"t": "board-none"},
        {"t": "board-none", "topic": topic},  # not one the peer waits on from us: ignored
    ]


def s_board_malformed(ctx: Ctx) -> str:
    s = _board_session(ctx)
    topic = ctx.board_topic or _own_topic(ctx.identity).topic
    for line in _malformed(ctx, topic):
        s.conn.send(line, ctx.deadline)
    lines = _gather([s.conn], QUIET, ctx.deadline)[0]
    _no_err(lines, " for malformed board lines (they are dropped silently)")
    if s.conn.eof:
        raise Fail("the peer closed the connection after malformed board lines")
    _ping(ctx, s.conn)
    return ""


# -- board-unsubscribed ----------------------------------------------------------------------


def s_board_unsubscribed(ctx: Ctx) -> str:
    a = _board_session(ctx)
    b = ctx.second_session(Identity.generate())
    doc = _own_topic(ctx.identity)
    topic = doc.topic
    post = _text_post(ctx.identity, topic, "conformance: a topic the peer does not subscribe to")
    _sub(ctx, b.conn, [topic])
    _sub(ctx, a.conn, [topic])
    a.conn.send({"t": "board-topic", "hops": 0, "doc": doc.doc}, ctx.deadline)
    _posts(ctx, a.conn, topic, [post.doc])
    got_a, got_b = _gather([a.conn, b.conn], QUIET, ctx.deadline)
    a.conn.send({"t": "board-want", "topic": topic, "ids": [post.hash]}, ctx.deadline)
    more_a, more_b = _gather([a.conn, b.conn], QUIET, ctx.deadline)
    for who, lines in ((" (to us)", got_a + more_a), (" (to the second party)", got_b + more_b)):
        _no_err(lines, who)
        for line in lines:
            if _about(line, topic):
                where = "relayed it to another subscriber" if who.endswith("party)") else \
                    "sent it back to us"
                raise Fail(f"the peer does not subscribe to {topic} yet {where}: "
                           + describe(line, full=True))
    _ping(ctx, a.conn)
    _ping(ctx, b.conn)
    return ""


# -- board-sync ------------------------------------------------------------------------------


@dataclass
class _Replica:
    """The runner's copy of one topic during an exchange."""

    topic: str
    policy: Policy
    holdings: sync.Holdings = field(default_factory=sync.Holdings)
    wanted: set[str] = field(default_factory=set)
    bytes_in: int = 0
    digests_in: int = 0
    posts_in: int = 0
    stamps: dict[str, int] = field(default_factory=dict)  # hash -> ts of what we hold
    opened: bool = False  # an opening digest went either way
    last: float = 0.0  # monotonic time of the last board line about the topic

    @property
    def floor(self) -> int:
        return now_ms() - self.policy.keep_days * DAY_MS

    def take(self, line: dict) -> None:
        recs = line.get("recs")
        for doc in recs if isinstance(recs, list) else []:
            try:
                rec = check_record(compact_json(doc))
            except (BoardError, TypeError, ValueError):
                continue  # the schema check reports it
            if rec.topic == self.topic:
                self.holdings.add(rec.ts, rec.hash)
                self.stamps[rec.hash] = rec.ts
                self.wanted.discard(rec.hash)
                self.bytes_in += rec.size
                self.posts_in += 1


def _digest(ctx: Ctx, conn: PeerConn, topic: str, body: dict) -> dict:
    sent, _ = conn.send({"t": "board-digest", "topic": topic, **body}, ctx.deadline)
    return sent


def _answer_digest(ctx: Ctx, conn: PeerConn, rep: _Replica, line: dict) -> None:
    """Play our side of the exchange for one digest from the peer.  We hold only
    what the peer sent us, so there is nothing of ours to push."""
    rep.digests_in += 1
    step = sync.respond(rep.holdings, rep.floor, line)
    if step.reply is not None:
        _digest(ctx, conn, rep.topic, step.reply)
    fresh = [h for h in step.want if h not in rep.wanted]
    if fresh:
        rep.wanted.update(fresh)
        conn.send({"t": "board-want", "topic": rep.topic, "ids": fresh[:sync.MAX_IDS]},
                  ctx.deadline)


def _handle(ctx: Ctx, s: Session, rep: _Replica, line: dict | None, what: str,
            listed: list[bool]) -> None:
    """One line from the peer during an exchange: errs fail, records are
    taken, digests answered."""
    if line is None:
        raise Fail(f"expected {what}, but the peer closed the connection")
    if is_bad(line):
        raise Fail(f"expected {what}, got {describe(line, full=True)}")
    listed[0] = listed[0] or _lists(line, rep.topic)
    if not _about(line, rep.topic):
        return
    rep.last = time.monotonic()
    if line.get("t") == "board-digest":
        rep.opened = True
        _answer_digest(ctx, s.conn, rep, line)
    elif line.get("t") == "board-posts":
        rep.take(line)


def _pump(ctx: Ctx, s: Session, rep: _Replica, done: Callable[[], bool], what: str, *,
          listed: list[bool], catch: Callable[[dict], bool] | None = None) -> None:
    """Read the peer's lines, playing our side of the exchange, until ``done()``.
    ``catch`` sees each line first and returns True for one it consumed (the
    answer to a probe)."""
    start = time.monotonic()
    while not done():
        try:
            line = s.conn.next_line(ctx.deadline)
        except TimeoutError:
            raise Fail(f"expected {what} within {time.monotonic() - start:.1f}s") from None
        if line is not None and catch is not None and catch(line):
            continue
        _handle(ctx, s, rep, line, what, listed)


def _probe_ranges(rep: _Replica, hi: int) -> list[dict]:
    """``ask`` ranges over everything from our floor, each holding at most
    :data:`PROBE_CHUNK` of our records (the answer lists stay within 4,096)."""
    lo = rep.floor
    bounds = [lo]
    keys = sorted(ts for ts in rep.stamps.values() if ts >= lo)
    for i in range(PROBE_CHUNK, len(keys), PROBE_CHUNK):
        if keys[i] > bounds[-1]:
            bounds.append(keys[i])
    bounds.append(hi)
    return [{"lo": a, "hi": b, "ask": True} for a, b in zip(bounds, bounds[1:], strict=False)]


def _exchange(ctx: Ctx, s: Session, rep: _Replica, listed: list[bool], *, later: bool) -> None:
    """Run the digest exchange until it goes quiet: opened, no wants open, and
    no board traffic about the topic for :data:`SETTLE` seconds.

    Our first board-sub on a connection is the connect-time exchange, opened
    by the smaller key; a ``later`` one is answered with a digest by the peer.
    """
    rep.opened = not later and ctx.identity.key < s.key
    if rep.opened:
        _digest(ctx, s.conn, rep.topic,
                sync.opening(rep.holdings, rep.floor, now_ms(), FUTURE_MS))
    rep.last = time.monotonic()
    what = "the digest exchange to go on"
    while not (rep.opened and not rep.wanted and time.monotonic() - rep.last >= SETTLE):
        if time.monotonic() >= ctx.deadline:
            if not rep.opened:
                why = ("it receives a later board-sub on the connection, so it opens" if later
                       else "its key is the smaller, so it opens the exchange")
                raise Fail(f"expected the peer's opening board-digest for {rep.topic} ({why})")
            raise Fail(f"the exchange did not settle: {len(rep.wanted)} wanted record(s) of"
                       f" {rep.topic} never came")
        try:
            line = s.conn.next_line(min(ctx.deadline, time.monotonic() + 0.05))
        except TimeoutError:
            continue
        _handle(ctx, s, rep, line, what, listed)


def _probe(ctx: Ctx, s: Session, rep: _Replica, listed: list[bool]) -> int:
    """Ask for every hash the peer holds and compare with ours; returns the
    number of probes it took.  Hashes the answer names that we lack are
    fetched and the probe repeated (live posts may still be arriving)."""
    for attempt in range(1, 6):
        hi = now_ms() + FUTURE_MS + 1 + int.from_bytes(os.urandom(2), "big") % 997
        _digest(ctx, s.conn, rep.topic, {"floor": rep.floor, "ranges": _probe_ranges(rep, hi)})
        got: list[dict] = []

        def catch(x: dict, hi: int = hi, got: list[dict] = got) -> bool:
            rs = x.get("ranges")
            if (x.get("t") == "board-digest" and x.get("topic") == rep.topic
                    and isinstance(rs, list) and rs and isinstance(rs[-1], dict)
                    and rs[-1].get("hi") == hi and "ids" in rs[-1]):
                got.append(x)
                return True
            return False

        _pump(ctx, s, rep, lambda got=got: bool(got), f"an ids range answering our ask ranges for"
              f" {rep.topic} (an ask range is answered with the hashes held there)",
              listed=listed, catch=catch)
        theirs: set[str] = set()
        mine: set[str] = set()
        for r in got[0]["ranges"]:
            if not isinstance(r, dict) or not isinstance(r.get("ids"), list):
                continue
            lo, rhi = r.get("lo"), r.get("hi")
            if isinstance(lo, int) and isinstance(rhi, int):
                theirs.update(i for i in r["ids"] if isinstance(i, str))
                mine.update(rep.holdings.ids(lo, rhi))
        missing = theirs - mine
        if not missing and not mine - theirs:
            return attempt
        if missing:
            rep.wanted.update(missing)
            s.conn.send({"t": "board-want", "topic": rep.topic,
                         "ids": sorted(missing)[:sync.MAX_IDS]}, ctx.deadline)
            _pump(ctx, s, rep, lambda: not rep.wanted, f"the {len(missing)} record(s) of"
                  f" {rep.topic} we asked for in a board-want", listed=listed)
        elif attempt >= 3:
            raise Fail(f"the peer sent us {len(mine - theirs)} record(s) of {rep.topic} that"
                       " its answer to our ask does not list")
        else:
            time.sleep(min(SETTLE, max(0.0, ctx.deadline - time.monotonic())))
    raise Fail(f"after 5 probes our copy of {rep.topic} still differs from the peer's")


def _no_records(ctx: Ctx, conns: list[PeerConn], topic: str) -> None:
    """Neither records nor digests of ``topic`` come: we may not read it."""
    for lines in _gather(conns, QUIET, ctx.deadline):
        _no_err(lines)
        for line in lines:
            if line.get("t") in ("board-posts", "board-digest") and _about(line, topic):
                raise Fail(f"the peer sent {line['t']} for {topic} to a stranger, though the"
                           " topic is not open to read")


def s_board_sync(ctx: Ctx) -> str:
    s = _board_session(ctx)
    topic = _need_topic(ctx)
    listed = [any(_lists(x, topic) for x in s.conn.received)]
    later = s.conn.board_subs_sent > 0
    _sub(ctx, s.conn, [topic])
    _doc, policy = _await_doc(ctx, s.conn, topic)
    listed[0] = listed[0] or any(_lists(x, topic) for x in s.conn.received)
    if not policy.read_open:
        # The document goes to every subscriber; the records only to readers.
        _no_records(ctx, [s.conn], topic)
        _sub(ctx, s.conn, [], drop=(topic,))
        return ("note: the topic is not open to read: checked that its document comes and"
                " its records and digests do not")
    rep = _Replica(topic, policy)
    _exchange(ctx, s, rep, listed, later=later)
    probes = _probe(ctx, s, rep, listed)
    listed[0] = listed[0] or any(_lists(x, topic) for x in s.conn.received)
    _sub(ctx, s.conn, [], drop=(topic,))
    if not listed[0]:
        raise Fail(f"the peer never listed {topic} in a board-sub (a peer lists the topics it"
                   " subscribes to after its resume)")
    opener = "we" if rep.opened and not later and ctx.identity.key < s.key else "the peer"
    return (f"{len(rep.holdings)} record(s) ({rep.bytes_in} bytes) in, {rep.digests_in}"
            f" digest(s) from the peer; {opener} opened"
            + (" (a later board-sub)" if later else "") + "; converged"
            + (f" after {probes} probes" if probes > 1 else ""))


# -- board-relay -----------------------------------------------------------------------------


def _relay_checks(lines_a: list[dict], lines_b: list[dict], *, once: str,
                  never: dict[str, str]) -> None:
    """No errs; ``once`` not again at the second party; nothing of ``never`` anywhere;
    nothing of ours back to us."""
    _no_err(lines_a, " (to us)")
    _no_err(lines_b, " (to the second party)")
    for line in lines_b:
        if line.get("t") != "board-posts":
            continue
        for h in _hashes_in(line):
            if h == once:
                raise Fail("the peer relayed our post to the second party twice (a record"
                           " already held ends there)")
            if h in never:
                raise Fail(f"the peer relayed {never[h]} to the second party")
    for line in lines_a:
        if line.get("t") == "board-posts":
            for h in _hashes_in(line):
                if h == once or h in never:
                    raise Fail("the peer sent our own record back to us (never back to the"
                               " peer it came from)")


def _await_record(ctx: Ctx, conn: PeerConn, topic: str, rec: Record, what: str) -> dict:
    line = conn.expect(lambda x: x.get("t") == "board-posts" and x.get("topic") == topic
                       and rec.hash in _hashes_in(x), ctx.deadline,
                       f"{what} relayed to a second party subscribed to {topic}")
    if rec.raw.encode() not in conn.raw_of(line):
        raise Fail(f"{what} reached the second party re-encoded, not in its signer's exact"
                   " bytes (records are relayed byte for byte)")
    hops = line.get("hops")
    if hops != 1:
        raise Fail(f"{what} reached the second party with hops {hops!r}; we sent it with hops 0"
                   " and one relay adds 1")
    return line


def s_board_relay(ctx: Ctx) -> str:
    a = _board_session(ctx)
    topic = _need_topic(ctx)
    b = ctx.second_session(Identity.generate())
    _sub(ctx, a.conn, [topic])
    _sub(ctx, b.conn, [topic])
    _doc, policy = _await_doc(ctx, a.conn, topic, " (to us)")
    _await_doc(ctx, b.conn, topic, " (to the second party)")
    me = ctx.identity
    post = check_record(compact_json(_needing_post(
        me, topic, "conformance: a post relayed to another subscriber", ["conform", "linux"])))
    bad_needs = _needing_post(me, topic, "conformance: needs out of shape", ["Not A Tag"])
    future = _text_post(me, topic, "conformance: dated ten minutes ahead",
                        now_ms() + 2 * FUTURE_MS)
    signed = _text_post(me, topic, "conformance: signed, then changed").doc
    forged = dict(signed, parts=[{"k": "text", "text": "conformance: changed after signing"}])
    forged_hash = record_hash(forged)
    never = {future.hash: "a record dated 10 minutes ahead",
             forged_hash: "a record whose signature does not verify",
             record_hash(bad_needs): "a post whose needs are not a list of tags"}
    t0 = time.monotonic()
    _posts(ctx, a.conn, topic, [post.doc])
    if topic.split("/", 1)[0] != ctx.peer.get("key"):
        lines_a, lines_b = _gather([a.conn, b.conn], 2 * QUIET, ctx.deadline)
        _relay_checks(lines_a, lines_b, once="", never={
            post.hash: "another author's record without the topic owner's stamp"})
        _ping(ctx, b.conn)
        return ("note: the peer is not the topic's owner: checked that our unstamped post is"
                " not relayed")
    if not (policy.post_open and policy.read_open):
        lines_a, lines_b = _gather([a.conn, b.conn], 2 * QUIET, ctx.deadline)
        why = ("a stranger's post to a topic not open to post" if not policy.post_open
               else "a post to a stranger that may not read the topic")
        _relay_checks(lines_a, lines_b, once="", never={post.hash: why})
        _ping(ctx, b.conn)
        return ("note: the topic is not open to " + ("post" if not policy.post_open else "read")
                + ": checked only that our post is not relayed to the second party")
    _posts(ctx, a.conn, topic, [future.doc, forged, bad_needs])
    _posts(ctx, a.conn, topic, [post.doc])  # the same record again
    _await_record(ctx, b.conn, topic, post, "our post")
    took = time.monotonic() - t0
    lines_a, lines_b = _gather([a.conn, b.conn], QUIET, ctx.deadline)
    _relay_checks(lines_a, lines_b, once=post.hash, never=never)
    # Take the post back out of every view: a conformance run leaves the topic as it was.
    gone = make_delete(me, post, now_ms())
    _posts(ctx, a.conn, topic, [gone.doc])
    _await_record(ctx, b.conn, topic, gone, "our delete of the post")
    _sub(ctx, a.conn, [], drop=(topic,))
    _sub(ctx, b.conn, [], drop=(topic,))
    return f"relayed in {took * 1000:.0f} ms"


# -- board-stamp -----------------------------------------------------------------------------


def _submit(ctx: Ctx, conn: PeerConn, topic: str, recs: list[dict]) -> None:
    conn.send({"t": "board-submit", "topic": topic, "hops": 0, "recs": recs}, ctx.deadline)


def _await_stamp(ctx: Ctx, conn: PeerConn, topic: str, rec: Record, what: str) -> Record:
    """The owner's stamp of ``rec``, which must come just before it in a board-posts line."""
    line = conn.expect(lambda x: x.get("t") == "board-posts" and x.get("topic") == topic
                       and rec.hash in _hashes_in(x), ctx.deadline,
                       f"{what} back, stamped, after our board-submit")
    recs = line.get("recs") or []
    at = next(i for i, d in enumerate(recs)
              if isinstance(d, dict) and d.get("sig") == rec.doc["sig"])
    try:
        st = check_record(compact_json(recs[at - 1])) if at > 0 else None
    except (BoardError, TypeError, ValueError) as e:
        raise Fail(f"the stamp before {what} is not a valid record ({e})") from None
    if st is None or st.kind != "stamp" or st.of != rec.hash:
        raise Fail(f"{what} came back without the owner's stamp naming it just before it")
    return st


def s_board_stamp(ctx: Ctx) -> str:
    a = _board_session(ctx)
    topic = _need_topic(ctx)
    if topic.split("/", 1)[0] != ctx.peer.get("key"):
        raise Skip("the peer is not the --board-topic's owner: only the owner stamps")
    _sub(ctx, a.conn, [topic])
    _doc, policy = _await_doc(ctx, a.conn, topic, " (to us)")
    me = ctx.identity
    post = _text_post(me, topic, "conformance: a post for the owner to stamp")
    t0 = time.monotonic()
    _submit(ctx, a.conn, topic, [post.doc])
    if not policy.post_open:
        line = a.conn.expect(lambda x: x.get("t") == "board-refused", ctx.deadline,
                             "a board-refused for our post to a topic not open to post")
        try:
            doc = check_refusal(line.get("doc"))
        except BoardError as e:
            raise Fail(f"the board-refused is not the owner's signed refusal ({e})") from None
        if doc["of"] != post.hash or doc["later"]:
            raise Fail("the refusal names another record, or asks us to offer it again")
        return "note: the topic is not open to post: refused, signed by the owner"
    st = _await_stamp(ctx, a.conn, topic, post, "our post")
    took = time.monotonic() - t0
    seq = st.doc["seq"]
    _submit(ctx, a.conn, topic, [post.doc])  # offered again: the same stamp, no new seq
    again = _await_stamp(ctx, a.conn, topic, post, "our post offered again")
    if again.raw != st.raw:
        raise Fail(f"our post offered again was stamped anew (seq {again.doc['seq']} after"
                   f" {seq}): a record is stamped once")
    gone = make_delete(me, post, now_ms())  # leave the topic as it was
    _submit(ctx, a.conn, topic, [gone.doc])
    _await_stamp(ctx, a.conn, topic, gone, "our delete of the post")
    _sub(ctx, a.conn, [], drop=(topic,))
    return f"stamped as seq {seq} in {took * 1000:.0f} ms"


BOARD_SCENARIOS: list[Scenario] = [
    Scenario("board-unknown-topic", "board-sub, digest, want and claim for a topic the peer"
             " does not hold draw nothing about it and no err (cap board)",
             s_board_unknown_topic),
    Scenario("board-malformed", "malformed board lines are dropped silently: no err, no close,"
             " ping answered (cap board)", s_board_malformed),
    Scenario("board-unsubscribed", "records of a topic the peer does not subscribe to are"
             " neither relayed to a second party nor served (cap board)", s_board_unsubscribed,
             own_connection=True),
    Scenario("board-sync", "with --board-topic: board-sub draws the topic document, then a"
             " digest exchange converges (cap board)", s_board_sync),
    Scenario("board-relay", "with --board-topic: our post (with needs) reaches a second party"
             " once, byte for byte, hops + 1; bad, future and bad-needs records do not"
             " (cap board)", s_board_relay,
             own_connection=True),
    Scenario("board-stamp", "with --board-topic owned by the peer: our post in a board-submit"
             " comes back with the owner's stamp (a seq), once however often offered; a"
             " topic not open to post answers with a signed board-refused (cap board)",
             s_board_stamp, own_connection=True),
]
