"""The side connection of a bulk transfer: its handshake and its bytes.

A side connection is an ordinary connection over the same binding, opened by
the receiver of a file to its sender: the same hello, auth (both identity
keys, both nonces) and seal agreement as the link, with ``"side": "bulk"`` in
the dialer's hello (covered by both signatures), and then no resume: control
lines of at most 4 KiB and the raw bytes of pieces, never the line parser.
On a plain socket a piece leaves with ``os.sendfile``; on a sealed link it is
read and sealed off the event loop and written as records.
"""

from __future__ import annotations

import json
import os

import trio

from ..wire import bulk as wire
from ..wire.address import AddressError, parse_address
from ..wire.errors import ProtocolError
from ..wire.framing import LineReader, LineTooLarge
from .handshake import Handshake, LocalHello
from .sealed import SealedStream, seal_for


class SideClosed(Exception):
    """The side connection ended or broke; the transfer is tried again later."""


class Side:
    """One authenticated side connection: control lines and piece bytes."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, rest: bytes = b"") -> None:
        self.stream = stream
        self._buf = bytearray(rest)
        self.wire_out = 0  # bytes we wrote (the transport's, seal records included)

    async def _more(self, n: int) -> None:
        try:
            data = await self.stream.receive_some(n)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            raise SideClosed(str(e)) from None
        if not data:
            raise SideClosed("side connection closed")
        self._buf += data

    async def line(self) -> dict:
        """The next control line (a JSON object of at most 4 KiB)."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise SideClosed("side line is not JSON") from None
                if not isinstance(obj, dict):
                    raise SideClosed("side line is not an object")
                return obj
            if len(self._buf) > wire.MAX_CONTROL:
                raise SideClosed(f"side line over {wire.MAX_CONTROL} bytes")
            await self._more(65536)

    async def exactly(self, n: int) -> bytearray:
        """The next ``n`` raw bytes (a piece), read in large reads."""
        out = bytearray(n)
        view = memoryview(out)
        got = min(n, len(self._buf))
        view[:got] = self._buf[:got]
        del self._buf[:got]
        sock = _socket_of(self.stream)
        while got < n:
            if sock is not None:
                try:
                    k = await sock.recv_into(view[got:], min(n - got, 1 << 20))
                except OSError as e:
                    raise SideClosed(str(e)) from None
                if not k:
                    raise SideClosed("side connection closed inside a piece")
                got += k
            else:
                await self._more(min(n - got, 1 << 20))
                k = min(n - got, len(self._buf))
                view[got:got + k] = self._buf[:k]
                del self._buf[:k]
                got += k
        return out

    def plain_socket(self):
        """The trio socket under a plain (not sealed) TCP or Unix stream, or None."""
        return _socket_of(self.stream)

    def take_buffered(self, n: int) -> bytes:
        """Up to ``n`` bytes already read past the last control line."""
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def send_line(self, obj: dict) -> None:
        data = wire.control_line(obj)
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            raise SideClosed(str(e)) from None
        self.wire_out += len(data)

    async def send_file(self, fd: int, off: int, n: int) -> None:
        """``n`` bytes of ``fd`` from ``off``: sendfile on a plain socket, else sealed."""
        try:
            sock = _socket_of(self.stream)
            if sock is not None:
                await _sendfile(sock, fd, off, n)
                self.wire_out += n
                return
            data = await trio.to_thread.run_sync(_pread_all, fd, off, n)
            if isinstance(self.stream, SealedStream):
                sealer = self.stream._sealer
                cipher = await trio.to_thread.run_sync(sealer.seal, data)
                await self.stream.raw.send_all(cipher)
                self.wire_out += len(cipher)
            else:
                await self.stream.send_all(data)
                self.wire_out += n
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            raise SideClosed(str(e)) from None

    async def aclose(self) -> None:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            try:
                await self.stream.aclose()
            except Exception:
                pass


def _socket_of(stream: object):
    """The trio socket of a plain ``SocketStream`` (not sealed, not WebSocket)."""
    return stream.socket if type(stream) is trio.SocketStream else None


def _pread_all(fd: int, off: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            raise OSError("the staged file is shorter than its size")
        out += b
    return bytes(out)


async def _sendfile(sock, fd: int, off: int, n: int) -> None:
    out = sock.fileno()
    while n > 0:
        try:
            k = os.sendfile(out, fd, off, n)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if k == 0:
            raise OSError("the staged file is shorter than its size")
        off += k
        n -= k
        await trio.lowlevel.checkpoint()


async def dial(engine, key: str, timeout: float = 15.0, side: str = wire.SIDE) -> Side:
    """A side connection named ``side`` to ``key`` at the first of its known
    addresses that answers."""
    errors = []
    for addr, _source in await engine.dial_addresses(key):
        try:
            with trio.fail_after(timeout):
                return await _dial_one(engine, key, addr, side)
        except (SideClosed, OSError, AddressError, trio.TooSlowError, ProtocolError) as e:
            errors.append(f"{addr}: {e}")
    raise SideClosed("; ".join(errors) or "no address known for the sender")


async def _dial_one(engine, key: str, addr: str, side: str) -> Side:
    cfg = engine.config
    try:
        stream = await engine.net.dial(parse_address(addr), timeout=cfg.dial_timeout,
                                       allow_plaintext=cfg.allow_plaintext)
    except AddressError:
        raise
    except Exception as e:  # the transport's own errors (node does not import transport)
        raise SideClosed(str(e)) from None
    try:
        return await _handshake(engine, key, stream, side)
    except BaseException:
        with trio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except Exception:
                pass
        raise


async def _handshake(engine, key: str, stream, side: str) -> Side:
    cfg = engine.config
    local = engine.local_hello(True)
    hs = Handshake(engine.identity, LocalHello(name=local.name, caps=local.caps,
                                               side=side),
                   engine.ids, max_depth=cfg.limits.json_depth, outbound=True,
                   seal=seal_for(cfg.seal, stream))
    hs.check_peer = lambda k: "" if k == key else f"key mismatch: answered as {k}"
    engine.rotation and engine.rotation.bind(hs)
    await stream.send_all(hs.start())
    reader, pending, out = LineReader(), [], stream
    while not hs.done:
        if not pending:
            data = await stream.receive_some(65536)
            if not data:
                raise SideClosed("peer closed the side connection during its handshake")
            try:
                pending = reader.feed(data)
            except LineTooLarge:
                raise SideClosed("line over 1 MiB in a side handshake") from None
            continue
        reply = hs.receive(pending.pop(0))
        if reply:
            await out.send_all(reply)
            if hs.seal_keys is not None and out is stream:
                out = SealedStream(stream, hs.seal_keys[0])
    if hs.seal_keys is not None:
        assert isinstance(out, SealedStream)
        out.open_receiving(hs.seal_keys[1], reader.take_rest(pending))
        return Side(out)
    return Side(stream, reader.take_rest(pending))
