"""The WebSocket binding's own scenarios, run when the target is a ws:// or wss:// URL.

Every other scenario already runs over the binding when given such a URL
(the wire under :class:`~.conn.PeerConn` is then a :class:`~.wswire.WsWire`).
These check what only the binding has, so they are skipped for any other
target:

* ``ws-healthz``: a plain ``GET /healthz`` gets 200 (a platform's health check);
* ``ws-no-subprotocol``: an upgrade that offers no ``awp.v0`` is refused with
  a 4xx, never a 101: it is not an AWP connection;
* ``ws-other-request``: a ``POST`` gets 405 and a ``GET`` that is no upgrade 426;
* ``ws-frames``: lines are independent of frames: a hello in one-byte frames
  of one message, an auth in one-byte messages, a resume (and later a msg)
  in text frames, and three lines in two frames cut inside the third;
* ``ws-big-line``: a msg line of exactly 1 MiB is acked, sent in one binary
  frame and again in 256 KiB messages.

They open connections of their own, so listen mode skips them.
"""

from __future__ import annotations

from collections.abc import Callable

from wsproto.events import BytesMessage, Message, TextMessage

from ..wire.address import Address
from ..wire.canonical import compact_json
from ..wire.framing import MAX_LINE
from ..wire.wsnames import HEALTH_PATH, SUBPROTOCOL
from .conn import Fail, PeerConn, Skip, random_thread
from .session import Ctx, Scenario, _expect_ack, handshake, msg_of_size
from .wswire import (
    HttpAnswer,
    WsWire,
    http_exchange,
    target_of,
    upgrade_headers,
)


def _ws(ctx: Ctx) -> Address:
    addr = ctx.ws_target
    if addr is None:
        raise Skip("the target is not a ws:// or wss:// URL")
    return addr


def _wire(conn: PeerConn) -> WsWire:
    assert isinstance(conn.sock, WsWire)
    return conn.sock


def _ask(ctx: Ctx, addr: Address, method: str, target: str, what: str,
         headers: list[tuple[str, str]] | None = None) -> HttpAnswer:
    if ctx.tracer is not None:
        ctx.tracer(">", f"{method} {target} HTTP/1.1 ({what})")
    ans = http_exchange(addr, method, target, ctx.deadline, headers=headers,
                        ca_file=ctx.ca_file)
    if ctx.tracer is not None:
        ctx.tracer("<", ans.shown())
    return ans


def s_ws_healthz(ctx: Ctx) -> str:
    addr = _ws(ctx)
    ans = _ask(ctx, addr, "GET", HEALTH_PATH, "a health check")
    if ans.status != 200:
        raise Fail(f"GET {HEALTH_PATH} got {ans.shown()}, expected 200")
    return ""


def s_ws_no_subprotocol(ctx: Ctx) -> str:
    addr = _ws(ctx)
    ans = _ask(ctx, addr, "GET", target_of(addr), "an upgrade offering no subprotocol",
               upgrade_headers([]))
    if ans.status == 101:
        raise Fail("the peer accepted (101) a WebSocket upgrade that offers no subprotocol:"
                   f" one without Sec-WebSocket-Protocol {SUBPROTOCOL} must get a 4xx")
    if not 400 <= ans.status < 500:
        raise Fail(f"an upgrade without Sec-WebSocket-Protocol {SUBPROTOCOL} got"
                   f" {ans.shown()}, expected a 4xx")
    return f"HTTP {ans.status}"


def s_ws_other_request(ctx: Ctx) -> str:
    addr = _ws(ctx)
    target = target_of(addr)
    post = _ask(ctx, addr, "POST", target, "no upgrade")
    get = _ask(ctx, addr, "GET", target, "no upgrade")
    wrong = []
    if post.status != 405:
        wrong.append(f"POST {target} got {post.shown()}, expected 405")
    if get.status != 426:
        wrong.append(f"a GET {target} that is no upgrade got {get.shown()}, expected 426")
    if wrong:
        raise Fail("; ".join(wrong))
    return ""


# -- frames ----------------------------------------------------------------------------

def _byte_frames(chunk: bytes) -> list[Message]:
    """One binary message, one byte per frame (continuation frames after the first)."""
    last = len(chunk) - 1
    return [BytesMessage(chunk[i:i + 1], message_finished=i == last) for i in range(len(chunk))]


def _byte_messages(chunk: bytes) -> list[Message]:
    return [BytesMessage(chunk[i:i + 1]) for i in range(len(chunk))]


def _text(chunk: bytes) -> list[Message]:
    return [TextMessage(chunk.decode("utf-8"))]


HANDSHAKE_FRAMING = "our hello in one-byte frames of one message, our auth in one-byte" \
    " messages and our resume in a text frame"


