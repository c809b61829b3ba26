"""Board scenarios in which the runner is the topic's owner, and a dishonest one.

A host must not take the owner's word for more than the owner may say: a
stamp orders a record but never vouches for its author's signature, two
signed statements that cannot both be true are evidence worth passing on,
and a head that stops coming (or an old one handed over again) must not
leave a subscriber believing a frozen view.  To check this the runner owns a
fresh topic each scenario, and ``--owner-run CMD`` makes the peer subscribe
to it (``{topic}`` in CMD is the topic, e.g. ``awp subscribe {topic}``).  A
second party, subscribed through the peer, sees what the peer relays.
"""

from __future__ import annotations

import shlex
import subprocess
import time

from ..wire.board import (
    Record,
    check_head,
    make_head,
    make_post,
    make_stamp,
    parse_unverified,
)
from ..wire.canonical import compact_json
from ..wire.keys import Identity
from ..wire.timefmt import now_ms
from .board_scenarios import (
    DAY_MS,
    QUIET,
    _await_doc,
    _await_record,
    _board_session,
    _gather,
    _hashes_in,
    _lists,
    _own_topic,
    _posts,
    _sub,
)
from .conn import Fail, Skip
from .session import Ctx, Scenario, Session

HEAD_EVERY_MS = 300  # the runner promises a head this often, then keeps silent
SUBSCRIBE_WAIT = 10.0  # seconds the --owner-run command may take to make the peer subscribe


