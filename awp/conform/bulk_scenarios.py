"""Bulk scenario (cap ``bulk``): a file pushed on a side connection, checked piece by piece.

The runner, which offers no address to be dialed at, sends a msg naming a
small bulk file.  A peer that lists ``bulk`` cannot dial the runner, so it
must ask on the link (``bulk-dial``); the runner then dials it with ``"side":
"bulk-push"``, pushes, and answers its ``want`` first with a corrupted piece
(which the peer must ask for again) and then with the right bytes, after
which the peer must say ``done`` (SPEC.md section 11, "Bulk transfer").
"""

from __future__ import annotations

from ..wire import bulk as B
from ..wire.keys import Identity, auth_transcript, verify
from .conn import Fail, PeerConn, Skip, describe
from .session import Ctx, Scenario, _expect_ack, _is, handshake

DATA = b"awp bulk conformance: twenty-nine pieces of nothing\n"


def _side_handshake(ctx: Ctx, me: Identity, side: str) -> PeerConn:
    """Hello with ``side`` and auth, and no resume: a side connection."""
    conn = ctx.dial()
    hello = ctx.hello_line(identity=me)
    hello["caps"] = [*hello["caps"], B.CAP]
    hello["side"] = side
    _, my_raw = conn.send(hello, ctx.deadline)
    first = conn.expect(_is("hello"), ctx.deadline, "the peer's hello on the side connection",
                        reject=lambda x: x.get("t") != "hello")
    peer_raw = conn.raw_of(first)
    auth = conn.expect(_is("auth"), ctx.deadline, "the peer's auth on the side connection",
                       reject=lambda x: x.get("t") not in ("auth",))
    sig = auth.get("sig")
    if not (isinstance(sig, str) and verify(first.get("key", ""),
                                            auth_transcript(peer_raw, my_raw), sig)):
        raise Fail("the peer's auth on the side connection does not verify")
    conn.send({"t": "auth", "sig": me.sign(auth_transcript(my_raw, peer_raw))}, ctx.deadline)
    conn.side_control = True
    return conn


def s_bulk_push(ctx: Ctx) -> str:
    if ctx.listen_mode:
        raise Skip("needs connect mode (the runner dials the side connection)")
    me = Identity.generate()
    s = handshake(ctx, ctx.dial(), strict=False, identity=me, caps=[B.CAP])
    if B.CAP not in s.caps:
        raise Skip(f"the peer does not list cap {B.CAP}")
    piece = B.piece_size(len(DATA))
    desc = B.describe(len(DATA), piece, B.piece_hash(DATA))
    ref = "b_" + ctx.ids.next()
    msg = s.conn.envelope({"t": "msg", "th": "thr_bulkconf", "subject": "bulk conformance",
                           "parts": [{"k": "blob", "ref": ref, "name": "c.bin",
                                      "mime": "application/octet-stream", "size": len(DATA),
                                      "bulk": desc}]})
    s.conn.send(msg, ctx.deadline)
    _expect_ack(ctx, s.conn, msg, "msg naming a bulk file")
    ask = s.conn.expect(lambda x: x.get("t") == B.DIAL_LINE, ctx.deadline,
                        f"{B.DIAL_LINE} for {ref} (it cannot dial a runner with no address)",
                        reject=lambda x: x.get("t") == "err")
    if ask.get("ref") != ref:
        raise Fail(f"{B.DIAL_LINE} names {ask.get('ref')!r}, expected {ref!r}")
    side = _side_handshake(ctx, me, B.PUSH_SIDE)
    side.send({"t": "push", "ref": ref}, ctx.deadline)
    for attempt, data in (("first", bytes(b ^ 1 for b in DATA)), ("second", DATA)):
        want = side.expect(lambda x: x.get("t") in ("want", "err"), ctx.deadline,
                           f"want of piece 0 ({attempt} time)")
        if want.get("t") != "want" or want.get("ref") != ref or want.get("i") != 0:
            raise Fail(f"expected want ref {ref} i 0, got {describe(want)}")
        head = {"t": "piece", "ref": ref, "i": 0, "n": len(data)}
        side.send_raw(B.control_line(head) + data, ctx.deadline)
    done = side.expect(lambda x: x.get("t") in ("done", "want", "err"), ctx.deadline,
                       "done after the good piece")
    if done.get("t") != "done" or done.get("ref") != ref:
        raise Fail(f"expected done for {ref}, got {describe(done)}")
    side.close()
    s.conn.close()
    return "asked by bulk-dial, corrupt piece asked again, done after the good one"


BULK_SCENARIOS: list[Scenario] = [
    Scenario("bulk-push", "a bulk file from a runner it cannot dial: bulk-dial, a push side"
             " connection, a corrupt piece asked again, done (cap bulk)", s_bulk_push,
             own_connection=True),
]
