"""Byte-stream transport over real sockets: tcp and unix, policy, robustness."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Awaitable, Callable, Iterator

import pytest
import trio

from awp.transport.policy import PlaintextRefused
from awp.transport.streams import (
    Listener,
    TransportError,
    dial,
    listen,
    peer_description,
    register_dialer,
    register_listener,
)
from awp.wire.address import Address, parse_address, parse_listen

DEADLINE = 10.0

Handler = Callable[[trio.abc.HalfCloseableStream], Awaitable[object]]


@pytest.fixture
def sockdir() -> Iterator[str]:
    """A short private directory: unix socket paths are limited to ~100 bytes."""
    path = tempfile.mkdtemp(dir="/tmp", prefix="awpt-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def read_to_eof(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while chunk := await stream.receive_some(65536):
        chunks.append(chunk)
    return b"".join(chunks)


async def reverse_echo(stream: trio.abc.HalfCloseableStream) -> None:
    """Read until the client half-closes, then answer and half-close too."""
    data = await read_to_eof(stream)
    await stream.send_all(data[::-1])
    await stream.send_eof()


def run_with_listener(
    listen_text: str,
    handler: Handler,
    client: Callable[[Listener], Awaitable[None]],
) -> None:
    """Listen, serve handler, run client(listener) under a deadline, then close."""

    async def main() -> None:
        with trio.fail_after(DEADLINE):
            listener = await listen(parse_listen(listen_text))
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(listener.serve, handler)
                assert bound == listener.bound
                try:
                    await client(listener)
                finally:
                    await listener.aclose()
                    nursery.cancel_scope.cancel()

    trio.run(main)


# ---------------------------------------------------------------------------
# tcp


def test_tcp_port_zero_echo_and_half_close() -> None:
    async def client(listener: Listener) -> None:
        bound = listener.bound
        assert bound.kind == "tcp" and bound.host == "127.0.0.1" and bound.port != 0
        stream = await dial(bound)
        assert peer_description(stream) == f"tcp 127.0.0.1:{bound.port}"
        payload = b"hello over awp " * 5000  # larger than one receive
        await stream.send_all(payload)
        await stream.send_eof()
        assert await read_to_eof(stream) == payload[::-1]
        await stream.aclose()

    run_with_listener("tcp:127.0.0.1:0", reverse_echo, client)


def test_tcp_server_half_close_seen_as_eof_by_client() -> None:
    got: list[bytes] = []
    descriptions: list[str] = []
    handler_read_eof = trio.Event()

    async def handler(stream: trio.abc.HalfCloseableStream) -> None:
        descriptions.append(peer_description(stream))
        await stream.send_all(b"greeting")
        await stream.send_eof()
        got.append(await read_to_eof(stream))
        handler_read_eof.set()

    async def client(listener: Listener) -> None:
        stream = await dial(listener.bound)
        # The server's half-close shows up as EOF, yet we can still send.
        assert await read_to_eof(stream) == b"greeting"
        await stream.send_all(b"reply after eof")
        await stream.send_eof()
        await handler_read_eof.wait()
        # The server closes its side when the handler returns.
        assert await stream.receive_some(10) == b""
        await stream.aclose()

    run_with_listener("tcp:127.0.0.1:0", handler, client)
    assert got == [b"reply after eof"]
    assert descriptions[0].startswith("tcp 127.0.0.1:")


def test_tcp_dial_sets_nodelay() -> None:
    async def client(listener: Listener) -> None:
        stream = await dial(listener.bound)
        assert isinstance(stream, trio.SocketStream)
        assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await stream.aclose()

    run_with_listener("tcp:127.0.0.1:0", reverse_echo, client)


def test_tcp_wildcard_listen_is_allowed() -> None:
    async def client(listener: Listener) -> None:
        assert listener.bound.host == "0.0.0.0" and listener.bound.port != 0
        stream = await dial(Address("tcp", host="127.0.0.1", port=listener.bound.port))
        await stream.send_eof()
        assert await read_to_eof(stream) == b""
        await stream.aclose()

    run_with_listener("tcp:0.0.0.0:0", reverse_echo, client)


def test_tcp_listen_on_public_address_refused() -> None:
    async def main() -> None:
        with pytest.raises(PlaintextRefused) as info:
            await listen(parse_listen("tcp:8.8.8.8:0"))
        assert str(info.value).startswith("refusing plain TCP to public address 8.8.8.8:")

    trio.run(main)


def test_tcp_listen_port_in_use() -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE):
            first = await listen(parse_listen("tcp:127.0.0.1:0"))
            try:
                with pytest.raises(TransportError) as info:
                    await listen(first.bound)
                assert str(info.value) == f"listen {first.bound}: address already in use"
            finally:
                await first.aclose()

    trio.run(main)


def test_dial_closed_port_fails_fast() -> None:
    # Bound but not listening: connects are refused and nobody can take the port.
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]

    async def main() -> None:
        with trio.fail_after(5):
            with pytest.raises(TransportError) as info:
                await dial(parse_address(f"tcp:127.0.0.1:{port}"))
        assert str(info.value) == f"dial tcp:127.0.0.1:{port}: connection refused"

    try:
        trio.run(main)
    finally:
        holder.close()


def test_dial_public_ip_refused_before_any_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("no socket may be created for a refused address")

    monkeypatch.setattr(trio.socket, "socket", no_socket)

    async def main() -> None:
        with trio.fail_after(5):
            with pytest.raises(PlaintextRefused) as info:
                await dial(parse_address("tcp:8.8.8.8:1"))
        assert str(info.value) == (
            "refusing plain TCP to public address 8.8.8.8: awp over TCP is unencrypted "
            "(use a tailcat address, or set AWP_ALLOW_PLAINTEXT=1)"
        )

    trio.run(main)


def test_failing_handler_does_not_stop_listener(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def handler(stream: trio.abc.HalfCloseableStream) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("handler exploded")
        await reverse_echo(stream)

    async def client(listener: Listener) -> None:
        first = await dial(listener.bound)
        # The failed handler's stream is closed for us.
        assert await read_to_eof(first) == b""
        await first.aclose()
        second = await dial(listener.bound)
        await second.send_all(b"still here")
        await second.send_eof()
        assert await read_to_eof(second) == b"ereh llits"
        await second.aclose()

    with caplog.at_level(logging.ERROR, logger="awp.transport"):
        run_with_listener("tcp:127.0.0.1:0", handler, client)
    assert calls == 2
    failures = [r for r in caplog.records if r.name == "awp.transport" and r.exc_info]
    assert len(failures) == 1
    assert "handler exploded" in str(failures[0].exc_info[1])


def test_aclose_ends_serve() -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE):
            listener = await listen(parse_listen("tcp:127.0.0.1:0"))
            async with trio.open_nursery() as nursery:
                await nursery.start(listener.serve, reverse_echo)
                await listener.aclose()
                await listener.aclose()  # idempotent
            # serve() returned on its own once the listener closed.
            with pytest.raises(TransportError, match="connection refused"):
                await dial(listener.bound)

    trio.run(main)


# ---------------------------------------------------------------------------
# unix


def test_unix_listen_dial_mode_and_cleanup(sockdir: str) -> None:
    path = os.path.join(sockdir, "sub", "a.sock")  # parent is created
    seen: list[str] = []

    async def handler(stream: trio.abc.HalfCloseableStream) -> None:
        seen.append(peer_description(stream))
        await reverse_echo(stream)

    async def client(listener: Listener) -> None:
        assert listener.bound == Address("unix", path=path)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        stream = await dial(parse_address(f"unix://{path}"))
        assert peer_description(stream) == "unix"
        await stream.send_all(b"abc")
        await stream.send_eof()
        assert await read_to_eof(stream) == b"cba"
        await stream.aclose()

    run_with_listener(f"unix:{path}", handler, client)
    assert seen == ["unix"]
    assert not os.path.exists(path)


def test_unix_stale_socket_is_replaced(sockdir: str) -> None:
    path = os.path.join(sockdir, "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()
    assert stat.S_ISSOCK(os.stat(path).st_mode)

    async def client(listener: Listener) -> None:
        stream = await dial(listener.bound)
        await stream.send_all(b"fresh")
        await stream.send_eof()
        assert await read_to_eof(stream) == b"hserf"
        await stream.aclose()

    run_with_listener(f"unix:{path}", reverse_echo, client)


def test_unix_live_socket_is_in_use(sockdir: str) -> None:
    path = os.path.join(sockdir, "live.sock")

    async def client(listener: Listener) -> None:
        with pytest.raises(TransportError) as info:
            await listen(parse_listen(f"unix:{path}"))
        assert str(info.value) == f"listen unix:{path}: address already in use"
        # The probe did not disturb the running listener or its socket file.
        assert os.path.exists(path)
        stream = await dial(listener.bound)
        await stream.send_all(b"ok")
        await stream.send_eof()
        assert await read_to_eof(stream) == b"ko"
        await stream.aclose()

    run_with_listener(f"unix:{path}", reverse_echo, client)


def test_unix_path_that_is_not_a_socket(sockdir: str) -> None:
    path = os.path.join(sockdir, "plain-file")
    with open(path, "w") as f:
        f.write("keep me")

    async def main() -> None:
        with pytest.raises(TransportError, match="exists and is not a socket"):
            await listen(parse_listen(f"unix:{path}"))

    trio.run(main)
    with open(path) as f:
        assert f.read() == "keep me"


def test_unix_aclose_keeps_a_successors_socket(sockdir: str) -> None:
    path = os.path.join(sockdir, "succ.sock")

    async def main() -> None:
        first = await listen(parse_listen(f"unix:{path}"))
        os.unlink(path)  # someone removed it and bound a new one
        second = await listen(parse_listen(f"unix:{path}"))
        await first.aclose()
        assert os.path.exists(path)
        await second.aclose()
        assert not os.path.exists(path)

    trio.run(main)


def test_unix_dial_missing_socket(sockdir: str) -> None:
    path = os.path.join(sockdir, "nobody.sock")

    async def main() -> None:
        with trio.fail_after(5), pytest.raises(TransportError) as info:
            await dial(parse_address(f"unix:{path}"))
        assert str(info.value) == f"dial unix:{path}: no socket at {path}"

    trio.run(main)


# ---------------------------------------------------------------------------
# pluggable kinds


TC = "tc" + "A" * 40


def test_tailcat_unavailable_by_default() -> None:
    async def main() -> None:
        with pytest.raises(TransportError) as info:
            await dial(parse_address(TC))
        assert str(info.value) == "tailcat transport is not available in this build"
        with pytest.raises(TransportError) as info:
            await listen(parse_listen("tailcat"))
        assert str(info.value) == "tailcat transport is not available in this build"

    trio.run(main)


def test_builtin_kinds_cannot_be_replaced() -> None:
    async def dialer(addr: Address) -> trio.abc.HalfCloseableStream:
        raise AssertionError

    with pytest.raises(ValueError):
        register_dialer("tcp", dialer)
    with pytest.raises(ValueError):
        register_listener("unix", None)


def test_registered_dialer_and_listener_are_used(sockdir: str) -> None:
    """A plug-in transport (stand-in for tailcat) backed by a unix socket."""
    path = os.path.join(sockdir, "tc.sock")
    dialed: list[Address] = []

    async def tc_dial(addr: Address) -> trio.abc.HalfCloseableStream:
        dialed.append(addr)
        return await trio.open_unix_socket(path)

    async def tc_listen(addr: Address) -> Listener:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(path)
        sock.listen()
        return Listener(
            Address("tailcat", tailcat=TC),
            [trio.SocketListener(sock)],
            on_close=lambda: os.unlink(path),
        )

    register_dialer("tailcat", tc_dial)
    register_listener("tailcat", tc_listen)
    try:

        async def client(listener: Listener) -> None:
            assert listener.bound == Address("tailcat", tailcat=TC)
            stream = await dial(listener.bound)
            await stream.send_all(b"tunnel")
            await stream.send_eof()
            assert await read_to_eof(stream) == b"lennut"
            await stream.aclose()

        run_with_listener("tailcat", reverse_echo, client)
        assert dialed == [Address("tailcat", tailcat=TC)]
        assert not os.path.exists(path)  # the plug-in's on_close ran
    finally:
        register_dialer("tailcat", None)
        register_listener("tailcat", None)


def test_dial_timeout_message() -> None:
    async def hang(addr: Address) -> trio.abc.HalfCloseableStream:
        await trio.sleep_forever()
        raise AssertionError

    register_dialer("tailcat", hang)
    try:

        async def main() -> None:
            with trio.fail_after(5), pytest.raises(TransportError) as info:
                await dial(parse_address(TC), timeout=0.05)
            assert str(info.value) == f"dial {TC} timed out after 0.05s"

        trio.run(main)
    finally:
        register_dialer("tailcat", None)
