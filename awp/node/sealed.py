"""A byte stream sealed end to end after the handshake (the trio half of wire/seal.py).

The connection keeps speaking lines; this wrapper turns what it writes into
sealed records and what it reads back into plaintext, so nothing above it
knows a link is sealed.  The sending half starts sealing right after our
``auth`` line; the receiving half starts after the peer's, with the bytes
that arrived behind that line handed over by the line reader.
"""

from __future__ import annotations

import ipaddress
import socket

import trio

from ..base.cpu import STEPS, clock
from ..base.sockio import Encoded, write_some
from ..base.sockread import receive_some
from ..wire.seal import Opener, Sealer, SealError


class SealedStream(trio.abc.HalfCloseableStream):
    """``raw`` with every byte after the switch sealed; see :mod:`awp.wire.seal`."""

    def __init__(self, raw: trio.abc.HalfCloseableStream, tx_key: bytes) -> None:
        self.raw = raw
        self._sealer = Sealer(tx_key)
        self._opener: Opener | None = None
        self._ready = bytearray()  # plaintext decrypted but not yet returned

    @property
    def transport_stream(self) -> trio.abc.HalfCloseableStream:
        """The stream under the seal (trio's name for it, as on ``SSLStream``)."""
        return self.raw

    def open_receiving(self, rx_key: bytes, rest: bytes) -> None:
        """Start unsealing: ``rest`` is what followed the peer's auth line."""
        self._opener = Opener(rx_key)
        self._ready += self._open(rest)

    def _open(self, data: bytes) -> bytes:
        assert self._opener is not None
        try:
            return self._opener.feed(data)
        except SealError as e:
            raise trio.BrokenResourceError(f"sealed link broken: {e}") from None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if isinstance(data, Encoded):
            await self.raw.send_all(data)
        else:
            await self.raw.send_all(self._sealer.seal(bytes(data)))

    def write_now(self, data: bytes) -> bytes:
        """Seal ``data`` and write what a plain socket under us takes at once.

        The same promise as ``LineOut.write_now``: ``b""`` when all of it
        went, ``data`` itself when nothing was done (a stream we cannot
        write without the event loop), otherwise the :class:`~awp.base.sockio.Encoded` rest,
        which the caller finishes with :meth:`send_all`.  This is what keeps
        a sealed link on the fast paths (an ack from the intake journal, a
        line written before its commit) that a plain socket takes.
        """
        raw = self.raw
        if type(raw) is trio.SocketStream:
            cipher = self._sealer.seal(data)
            sent = write_some(raw.socket.fileno(), cipher)
            return b"" if sent == len(cipher) else Encoded(cipher[sent:])
        may = getattr(raw, "may_write_now", None)  # a WebSocket on a plain socket
        if may is None or not may():
            return data
        return raw.write_now(self._sealer.seal(data))

    async def wait_send_all_might_not_block(self) -> None:
        await self.raw.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.raw.send_all(self._sealer.final())
        await self.raw.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        limit = max_bytes or 65536
        while not self._ready:
            if self._opener is None:
                raise trio.BrokenResourceError("sealed link read before the peer's auth")
            if self._opener.finished:
                return b""
            data = await receive_some(self.raw, 65536)
            if not data:
                try:
                    self._opener.eof()
                except SealError as e:
                    raise trio.BrokenResourceError(f"sealed link broken: {e}") from None
                return b""
            t = clock()
            self._ready += self._open(data)
            STEPS["read"] += clock() - t
        out = bytes(self._ready[:limit])
        del self._ready[:limit]
        return out

    async def aclose(self) -> None:
        await self.raw.aclose()


def is_local_stream(stream: object) -> bool:
    """True for a Unix socket or a loopback peer: a link no middlebox sits in.

    Wrappers (TLS, WebSocket) are looked through by their ``transport_stream``;
    a stream we cannot see into counts as remote.
    """
    seen = 0
    while seen < 8:
        sock = getattr(stream, "socket", None)
        if sock is not None:
            return _local_socket(sock)
        inner = getattr(stream, "transport_stream", None)
        if inner is None:
            return False
        stream, seen = inner, seen + 1
    return False


def _local_socket(sock: object) -> bool:
    family = getattr(sock, "family", None)
    if family == getattr(socket, "AF_UNIX", None):
        return True
    try:
        host = sock.getpeername()[0]  # type: ignore[attr-defined]
        ip = ipaddress.ip_address(host)
    except (OSError, ValueError, TypeError, IndexError):
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def seal_for(policy: str, stream: object) -> str:
    """The handshake's seal rule for one stream: ``require-remote`` becomes
    ``require`` unless the stream is a Unix socket or a loopback peer."""
    if policy == "require-remote":
        return "prefer" if is_local_stream(stream) else "require"
    return policy
