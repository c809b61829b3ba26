"""Byte streams between peers: dial and listen on tcp, unix, ws and pluggable kinds.

The protocol engine only ever sees trio.abc.HalfCloseableStream objects, so it
works the same over every binding. Nothing here knows about protocol messages.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as _stdsocket
import stat
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from awp.transport.policy import check_plaintext_ips, resolve_checked
from awp.wire.address import Address

__all__ = [
    "Dialer",
    "Handler",
    "Listener",
    "ListenerFactory",
    "TransportError",
    "dial",
    "listen",
    "peer_description",
    "register_dialer",
    "register_listener",
]

logger = logging.getLogger("awp.transport")

Handler = Callable[[trio.abc.HalfCloseableStream], Awaitable[Any]]
Dialer = Callable[[Address], Awaitable[trio.abc.HalfCloseableStream]]
ListenerFactory = Callable[[Address], Awaitable["Listener"]]

_BUILTIN_KINDS = frozenset({"tcp", "unix", "ws"})
_DIALERS: dict[str, Dialer] = {}
_LISTENERS: dict[str, ListenerFactory] = {}

# Running out of descriptors or memory is transient: back off instead of dying.
_ACCEPT_RETRY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_RETRY_DELAY = 0.1
_UNIX_PROBE_TIMEOUT = 2.0


class TransportError(Exception):
    """Dialing or listening failed; the message is meant for the user."""


def _reason(exc: BaseException) -> str:
    """Short lower-case reason for an OSError, e.g. "connection refused"."""
    if isinstance(exc, OSError):
        # Prefer the plain errno text: trio's connect errors embed the sockaddr.
        if exc.errno and not isinstance(exc, _stdsocket.gaierror):
            return os.strerror(exc.errno).lower()
        if exc.strerror:
            return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _unavailable(addr: Address) -> TransportError:
    if addr.kind == "tailcat":
        return TransportError("tailcat transport is not available in this build")
    return TransportError(f"no transport for {addr.kind!r} addresses in this build")


def register_dialer(kind: str, fn: Dialer | None) -> None:
    """Let another module (e.g. tailcat) provide dialing for an address kind.

    The dialer is called as ``await fn(addr)``; dial() applies the timeout.
    Passing None removes a registration. tcp and unix are built in.
    """
    if kind in _BUILTIN_KINDS:
        raise ValueError(f"{kind} transport is built in and cannot be replaced")
    if fn is None:
        _DIALERS.pop(kind, None)
    else:
        _DIALERS[kind] = fn


def register_listener(kind: str, fn: ListenerFactory | None) -> None:
    """Let another module provide listening for an address kind.

    The factory is called as ``await fn(addr)`` and returns a Listener (build one
    from any trio.abc.Listener). Passing None removes a registration.
    """
    if kind in _BUILTIN_KINDS:
        raise ValueError(f"{kind} transport is built in and cannot be replaced")
    if fn is None:
        _LISTENERS.pop(kind, None)
    else:
        _LISTENERS[kind] = fn


# ---------------------------------------------------------------------------
# dialing


async def dial(
    addr: Address, *, timeout: float = 30.0, allow_plaintext: bool = False
) -> trio.abc.HalfCloseableStream:
    """Open a byte stream to addr, or raise TransportError / PlaintextRefused.

    allow_plaintext is the user's override of the plain-TCP policy; callers
    pass allow_plaintext_from_env() or the config value.
    """
    connect: Callable[[], Awaitable[trio.abc.HalfCloseableStream]]
    if addr.kind == "tcp":

        async def connect() -> trio.abc.HalfCloseableStream:
            return await dial_tcp(addr, allow_plaintext)

    elif addr.kind == "unix":

        async def connect() -> trio.abc.HalfCloseableStream:
            return await _dial_unix(addr)

    elif addr.kind == "ws":
        from .wsclient import dial_ws  # wsproto and ssl load only when a ws peer is dialed

        async def connect() -> trio.abc.HalfCloseableStream:
            return await dial_ws(addr, allow_plaintext)

    else:
        dialer = _DIALERS.get(addr.kind)
        if dialer is None:
            raise _unavailable(addr)

        async def connect() -> trio.abc.HalfCloseableStream:
            try:
                return await dialer(addr)
            except OSError as exc:
                raise TransportError(f"dial {addr}: {_reason(exc)}") from exc

    try:
        with trio.fail_after(timeout):
            return await connect()
    except trio.TooSlowError:
        raise TransportError(f"dial {addr} timed out after {timeout:g}s") from None


async def _connect_one(info: tuple) -> trio.SocketStream:
    family, type_, proto, _, sockaddr = info
    sock = trio.socket.socket(family, type_, proto)
    try:
        # Protocol frames are small and latency matters more than packet count.
        sock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
        await sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def dial_tcp(addr: Address, allow_plaintext: bool, shown: Address | None = None
                   ) -> trio.abc.HalfCloseableStream:
    """TCP to ``addr.host:port``; errors name ``shown`` (the ws URL a user gave) when set."""
    label = shown or addr
    try:
        infos = await resolve_checked(addr.host, addr.port, allow_plaintext)
    except OSError as exc:
        raise TransportError(f"dial {label}: cannot resolve {addr.host}: {_reason(exc)}") from exc
    if not infos:
        raise TransportError(f"dial {label}: {addr.host} did not resolve to any address")
    failures: list[tuple[str, str]] = []
    for i, info in enumerate(infos):
        ip = str(info[4][0])
        left = len(infos) - i
        # Happy-eyeballs-lite: one address at a time, but an address that
        # black-holes must not eat the whole budget while others remain.
        budget = max(0.0, trio.current_effective_deadline() - trio.current_time()) / left
        stream: trio.SocketStream | None = None
        try:
            if left > 1:
                with trio.move_on_after(budget):
                    stream = await _connect_one(info)
            else:
                stream = await _connect_one(info)
        except OSError as exc:
            failures.append((ip, _reason(exc)))
            continue
        if stream is None:
            failures.append((ip, "timed out"))
            continue
        return stream
    reasons = {reason for _, reason in failures}
    if len(reasons) == 1:
        detail = reasons.pop()
    else:
        detail = "; ".join(f"{ip}: {reason}" for ip, reason in failures)
    raise TransportError(f"dial {label}: {detail}")


async def _dial_unix(addr: Address) -> trio.abc.HalfCloseableStream:
    try:
        return await trio.open_unix_socket(addr.path)
    except FileNotFoundError as exc:
        raise TransportError(f"dial {addr}: no socket at {addr.path}") from exc
    except OSError as exc:
        raise TransportError(f"dial {addr}: {_reason(exc)}") from exc


# ---------------------------------------------------------------------------
# listening


class Listener(trio.abc.AsyncResource):
    """Accepts connections on one binding and hands each to a handler task.

    Wraps one or more trio.abc.Listener objects (a host name may resolve to
    several addresses); other transports can construct one from their own.
    """

    def __init__(
        self,
        bound: Address,
        listeners: Iterable[trio.abc.Listener[trio.abc.HalfCloseableStream]],
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.bound = bound
        self._listeners = list(listeners)
        self._on_close = on_close
        self._closed = False

    async def serve(
        self,
        handler: Handler,
        *,
        task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until aclose(), running handler(stream) per connection.

        Reports the bound address through task_status. Returns once closed and
        every running handler has finished.
        """
        async with trio.open_nursery() as nursery:
            for lst in self._listeners:
                nursery.start_soon(self._accept_loop, lst, handler, nursery)
            task_status.started(self.bound)

    async def _accept_loop(
        self,
        lst: trio.abc.Listener[trio.abc.HalfCloseableStream],
        handler: Handler,
        nursery: trio.Nursery,
    ) -> None:
        while True:
            try:
                stream = await lst.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            except OSError as exc:
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    raise
                logger.error("accept on %s failed, retrying: %s", self.bound, exc)
                await trio.sleep(_ACCEPT_RETRY_DELAY)
                continue
            nursery.start_soon(_run_handler, handler, stream)

    async def aclose(self) -> None:
        """Stop accepting and release the binding (unix: remove the socket file)."""
        if self._closed:
            return
        self._closed = True
        try:
            for lst in self._listeners:
                await trio.aclose_forcefully(lst)
        finally:
            if self._on_close is not None:
                self._on_close()


