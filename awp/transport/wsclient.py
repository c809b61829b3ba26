"""Dialing ``ws://`` and ``wss://``: TCP, TLS for wss, then the upgrade to ``awp.v0``.

``wss://`` verifies the server's certificate and host name against the
system's trust store plus the PEM file the binding was configured with
(``awp connect --ca FILE`` adds one); a failure says in words what TLS
found.  ``ws://`` is plain text on the wire, so it follows the plain-TCP
policy (private addresses only unless allowed); a sealed link
(:mod:`awp.wire.seal`) is what keeps its content from the path.

A platform waking a paused sandbox answers the upgrade with 502, 503 or
504, or accepts the socket and drops it: those raise :class:`WakeRefused`,
which the redial loop retries on its fast schedule (:mod:`awp.node.wake`).
"""

from __future__ import annotations

import ssl

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request
from wsproto.utilities import RemoteProtocolError

from ..wire.address import Address
from ..wire.wsnames import SUBPROTOCOL
from .streams import TransportError, dial_tcp
from .wsconfig import WsLimits, current
from .wsstream import WebSocketStream
from .wstls import client_context

__all__ = ["WakeRefused", "dial_ws", "tls_context"]

_WAKING_STATUSES = (502, 503, 504)
_READ = 16 * 1024


class WakeRefused(TransportError):
    """The platform in front of the peer said it is not up yet (or dropped the upgrade)."""


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """The system trust store, plus ``ca_file`` when one is configured."""
    try:
        return client_context(ca_file)
    except (ValueError, ssl.SSLError) as e:
        raise TransportError(f"cannot load the CA file {ca_file}: {e}") from None


async def _tls(tcp: trio.abc.Stream, addr: Address, ca_file: str) -> trio.SSLStream:
    stream = trio.SSLStream(tcp, tls_context(ca_file), server_hostname=addr.host,
                            https_compatible=True)
    try:
        await stream.do_handshake()
    except trio.BrokenResourceError as e:
        cause = e.__cause__
        await trio.aclose_forcefully(tcp)
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise TransportError(
                f"dial {addr}: the TLS certificate of {addr.host} is not trusted"
                f" ({cause.verify_message}); for a private CA use awp connect --ca FILE"
            ) from None
        if isinstance(cause, ssl.SSLError):
            raise TransportError(f"dial {addr}: TLS handshake failed ({cause.reason or cause})"
                                 ) from None
        raise WakeRefused(f"dial {addr}: the connection closed during the TLS handshake"
                          ) from None
    return stream


async def _upgrade(stream: trio.abc.Stream, addr: Address, limits: WsLimits) -> WSConnection:
    """Send the upgrade and read the answer: the open connection, or an error naming it."""
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=addr.http_host, target=addr.path,
                                          subprotocols=[SUBPROTOCOL])))
    seen, status, body, done = 0, 0, b"", False
    while not done:
        data = await stream.receive_some(_READ)
        if not data:
            if status:
                break
            raise WakeRefused(f"dial {addr}: the server closed the connection before"
                              " answering the upgrade")
        seen += len(data)
        if seen > 2 * limits.request_bytes:
            raise TransportError(f"dial {addr}: the answer to the upgrade is over"
                                 f" {2 * limits.request_bytes} bytes")
        try:
            ws.receive_data(data)
            for ev in ws.events():
                if isinstance(ev, AcceptConnection):
                    if ev.subprotocol != SUBPROTOCOL:
                        raise TransportError(f"dial {addr}: the server did not agree to"
                                             f" the subprotocol {SUBPROTOCOL}")
                    return ws
                if isinstance(ev, RejectConnection):
                    status, done = ev.status_code, not ev.has_body
                elif isinstance(ev, RejectData):
                    body += ev.data
                    done = ev.body_finished
        except (RemoteProtocolError, h11.RemoteProtocolError) as e:
            raise TransportError(f"dial {addr}: not a WebSocket server ({e})") from None
    text = " ".join(body.decode("utf-8", "replace").split())[:300]
    why = f"dial {addr}: HTTP {status}" + (f": {text}" if text else "")
    if status in _WAKING_STATUSES:
        raise WakeRefused(f"{why} (the platform may be waking it)")
    raise TransportError(why)


async def dial_ws(addr: Address, allow_plaintext: bool = False) -> WebSocketStream:
    """Open an upgraded AWP WebSocket to ``addr`` (a ws:// or wss:// URL, or a ws listen form)."""
    cfg = current()
    if addr.is_ws_listen:  # ws:HOST:PORT dialed as it is
        addr = Address(kind="ws", host=addr.host, port=addr.port, path="/")
    # The TLS of wss:// is the transport encryption the plain-TCP policy asks for.
    tcp = await dial_tcp(Address(kind="tcp", host=addr.host, port=addr.port),
                         allow_plaintext or addr.tls, shown=addr)
    stream: trio.abc.Stream = tcp
    try:
        with trio.fail_after(cfg.limits.handshake_timeout):
            if addr.tls:
                stream = await _tls(tcp, addr, cfg.ca_file)
            ws = await _upgrade(stream, addr, cfg.limits)
    except trio.TooSlowError:
        await trio.aclose_forcefully(stream)
        raise TransportError(f"dial {addr}: no answer to the upgrade within"
                             f" {cfg.limits.handshake_timeout:g}s") from None
    except (trio.BrokenResourceError, OSError) as e:
        await trio.aclose_forcefully(stream)
        raise WakeRefused(f"dial {addr}: the connection dropped during the upgrade ({e})"
                          ) from None
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return WebSocketStream(stream, ws, cfg.limits, desc=f"{'wss' if addr.tls else 'ws'}"
                           f" {addr.http_host}")