class _Owned:
    """A topic of the runner's, that the peer subscribed to, with a second party reading it."""

    def __init__(self, ctx: Ctx) -> None:
        self.a: Session = _board_session(ctx)
        if not ctx.owner_run:
            raise Skip("needs --owner-run CMD: a command that makes the peer subscribe to"
                       " {topic}, a topic the runner owns")
        self.ctx = ctx
        self.doc: Record = _own_topic(ctx.identity)
        self.topic = self.doc.topic
        cmd = ctx.owner_run.replace("{topic}", shlex.quote(self.topic))
        try:
            self.proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            raise Fail(f"--owner-run could not start: {e}") from None
        wait = min(ctx.deadline, time.monotonic() + SUBSCRIBE_WAIT)
        self.a.conn.expect(lambda x: _lists(x, self.topic), wait,
                           f"a board-sub listing our topic after --owner-run ({cmd})")
        self.a.conn.send({"t": "board-topic", "hops": 0, "doc": self.doc.doc}, ctx.deadline)
        self.reader = Identity.generate()
        self.b: Session = ctx.second_session(self.reader)
        _sub(ctx, self.b.conn, [self.topic])
        _await_doc(ctx, self.b.conn, self.topic, " (to the second party)")

    def post(self, author: Identity, text: str, ts: int) -> Record:
        return make_post(author, self.topic, [{"k": "text", "text": text}], ts)

    def stamp(self, rec: Record, seq: int, ts: int) -> Record:
        return make_stamp(self.ctx.identity, self.topic, rec.hash, seq, ts)

    def send(self, recs: list[Record]) -> None:
        _posts(self.ctx, self.a.conn, self.topic, [r.doc for r in recs])

    def head(self, ts: int) -> dict:
        """A head saying we hold nothing (the scenarios' records are all stamped: a
        peer compares the owner's own records with the ranges, and holds none)."""
        return make_head(self.ctx.identity, self.topic, ts, 1, ts - 30 * DAY_MS, [], 0,
                         HEAD_EVERY_MS)

    def done(self) -> None:
        _sub(self.ctx, self.b.conn, [], drop=(self.topic,))
        try:
            self.proc.wait(max(0.1, self.ctx.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()


def s_owner_forged_author(ctx: Ctx) -> str:
    o = _Owned(ctx)
    t0 = now_ms() - 2000
    # a post "by" the second party: its key as author, a signature that is not its own
    real = o.post(Identity.generate(), "conformance: the owner forging an author", t0)
    forged = parse_unverified(compact_json(dict(real.doc, author=o.reader.key)))
    honest = o.post(Identity.generate(), "conformance: an honest author", t0 + 1)
    o.send([o.stamp(forged, 1, t0 + 10), forged, o.stamp(honest, 2, t0 + 11), honest])
    _await_record(ctx, o.b.conn, o.topic, honest, "the honest, stamped post")
    [lines_b] = _gather([o.b.conn], QUIET, ctx.deadline)
    for line in lines_b:
        if line.get("t") == "board-posts" and forged.hash in _hashes_in(line):
            raise Fail("the peer relayed a post whose author's signature does not verify,"
                       " because the owner stamped it: a stamp orders a record, it never"
                       " vouches for its author")
    o.done()
    return "a post the owner stamped in another author's name was refused"


def s_owner_equivocates(ctx: Ctx) -> str:
    o = _Owned(ctx)
    t0 = now_ms() - 2000
    p1 = o.post(Identity.generate(), "conformance: first under seq 1", t0)
    p2 = o.post(Identity.generate(), "conformance: second under seq 1", t0 + 1)
    o.send([o.stamp(p1, 1, t0 + 10), p1])
    _await_record(ctx, o.b.conn, o.topic, p1, "the first record stamped seq 1")
    st2 = o.stamp(p2, 1, t0 + 11)
    o.send([st2, p2])
    line = _await_record(ctx, o.b.conn, o.topic, p2, "a second record stamped with the same"
                         " seq (the evidence must travel, so every host can see it)")
    if st2.raw.encode() not in o.b.conn.raw_of(line):
        raise Fail("the second record came without the owner's second stamp for seq 1 beside"
                   " it: both signed statements are the evidence")
    o.done()
    return "both records stamped seq 1 were kept and passed on with their stamps"


def s_owner_heads(ctx: Ctx) -> str:
    o = _Owned(ctx)
    now = now_ms()
    new, old = o.head(now), o.head(now - 5000)
    o.a.conn.send({"t": "board-head", "hops": 0, "doc": new}, ctx.deadline)
    t_head = time.monotonic()  # our newest head: silence counts from here
    o.b.conn.expect(lambda x: x.get("t") == "board-head" and isinstance(x.get("doc"), dict)
                    and x["doc"].get("sig") == new["sig"], ctx.deadline,
                    "our head relayed to the second party")
    _gather([o.a.conn], QUIET, ctx.deadline)  # what the subscription set going has come
    o.a.conn.send({"t": "board-head", "hops": 0, "doc": old}, ctx.deadline)
    # then silence: past a few promised heads' worth the peer must ask its peers again
    o.a.conn.expect(lambda x: _lists(x, o.topic), ctx.deadline,
                    f"a board-sub listing our topic again once our heads stopped (we promised"
                    f" one every {HEAD_EVERY_MS} ms in the head's every)")
    asked = time.monotonic() - t_head
    if asked < HEAD_EVERY_MS / 1000:
        raise Fail(f"the peer asked again {asked:.2f}s after our newest head, before one"
                   " promised head was due: that is not staleness")
    [lines_b] = _gather([o.b.conn], QUIET, ctx.deadline)
    for line in [*o.b.conn.received, *lines_b]:
        doc = line.get("doc") if line.get("t") == "board-head" else None
        if isinstance(doc, dict) and doc.get("sig") == old["sig"]:
            raise Fail("the peer relayed an older head after a newer one: a replayed head"
                       " must be ignored")
    check_head(new)
    o.done()
    return f"an old head ignored; stale after {asked:.1f}s of silence, asked again"


OWNER_SCENARIOS: list[Scenario] = [
    Scenario("board-owner-forged-author", "with --owner-run: a post the owner stamped in"
             " another author's name, with a signature not theirs, is not relayed (cap"
             " board)", s_owner_forged_author, own_connection=True),
    Scenario("board-owner-equivocates", "with --owner-run: two records the owner stamped"
             " with one seq are both kept and passed on beside their stamps, the evidence"
             " (cap board)", s_owner_equivocates, own_connection=True),
    Scenario("board-owner-heads", "with --owner-run: an older head after a newer one is not"
             " relayed; once the owner's promised heads stop, the peer asks its peers again"
             " (cap board)", s_owner_heads, own_connection=True),
]