async def _run_handler(handler: Handler, stream: trio.abc.HalfCloseableStream) -> None:
    """Run one connection's handler; its failure is logged, never propagated."""
    who = peer_description(stream)
    try:
        await handler(stream)
    except Exception:
        logger.exception("connection handler failed (%s)", who)
    finally:
        await trio.aclose_forcefully(stream)


async def listen(addr: Address, *, allow_plaintext: bool = False) -> Listener:
    """Bind addr and return a Listener; call serve() to start accepting."""
    if addr.kind == "tcp":
        return await _listen_tcp(addr, allow_plaintext)
    if addr.kind == "unix":
        return await _listen_unix(addr)
    if addr.kind == "ws":
        from .wsserver import listen_ws

        return await listen_ws(addr, allow_plaintext)
    factory = _LISTENERS.get(addr.kind)
    if factory is None:
        raise _unavailable(addr)
    return await factory(addr)


def _is_unspecified(ip: str) -> bool:
    """0.0.0.0 and :: mean "every interface"; the user chose that on purpose."""
    return ip.split("%", 1)[0] in ("0.0.0.0", "::")


async def _listen_tcp(addr: Address, allow_plaintext: bool) -> Listener:
    try:
        infos = await trio.socket.getaddrinfo(
            addr.host, addr.port, type=trio.socket.SOCK_STREAM, flags=trio.socket.AI_PASSIVE
        )
    except OSError as exc:
        raise TransportError(f"listen {addr}: cannot resolve {addr.host}: {_reason(exc)}") from exc
    ips = [str(info[4][0]) for info in infos]
    check_plaintext_ips([ip for ip in ips if not _is_unspecified(ip)], allow_plaintext)

    unique: list[tuple] = []
    seen: set[tuple] = set()
    for info in infos:
        key = (info[0], info[4])
        if key not in seen:
            seen.add(key)
            unique.append(info)
    if not unique:
        raise TransportError(f"listen {addr}: {addr.host} did not resolve to any address")

    socks: list[trio.socket.SocketType] = []
    port = addr.port
    try:
        for family, type_, proto, _, sockaddr in unique:
            sock = trio.socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            if family == trio.socket.AF_INET6 and len(unique) > 1:
                # Several addresses share one port: keep v6 sockets off v4.
                sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 1)
            # With port 0, every address gets the port the first one was given.
            await sock.bind((sockaddr[0], port, *sockaddr[2:]))
            if port == 0:
                port = sock.getsockname()[1]
            sock.listen(_stdsocket.SOMAXCONN)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise TransportError(f"listen {addr}: {_reason(exc)}") from exc

    bound = Address(kind="tcp", host=str(socks[0].getsockname()[0]), port=port)
    return Listener(bound, [trio.SocketListener(sock) for sock in socks])


