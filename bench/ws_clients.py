"""Many raw AWP peers over WebSocket in one process, each with its own key, then idle.

A helper of bench/ws.py's ``idle`` part, run as its own process so that its
memory is not the daemon's.  Each link: TCP, the HTTP upgrade to the
``awp.v0`` subprotocol (wsproto, as the daemon's binding), then the AWP
handshake as a dialer (hello, auth, resume; sealed when ``--seal``, as a
daemon would offer it) with a fresh Ed25519 identity a link.  Then it only
answers: a ``ping`` line gets its ``pong``, a WebSocket Ping its Pong; every
other line is read and dropped.  At most ``--concurrency`` links are in
their upgrade and handshake at once (the daemon bounds pending upgrades per
source address, ``limits.ws_upgrades_per_ip``, and handshakes,
``limits.handshakes``).

Protocol on stdout, one line each: ``up N failed M SECONDS`` once every link
has finished its handshake (the first few failures' reasons go to stderr),
then for each ``stats`` line read on stdin, ``alive N closed M pings P
lines L``.  Ends when stdin closes.

Run: python bench/ws_clients.py HOST PORT LINKS [--concurrency 16] [--seal]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[1:1] = [_ROOT]

import trio  # noqa: E402
from wsproto import ConnectionType, WSConnection  # noqa: E402
from wsproto.events import (  # noqa: E402
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from awp.wire.b64 import b64url  # noqa: E402
from awp.wire.canonical import compact_json  # noqa: E402
from awp.wire.ids import IdGenerator  # noqa: E402
from awp.wire.keys import Identity, auth_transcript, verify  # noqa: E402
from awp.wire.seal import (  # noqa: E402
    SEAL_CAP,
    Ephemeral,
    Opener,
    Sealer,
    parse_seal_key,
    transcript_hash,
)
from awp.wire.timefmt import format_ts, now_ms  # noqa: E402

SUBPROTOCOL = "awp.v0"
IDS = IdGenerator()


class Link:
    """One upgraded connection: lines in (unsealed once the peer seals), lines out."""

    def __init__(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        self.stream, self.ws = stream, ws
        self.buf = bytearray()
        self.opener: Opener | None = None
        self.sealer: Sealer | None = None
        self.pings = 0
        self.lines = 0

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError("the daemon closed the connection")
        self.ws.receive_data(data)
        for ev in self.ws.events():
            if isinstance(ev, BytesMessage | TextMessage):
                d = ev.data if isinstance(ev.data, bytes | bytearray) else ev.data.encode()
                self.buf += self.opener.feed(bytes(d)) if self.opener else d
            elif isinstance(ev, Ping):
                await self.stream.send_all(self.ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                raise EOFError(f"the daemon sent Close {ev.code} {ev.reason}")

    async def line(self) -> bytes:
        while (nl := self.buf.find(b"\n")) < 0:
            await self._fill()
        raw = bytes(self.buf[:nl])
        del self.buf[:nl + 1]
        self.lines += 1
        return raw

    def open_receiving(self, key: bytes) -> None:
        """Unseal from here on, including what arrived behind the peer's auth line."""
        self.opener = Opener(key)
        held, self.buf = bytes(self.buf), bytearray()
        self.buf += self.opener.feed(held)

    async def send(self, obj: dict) -> bytes:
        full = {"t": obj["t"], "id": IDS.next(), "ts": format_ts(now_ms()), **obj}
        raw = compact_json(full).encode()
        data = raw + b"\n"
        if self.sealer is not None:
            data = self.sealer.seal(data)
        await self.stream.send_all(self.ws.send(Message(data=data)))
        return raw