def s_ws_frames(ctx: Ctx) -> str:
    _ws(ctx)
    conn = ctx.fresh()
    wire = _wire(conn)
    plans = iter([("our hello: one binary message of one-byte frames", _byte_frames),
                  ("our auth: one-byte binary messages", _byte_messages),
                  ("our resume: a text frame", _text)])

    def framer(chunk: bytes) -> list[Message]:
        what, plan = next(plans, ("", None))
        if plan is None:
            wire.framer = None
            return [BytesMessage(chunk)]
        frames = plan(chunk)
        conn.note(f"{what} ({len(chunk)} bytes, {len(frames)} frames)")
        return frames

    wire.framer = framer
    try:
        handshake(ctx, conn, strict=False)
    except Fail as e:
        raise Fail(f"with {HANDSHAKE_FRAMING}: {e}") from None
    wire.framer = None

    th = random_thread()
    state = conn.envelope({"t": "state", "th": th, "state": "working",
                           "note": "conformance: ws-frames"})
    msg = conn.envelope({"t": "msg", "th": th,
                         "parts": [{"k": "text", "text": "conformance: three lines, two frames"}]})
    ping = conn.envelope({"t": "ping"})
    raws = [compact_json(x).encode() + b"\n" for x in (state, msg, ping)]
    data = b"".join(raws)
    cut = len(data) - len(raws[2]) // 2  # inside the ping
    conn.note(f"a state, a msg and a ping in two binary frames of {cut} and"
              f" {len(data) - cut} bytes, cut inside the ping")
    wire.framer = lambda chunk: [BytesMessage(chunk[:cut]), BytesMessage(chunk[cut:])]
    try:
        conn.send_raw(data, ctx.deadline)
    finally:
        wire.framer = None
    want = {state["id"]: ("ack", "the state's ack"), msg["id"]: ("ack", "the msg's ack"),
            ping["id"]: ("pong", "the pong")}

    def answered(x: dict) -> bool:
        t, re = x.get("t"), x.get("re")
        if re in want and want[re][0] == t:
            del want[re]
        return not want

    try:
        conn.expect(answered, ctx.deadline, "answers to a state, a msg and a ping sent in two"
                    " frames, the first holding two lines and half the third")
    except Fail as e:
        raise Fail(f"{e} (missing: {', '.join(w for _, w in want.values())})") from None

    conn.note("a msg with non-ASCII text in a text frame")
    _next_write_as(wire, _text)
    text_msg, _ = conn.send({"t": "msg", "th": th, "parts": [
        {"k": "text", "text": "conformance: a text frame, UTF-8: \u00e9\u2713"}]}, ctx.deadline)
    _expect_ack(ctx, conn, text_msg, "msg in a text frame")
    return ""


def _next_write_as(wire: WsWire, plan: Callable[[bytes], list[Message]]) -> None:
    """Frame the next write by ``plan``, the ones after it as usual."""
    def once(chunk: bytes) -> list[Message]:
        wire.framer = None
        return plan(chunk)
    wire.framer = once


def s_ws_big_line(ctx: Ctx) -> str:
    _ws(ctx)
    s = ctx.session()
    wire = _wire(s.conn)
    one, raw = msg_of_size(s.conn, MAX_LINE)
    s.conn.note(f"a {len(raw)}-byte msg line in one binary frame")
    wire.queue([BytesMessage(raw + b"\n")])
    s.conn.flush(ctx.deadline)
    _expect_ack(ctx, s.conn, one, "1 MiB msg line sent in one frame")
    two, raw = msg_of_size(s.conn, MAX_LINE)
    s.conn.send_raw(raw + b"\n", ctx.deadline)  # in 256 KiB messages, as writes go out
    _expect_ack(ctx, s.conn, two, "1 MiB msg line sent in 256 KiB messages")
    return ""


WS_SCENARIOS: list[Scenario] = [
    Scenario("ws-healthz", "ws target: a plain GET /healthz gets 200", s_ws_healthz,
             own_connection=True),
    Scenario("ws-no-subprotocol", f"ws target: an upgrade not offering {SUBPROTOCOL} gets a"
             " 4xx, no 101", s_ws_no_subprotocol, own_connection=True),
    Scenario("ws-other-request", "ws target: a POST gets 405, a GET that is no upgrade 426",
             s_ws_other_request, own_connection=True),
    Scenario("ws-frames", "ws target: lines in one-byte frames, one-byte messages, text"
             " frames, and three lines in two frames are all answered", s_ws_frames,
             own_connection=True),
    Scenario("ws-big-line", "ws target: a 1 MiB msg line in one frame, and in 256 KiB"
             " messages, is acked", s_ws_big_line, own_connection=True),
]