async def _unix_socket_answers(addr: Address) -> bool:
    """True if a live process accepts connections on the socket at addr.path."""
    try:
        with trio.fail_after(_UNIX_PROBE_TIMEOUT):
            probe = await trio.open_unix_socket(addr.path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except trio.TooSlowError:
        return True  # something is there, just too busy to accept
    except OSError as exc:
        raise TransportError(
            f"listen {addr}: cannot check existing socket {addr.path}: {_reason(exc)}"
        ) from exc
    await trio.aclose_forcefully(probe)
    return True


async def _remove_stale_unix_socket(addr: Address) -> None:
    """Remove a socket file left by a dead process; refuse to steal a live one."""
    path = addr.path
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TransportError(f"listen {addr}: cannot inspect {path}: {_reason(exc)}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise TransportError(f"listen {addr}: {path} exists and is not a socket")
    if await _unix_socket_answers(addr):
        raise TransportError(f"listen {addr}: address already in use")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise TransportError(
            f"listen {addr}: cannot remove stale socket {path}: {_reason(exc)}"
        ) from exc


async def _listen_unix(addr: Address) -> Listener:
    path = addr.path
    parent = os.path.dirname(path) or "/"
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise TransportError(f"listen {addr}: cannot create {parent}: {_reason(exc)}") from exc
    await _remove_stale_unix_socket(addr)

    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    created = False
    try:
        # bind() fails rather than replace a file that appeared meanwhile.
        await sock.bind(path)
        created = True
        # Restrict before listen(): until then any connect() is refused, so
        # there is no moment where another user could get in.
        os.chmod(path, 0o600)
        sock.listen(_stdsocket.SOMAXCONN)
        st = os.stat(path)
    except OSError as exc:
        sock.close()
        if created:
            _unlink_quietly(path)
        raise TransportError(f"listen {addr}: {_reason(exc)}") from exc

    identity = (st.st_dev, st.st_ino)

    def remove_socket_file() -> None:
        # Only remove the file if it is still ours, not a successor's socket.
        try:
            now = os.lstat(path)
        except OSError:
            return
        if (now.st_dev, now.st_ino) == identity:
            _unlink_quietly(path)

    bound = Address(kind="unix", path=path)
    return Listener(bound, [trio.SocketListener(sock)], on_close=remove_socket_file)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------
# diagnostics


def peer_description(stream: object) -> str:
    """Say who is on the other end, for logs: "tcp 127.0.0.1:5555", "unix", ...

    Streams from other transports may carry their own ``peer_description`` str.
    """
    if isinstance(stream, trio.SocketStream):
        sock = stream.socket
        if sock.family == trio.socket.AF_UNIX:
            return "unix"
        if sock.family in (trio.socket.AF_INET, trio.socket.AF_INET6):
            try:
                peer = sock.getpeername()
            except OSError:
                return "tcp (peer unknown)"
            host = str(peer[0])
            if ":" in host:
                host = f"[{host}]"
            return f"tcp {host}:{peer[1]}"
        return "socket"
    custom = getattr(stream, "peer_description", None)
    if isinstance(custom, str) and custom:
        return custom
    return type(stream).__name__