async def upgrade(host: str, port: int) -> Link:
    stream = await trio.open_tcp_stream(host, port)
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=f"{host}:{port}", target="/",
                                          subprotocols=[SUBPROTOCOL])))
    link = Link(stream, ws)
    while True:
        data = await stream.receive_some(65536)
        if not data:
            raise EOFError("closed before answering the upgrade")
        ws.receive_data(data)
        for ev in ws.events():
            if isinstance(ev, AcceptConnection):
                return link
            if isinstance(ev, RejectConnection):
                raise OSError(f"upgrade refused: HTTP {ev.status_code}")


async def handshake(link: Link, seal: bool) -> None:
    """Dialer's side: hello, the daemon's hello and auth, our auth, both resumes."""
    me = Identity.generate()
    eph = Ephemeral() if seal else None
    hello = {"t": "hello", "v": 0, "key": me.key, "name": "ws-idle", "nonce": b64url(os.urandom(32)),
             "caps": ["chat", *([SEAL_CAP] if eph else [])], "about": "bench idle link"}
    if eph is not None:
        hello["seal"] = eph.text
    mine = await link.send(hello)
    theirs = await link.line()
    peer = json.loads(theirs)
    if peer.get("t") != "hello":
        raise OSError(f"expected hello, got {theirs[:200]!r}")
    keys = None
    if eph is not None and SEAL_CAP in (peer.get("caps") or []):
        pub = parse_seal_key(peer.get("seal"))
        keys = eph.keys(pub, dialer=True, transcript=transcript_hash(mine, theirs))
    auth = json.loads(await link.line())
    if auth.get("t") != "auth":
        raise OSError(f"expected auth, got {auth!r}")
    if not verify(peer["key"], auth_transcript(theirs, mine), auth.get("sig", "")):
        raise OSError("the daemon's auth does not verify")
    if keys is not None:
        link.open_receiving(keys[1])
    await link.send({"t": "auth", "sig": me.sign(auth_transcript(mine, theirs))})
    if keys is not None:
        link.sealer = Sealer(keys[0])
    await link.send({"t": "resume", "seen": {}})
    while True:
        got = json.loads(await link.line())
        if got.get("t") == "resume":
            return
        if got.get("t") == "err":
            raise OSError(f"err during the handshake: {got}")


class Crowd:
    def __init__(self) -> None:
        self.links: list[Link] = []
        self.failed = 0
        self.closed = 0
        self.done = 0


async def run_link(crowd: Crowd, host: str, port: int, seal: bool, sem: trio.Semaphore) -> None:
    async with sem:
        try:
            link = await upgrade(host, port)
            await handshake(link, seal)
        except (OSError, EOFError, trio.BrokenResourceError, ValueError) as e:
            crowd.failed += 1
            if crowd.failed <= 5:
                print(f"link failed: {e}", file=sys.stderr, flush=True)
            return
        finally:
            crowd.done += 1
    crowd.links.append(link)
    try:
        while True:
            raw = await link.line()
            if raw.startswith(b'{"t":"ping"'):
                line = json.loads(raw)
                link.pings += 1
                await link.send({"t": "pong", "re": line["id"]})
    except (OSError, EOFError, trio.BrokenResourceError):
        crowd.closed += 1
        crowd.links.remove(link)


async def main_async(args: argparse.Namespace) -> None:
    crowd = Crowd()
    sem = trio.Semaphore(args.concurrency)
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(args.links):
            nursery.start_soon(run_link, crowd, args.host, args.port, args.seal, sem)
        while crowd.done < args.links:
            await trio.sleep(0.05)
        print(f"up {len(crowd.links)} failed {crowd.failed} {time.perf_counter() - t0:.2f}",
              flush=True)
        while True:
            cmd = await trio.to_thread.run_sync(sys.stdin.readline)
            if not cmd:
                break
            print(f"alive {len(crowd.links)} closed {crowd.closed}"
                  f" pings {sum(x.pings for x in crowd.links)}"
                  f" lines {sum(x.lines for x in crowd.links)}", flush=True)
        nursery.cancel_scope.cancel()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("links", type=int)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seal", action="store_true", help="offer the seal extension")
    trio.run(main_async, ap.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
