"""The one HTTP/1.1 core both servers run on (awp.localapi.h11serve), over memory streams."""

from __future__ import annotations

import logging
import socket

import trio
import trio.testing

from awp.localapi.h11serve import HttpConnection, Incoming, serve_connection

log = logging.getLogger("test.h11serve")


def _exchange(request: bytes, *, max_body: int = 16, write_timeout: float | None = None,
              stream_body: bool = False) -> tuple[bytes, list[Incoming]]:
    """Serve ``request`` (one or more pipelined) and return what the client read."""
    seen: list[Incoming] = []

    async def main() -> bytes:
        client, server = trio.testing.memory_stream_pair()
        conn = HttpConnection(server, idle_timeout=2, max_body=max_body,
                              write_timeout=write_timeout)

        async def answer(req: Incoming) -> bool:
            seen.append(req)
            if stream_body:
                await conn.start(200, [("content-type", "text/plain")])
                for part in (b"one\n", b"two\n", b"three and more\n"):
                    await conn.send(part)
                await conn.end()
                return True
            await conn.respond(200 if req.complete else 413, [("content-type", "text/plain")],
                               b"ok " + req.body, close=not req.complete)
            return req.complete

        async def refuse(status: int, message: str) -> None:
            await conn.respond(status, [("content-type", "text/plain")], message.encode(),
                               close=True)

        got = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_connection, conn, answer, refuse, log)
            await client.send_all(request)
            await client.send_eof()
            while data := await client.receive_some(65536):
                got += data
        return bytes(got)

    return trio.run(main), seen


def test_keep_alive_answers_pipelined_requests_in_order_with_their_bodies():
    out, seen = _exchange(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                          b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [(r.method, r.target, r.body) for r in seen] == [("POST", "/a", b"abc"),
                                                            ("GET", "/b", b"")]
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.index(b"ok abc") < out.rindex(b"ok ")


def test_a_body_over_the_bound_is_not_read_and_the_connection_closes():
    out, seen = _exchange(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
                          + b"x" * 100 + b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(seen) == 1 and not seen[0].complete and seen[0].body == b""
    assert out.startswith(b"HTTP/1.1 413 ") and b"connection: close" in out
    assert out.count(b"HTTP/1.1") == 1  # the pipelined GET is never answered


def test_head_gets_the_length_but_no_body():
    out, _ = _exchange(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"content-length: 3" in head and body == b""


def test_a_malformed_request_gets_the_callers_error_and_a_close():
    out, seen = _exchange(b"NOT HTTP AT ALL\r\n\r\n")
    assert seen == [] and out.startswith(b"HTTP/1.1 400 ")
    assert b"bad HTTP request" in out and b"connection: close" in out


def test_a_streamed_response_goes_out_in_pieces():
    out, _ = _exchange(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n", stream_body=True)
    assert b"transfer-encoding: chunked" in out.lower()
    assert b"one\n" in out and b"two\n" in out and out.endswith(b"0\r\n\r\n")


def _client_read(request: bytes, out: bytes) -> bytes:
    """The body an HTTP client (h11's) reads from ``out``, the answer to ``request``."""
    import h11

    client = h11.Connection(h11.CLIENT)
    method, target, _ = request.split(b" ", 2)
    client.send(h11.Request(method=method, target=target, headers=[("host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(out)
    client.receive_data(b"")
    body = b""
    while (ev := client.next_event()) not in (h11.NEED_DATA, h11.PAUSED) and not isinstance(
            ev, h11.EndOfMessage | h11.ConnectionClosed):
        if isinstance(ev, h11.Data):
            body += ev.data
    return body


def test_every_piece_of_a_stream_is_framed_as_its_own_chunk():
    # Pieces after the first are framed by us, not h11: a client must read them all.
    req = b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n"
    out, _ = _exchange(req, stream_body=True)
    assert out.endswith(b"4\r\none\n\r\n4\r\ntwo\n\r\nf\r\nthree and more\n\r\n0\r\n\r\n")
    assert _client_read(req, out) == b"one\ntwo\nthree and more\n"


def test_a_stream_to_an_http_1_0_client_is_not_chunked():
    out, _ = _exchange(b"GET /s HTTP/1.0\r\nHost: x\r\n\r\n", stream_body=True)
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower() and body == b"one\ntwo\nthree and more\n"


def _socket_pair() -> tuple[trio.SocketStream, trio.SocketStream, HttpConnection]:
    """A connected pair of real sockets (a full buffer behaves as it does), the
    server's end wrapped in an HttpConnection."""
    a, b = socket.socketpair()
    server = trio.SocketStream(trio.socket.from_stdlib_socket(a))
    client = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    return server, client, HttpConnection(server, idle_timeout=2, max_body=16)


def test_pieces_written_at_once_go_whole_and_in_order_even_when_the_socket_is_full():
    """write_now (a board follower's push) frames its piece as send would; what a full
    socket does not take goes before the next piece, and nothing goes before the first."""
    req = b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n"
    big = b"x" * (4 << 20)  # more than any socket buffer holds
    said: list[object] = []

    async def main() -> bytes:
        server, client, conn = _socket_pair()
        got = bytearray()
        reading = trio.Event()

        async def read() -> None:
            await reading.wait()
            while data := await client.receive_some(1 << 16):
                got.extend(data)

        async with trio.open_nursery() as n:
            n.start_soon(read)
            await client.send_all(req)
            assert await conn.receive() is not None
            await conn.start(200, [("transfer-encoding", "chunked")])
            said.append(conn.write_now(b"early\n"))  # not framed by h11 yet: no
            await conn.send(b"one\n")
            said.append(conn.write_now(b"two\n"))
            said.append(conn.write_now(big))  # the socket takes part of it
            said.append(conn.unsent)
            said.append(conn.write_now(b"three\n"))  # never past the unsent rest
            reading.set()
            await conn.send(b"")  # what the follower yields to have the rest go out
            said.append(conn.unsent)
            await conn.send(b"four\n")
            await conn.end()
            await server.aclose()
        return bytes(got)

    out = trio.run(main)
    assert said == [False, True, True, True, False, False]
    assert _client_read(req, out) == b"one\ntwo\n" + big + b"four\n"


def test_requests_pipelined_in_one_read_still_let_other_tasks_run_between_them():
    """The first request's bytes are read without a wait and answers may not wait
    either, so a client pipelining requests in one write is answered from h11's
    buffer: each later one waits its turn behind the other tasks."""
    ran: list[str] = []

    async def main() -> None:
        server, client, conn = _socket_pair()

        async def other() -> None:
            ran.append("other")

        async with trio.open_nursery() as n:
            async def answer(req: Incoming) -> bool:
                ran.append(req.target)  # answers without a checkpoint of its own
                if req.target == "/0":
                    n.start_soon(other)
                await conn.respond(200, [], b"ok")
                return True

            await client.send_all(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i
                                           for i in range(3)))
            await client.send_eof()
            n.start_soon(serve_connection, conn, answer, answer, log)
        await client.aclose()

    trio.run(main)
    assert ran[0] == "/0" and ran.index("other") < ran.index("/2")
