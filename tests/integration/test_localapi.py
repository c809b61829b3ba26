"""The local API plumbing end to end: trio/h11 server in a thread, stdlib client.

The server runs with ``trio.run`` in a background thread on a short socket
path; tests drive it with ``LocalClient`` (or a raw socket where the point is
misbehaving clients) and poke the trio side through ``trio.from_thread``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import trio

from awp.base.sockpath import find_socket, socket_path_for_home, write_socket_pointer
from awp.localapi.client import (
    ApiFailure,
    DaemonNotRunning,
    LocalClient,
    ProtocolError,
    quote,
)
from awp.localapi.server import ApiError, Request, Router, Stream, serve_unix

WAIT = 10.0  # generous deadline for things that should happen "promptly"


class State:
    """What handlers share with the test thread."""

    def __init__(self) -> None:
        self.release: list[trio.Event] = []
        self.produced_last = threading.Event()
        self.stream_closed = threading.Event()
        self.forever_closed = threading.Event()
        self.firehose_closed = threading.Event()
        self.firehose_sent = 0


def make_router(state: State) -> Router:
    router = Router()

    @router.route("GET", "/v1/echo")
    async def echo_get(req: Request) -> dict:
        return {
            "method": req.method,
            "path": req.path,
            "query": req.query,
            "tags": req.query_list("tag"),
            "conn": req.connection_id,
        }

    @router.route("POST", "/v1/echo")
    async def echo_post(req: Request) -> dict:
        return {
            "body": req.json(),
            "conn": req.connection_id,
            "type": req.headers.get("content-type"),
        }

    @router.route("GET", "/v1/items/{item}/parts/{part}")
    async def item_part(req: Request) -> dict:
        return {"params": req.params}

    @router.route("GET", "/v1/items/special/parts/{part}")
    async def special_part(req: Request) -> dict:
        return {"special": req.params}

    @router.route("GET", "/v1/fail")
    async def fail(req: Request) -> dict:
        raise ApiError(409, "that thread is private", "private")

    @router.route("GET", "/v1/crash")
    async def crash(req: Request) -> dict:
        raise RuntimeError("boom")

    @router.route("GET", "/v1/unjsonable")
    async def unjsonable(req: Request) -> dict:
        return {"x": object()}

    @router.route("GET", "/v1/badtuple")
    async def badtuple(req: Request) -> tuple:
        return (200, {}, "extra")

    @router.route("POST", "/v1/created")
    async def created(req: Request) -> tuple[int, dict]:
        return 201, {"made": req.json()}

    @router.route("POST", "/v1/nothing")
    async def nothing(req: Request) -> None:
        return None

    @router.route("GET", "/v1/list")
    async def a_list(req: Request) -> list:
        return [1, "two", {"three": 3}, "ünïcode"]

    @router.route("GET", "/v1/stream")
    async def stepwise(req: Request) -> Stream:
        state.release = [trio.Event(), trio.Event()]

        async def gen():
            try:
                yield {"n": 1}
                await state.release[0].wait()
                yield {"n": 2}
                await state.release[1].wait()
                state.produced_last.set()
                yield {"n": 3, "text": "ünïcode"}
            finally:
                state.stream_closed.set()

        return Stream(gen)

    @router.route("GET", "/v1/forever")
    async def forever(req: Request) -> Stream:
        async def gen():
            try:
                yield {"hello": True}
                await trio.sleep_forever()
            finally:
                state.forever_closed.set()

        return Stream(gen())

    @router.route("GET", "/v1/firehose")
    async def firehose(req: Request) -> Stream:
        async def gen():
            try:
                n = 0
                while True:
                    state.firehose_sent = n
                    yield {"n": n, "pad": "x" * 200}
                    n += 1
            finally:
                state.firehose_closed.set()

        return Stream(gen)

    @router.route("GET", "/v1/broken-stream")
    async def broken_stream(req: Request) -> Stream:
        async def gen():
            yield {"n": 1}
            raise RuntimeError("stream source failed")

        return Stream(gen)

    return router


class ServerThread:
    """``serve_unix`` under ``trio.run`` in a daemon thread."""

    def __init__(self, path: str, router: Router, **kwargs) -> None:
        self.path = path
        self.router = router
        self.kwargs = kwargs
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.scope: trio.CancelScope | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the test thread
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self.scope = nursery.cancel_scope
            await nursery.start(
                functools.partial(serve_unix, self.path, self.router, **self.kwargs)
            )
            self.ready.set()

    def run_sync(self, fn, *args):
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.ready.wait(WAIT), "server did not start"
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.run_sync(self.scope.cancel)
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "server did not stop"
        if self.error is not None:
            raise self.error


@pytest.fixture
def sockdir():
    # Short on purpose: pytest's tmp_path can exceed the AF_UNIX limit.
    path = tempfile.mkdtemp(dir="/tmp", prefix="awpt")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state():
    return State()


@pytest.fixture
def server(sockdir, state):
    with ServerThread(os.path.join(sockdir, "awp.sock"), make_router(state)) as srv:
        yield srv


@pytest.fixture
def client(server):
    with LocalClient(server.path, timeout=WAIT) as c:
        yield c


def wait_until(predicate, timeout: float = WAIT) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# ------------------------------------------------------------ JSON requests


def test_get_and_post_round_trip(client):
    got = client.get("/v1/echo")
    assert got["method"] == "GET" and got["path"] == "/v1/echo" and got["query"] == {}
    body = {"to": "builder", "text": "héllo \u2603", "n": [1, 2.5, None, True]}
    posted = client.post("/v1/echo", body)
    assert posted["body"] == body
    assert posted["type"] == "application/json"
    assert client.get("/v1/list") == [1, "two", {"three": 3}, "ünïcode"]


def test_status_from_tuple_and_empty_answer(client):
    assert client.post("/v1/created", {"a": 1}) == {"made": {"a": 1}}
    assert client.post("/v1/nothing") is None
    # The connection is still in step after a 204.
    assert client.get("/v1/echo")["method"] == "GET"


def test_path_params_are_decoded(client):
    got = client.get(f"/v1/items/{quote('a/b c%')}/parts/{quote('ü')}")
    assert got == {"params": {"item": "a/b c%", "part": "ü"}}
    # A literal segment wins over a parameter.
    assert client.get("/v1/items/special/parts/7") == {"special": {"part": "7"}}
    # A trailing slash is tolerated.
    assert client.get("/v1/items/x/parts/y/") == {"params": {"item": "x", "part": "y"}}


def test_query_params_repeated_and_encoded(client):
    got = client.request(
        "GET",
        "/v1/echo",
        query={"tag": ["a b", "ü&=x", "100%"], "q": "x+y", "k": ["1", "2"], "none": None},
    )
    assert got["tags"] == ["a b", "ü&=x", "100%"]
    assert got["query"]["q"] == "x+y"
    assert got["query"]["k"] == "2"  # last value wins
    assert "none" not in got["query"]
    got = client.get("/v1/echo", flag=True, n=3)
    assert got["query"] == {"flag": "true", "n": "3"}
    # A query written into the path is kept and combined with ``query``.
    got = client.request("GET", "/v1/echo?tag=a%20b&x=1", query={"tag": "c"})
    assert got["tags"] == ["a b", "c"] and got["query"]["x"] == "1"


def test_unknown_path_is_404(client):
    with pytest.raises(ApiFailure) as err:
        client.get("/v1/x")
    assert err.value.status == 404
    assert str(err.value) == "no such endpoint: GET /v1/x"
    assert err.value.code == "no_endpoint"


def test_wrong_method_is_405(client):
    with pytest.raises(ApiFailure) as err:
        client.request("DELETE", "/v1/echo")
    assert err.value.status == 405
    assert err.value.code == "method_not_allowed"
    assert "GET, POST" in str(err.value)


def test_api_error_status_and_code(client):
    with pytest.raises(ApiFailure) as err:
        client.get("/v1/fail")
    assert (err.value.status, err.value.message, err.value.code) == (
        409,
        "that thread is private",
        "private",
    )


def test_bad_json_body_is_400(client):
    with pytest.raises(ApiFailure) as err:
        client.post("/v1/echo", b"{not json")
    assert err.value.status == 400
    assert err.value.code == "bad_json"
    assert str(err.value).startswith("bad JSON body: ")


def test_crash_is_500_logged_and_server_keeps_serving(client, caplog):
    with caplog.at_level(logging.ERROR, logger="awp.localapi"):
        with pytest.raises(ApiFailure) as err:
            client.get("/v1/crash")
        assert err.value.status == 500
        assert str(err.value) == "internal error: RuntimeError: boom"
        assert any(
            r.name == "awp.localapi" and r.exc_info and "boom" in str(r.exc_info[1])
            for r in caplog.records
        )
        with pytest.raises(ApiFailure) as err:
            client.get("/v1/unjsonable")
        assert err.value.status == 500
        assert "TypeError" in str(err.value)
        with pytest.raises(ApiFailure) as err:
            client.get("/v1/badtuple")
        assert err.value.status == 500
    assert client.get("/v1/echo")["method"] == "GET"
    with LocalClient(client.sock_path) as other:
        assert other.get("/v1/echo")["method"] == "GET"


def test_keep_alive_reuses_one_connection(server):
    with LocalClient(server.path) as c:
        first = c.get("/v1/echo")["conn"]
        assert c.post("/v1/echo", {"x": 1})["conn"] == first
        with pytest.raises(ApiFailure):
            c.get("/v1/fail")  # error answers keep the connection too
        assert c.get("/v1/echo")["conn"] == first
    with LocalClient(server.path) as other:
        assert other.get("/v1/echo")["conn"] != first


def test_reconnects_when_idle_connection_was_closed(sockdir, state):
    router = make_router(state)
    path = os.path.join(sockdir, "awp.sock")
    with ServerThread(path, router, idle_timeout=0.2) as srv:
        c = LocalClient(srv.path)
        first = c.get("/v1/echo")["conn"]
        time.sleep(0.5)  # outlive the server's idle timeout on purpose
        # POST is not retried blindly: the dead connection is noticed first.
        assert c.post("/v1/echo", {"x": 1})["conn"] != first
        c.close()


def test_several_requests_on_one_raw_connection(server):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(server.path)
        s.sendall(
            b"GET /v1/echo HTTP/1.1\r\nHost: awp\r\n\r\n"
            b"GET /v1/list HTTP/1.1\r\nHost: awp\r\nConnection: close\r\n\r\n"
        )
        data = b""
        s.settimeout(WAIT)
        while chunk := s.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert b"content-type: application/json" in data.lower()
    assert b'"two"' in data


def test_head_is_get_without_body(server):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(server.path)
        s.settimeout(WAIT)
        s.sendall(
            b"HEAD /v1/list HTTP/1.1\r\nHost: awp\r\n\r\n"
            b"HEAD /v1/stream HTTP/1.1\r\nHost: awp\r\n\r\n"
            b"GET /v1/list HTTP/1.1\r\nHost: awp\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    heads = data.split(b"HTTP/1.1 ")[1:]
    assert len(heads) == 3
    assert heads[0].startswith(b"200 ") and heads[0].endswith(b"\r\n\r\n")
    assert heads[1].startswith(b"200 ") and b"application/x-ndjson" in heads[1]
    assert heads[2].rstrip().endswith(b'"\xc3\xbcn\xc3\xafcode"]')


def test_malformed_request_gets_400(server):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(server.path)
        s.settimeout(WAIT)
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        data = s.recv(65536)
    assert data.startswith(b"HTTP/1.1 400 ")


# ------------------------------------------------------------------ streams


def test_stream_objects_arrive_as_produced(client, server, state):
    with client.stream("GET", "/v1/stream") as stream:
        assert stream.headers["content-type"] == "application/x-ndjson"
        assert "chunked" in stream.headers["transfer-encoding"]
        assert next(stream) == {"n": 1}
        assert not state.produced_last.is_set()
        server.run_sync(state.release[0].set)
        assert next(stream) == {"n": 2}
        assert not state.produced_last.is_set()
        server.run_sync(state.release[1].set)
        assert next(stream) == {"n": 3, "text": "ünïcode"}
        with pytest.raises(StopIteration):
            next(stream)
    assert state.stream_closed.wait(WAIT)
    # The client still works for plain requests afterwards.
    assert client.get("/v1/echo")["method"] == "GET"


def test_client_hangup_cancels_waiting_stream(client, state):
    stream = client.stream("GET", "/v1/forever")
    assert next(stream) == {"hello": True}
    assert not state.forever_closed.is_set()
    stream.close()
    assert state.forever_closed.wait(WAIT), "server kept the stream iterator open"


def test_client_hangup_stops_fast_producer(client, state):
    stream = client.stream("GET", "/v1/firehose")
    for _ in range(3):
        next(stream)
    stream.close()
    assert state.firehose_closed.wait(WAIT)
    sent = state.firehose_sent
    time.sleep(0.1)
    assert state.firehose_sent == sent  # nothing produced after the hangup


def test_stream_failure_is_a_truncated_response(client, caplog):
    with caplog.at_level(logging.ERROR, logger="awp.localapi"):
        stream = client.stream("GET", "/v1/broken-stream")
        assert next(stream) == {"n": 1}
        with pytest.raises(ConnectionError, match="mid-response"):
            next(stream)
    assert any("stream source failed" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert client.get("/v1/echo")["method"] == "GET"


def test_stream_errors_before_start_raise_at_call(client):
    with pytest.raises(ApiFailure) as err:
        client.stream("GET", "/v1/nope")
    assert err.value.status == 404


# ---------------------------------------------------------- socket handling


def test_socket_mode_is_0600(server):
    assert stat.S_ISSOCK(os.lstat(server.path).st_mode)
    assert stat.S_IMODE(os.lstat(server.path).st_mode) == 0o600


def test_socket_removed_on_shutdown(sockdir, state):
    path = os.path.join(sockdir, "awp.sock")
    with ServerThread(path, make_router(state)):
        assert os.path.exists(path)
    assert not os.path.exists(path)


def test_stale_socket_is_replaced(sockdir, state):
    path = os.path.join(sockdir, "awp.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # bound, never listening, then abandoned: a crashed daemon
    dead.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    with pytest.raises(DaemonNotRunning, match="nothing listening"):
        LocalClient(path).get("/v1/echo")
    with ServerThread(path, make_router(state)) as srv, LocalClient(srv.path) as c:
        assert c.get("/v1/echo")["method"] == "GET"
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600


def test_live_socket_is_not_taken_over(server):
    with pytest.raises(OSError, match="another daemon is serving"):
        trio.run(serve_unix, server.path, Router())
    # ... and the running server is unharmed.
    with LocalClient(server.path) as c:
        assert c.get("/v1/echo")["method"] == "GET"


def test_non_socket_file_is_not_replaced(sockdir):
    path = os.path.join(sockdir, "awp.sock")
    with open(path, "w") as f:
        f.write("precious")
    with pytest.raises(FileExistsError, match="not a socket"):
        trio.run(serve_unix, path, Router())
    with open(path) as f:
        assert f.read() == "precious"


def test_daemon_not_running_for_missing_socket(sockdir):
    with pytest.raises(DaemonNotRunning, match="no socket") as err:
        LocalClient(os.path.join(sockdir, "awp.sock")).get("/v1/status")
    assert err.value.sock_path.endswith("awp.sock")
    with pytest.raises(DaemonNotRunning):
        LocalClient(os.path.join(sockdir, "no-dir", "awp.sock")).stream("GET", "/v1/tail")


def test_long_home_fallback_with_xdg_runtime_dir(sockdir, state, monkeypatch):
    runtime = os.path.join(sockdir, "run")
    os.mkdir(runtime, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    home = os.path.join(sockdir, "h" * 120)
    os.mkdir(home)
    path = socket_path_for_home(home)
    assert os.path.dirname(path) == runtime
    write_socket_pointer(home, path)
    with ServerThread(path, make_router(state)), LocalClient.for_home(home) as c:
        assert c.sock_path == path
        assert c.get("/v1/echo")["method"] == "GET"


def test_long_home_fallback_without_xdg_runtime_dir(sockdir, state, monkeypatch):
    from awp.base import sockpath

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(sockpath, "_TMP_ROOT", sockdir)
    home = os.path.join(sockdir, "h" * 120)
    os.mkdir(home)
    path = socket_path_for_home(home)
    assert os.path.dirname(path) == os.path.join(sockdir, f"awp-{os.getuid()}")
    # No pointer written: the client derives the same path on its own.
    assert find_socket(home) == path
    with ServerThread(path, make_router(state)), LocalClient.for_home(home) as c:
        assert c.get("/v1/echo")["method"] == "GET"


def test_overlong_socket_path_is_refused_clearly(sockdir):
    path = os.path.join(sockdir, "s" * 120)
    with pytest.raises(OSError, match="too long for AF_UNIX"):
        trio.run(serve_unix, path, Router())


# ------------------------------------------------------------- body limits


def test_oversized_body_is_413(client):
    big = b'"' + b"a" * (64 * 1024 * 1024) + b'"'
    with pytest.raises(ApiFailure) as err:
        client.post("/v1/echo", big)
    assert err.value.status == 413
    assert err.value.code == "too_large"
    assert client.post("/v1/echo", {"small": True})["body"] == {"small": True}


def test_oversized_chunked_body_is_413(sockdir, state):
    path = os.path.join(sockdir, "awp.sock")
    with ServerThread(path, make_router(state), max_body=1000):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            s.settimeout(WAIT)
            s.sendall(b"POST /v1/echo HTTP/1.1\r\nHost: awp\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                for _ in range(3):
                    s.sendall(b"200\r\n" + b"a" * 0x200 + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer 413 and close before the last chunk
            data = s.recv(65536)
        assert data.startswith(b"HTTP/1.1 413 ")
        with LocalClient(path) as c:
            assert c.post("/v1/echo", "x" * 500)["body"] == "x" * 500


# ------------------------------------------------------ slow/stalled peers


def test_stalled_client_does_not_block_others(server):
    stalled = socket.socket(socket.AF_UNIX)
    stalled.connect(server.path)
    stalled.sendall(b"POST /v1/echo HTTP/1.1\r\nHost: awp\r\nContent-Length: 100\r\n\r\n{")
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(server.path)
    try:
        with LocalClient(server.path, timeout=WAIT) as c:
            for _ in range(3):
                assert c.get("/v1/echo")["method"] == "GET"
    finally:
        stalled.close()
        silent.close()


# ------------------------------------------ client against broken servers


class FakeServer:
    """A one-shot raw server thread that answers with canned bytes."""

    def __init__(self, path: str, reply: bytes | None, close: bool = True) -> None:
        self.path = path
        self.reply = reply
        self.close_after = close
        self.done = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(1)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            if self.reply is not None:
                conn.sendall(self.reply)
            if not self.close_after:
                self.done.wait(WAIT)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(WAIT)
        self.sock.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Type: app",
        b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"partial":',
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":',
    ],
    ids=["nothing", "mid-head", "mid-body", "mid-chunk"],
)
def test_server_closing_mid_response_is_connection_error(sockdir, reply):
    fake = FakeServer(os.path.join(sockdir, "fake.sock"), reply)
    try:
        with pytest.raises(ConnectionError, match="closed the connection"):
            LocalClient(fake.path, timeout=WAIT).post("/v1/echo", {"x": 1})
    finally:
        fake.stop()


def test_garbage_answer_is_protocol_error(sockdir):
    fake = FakeServer(os.path.join(sockdir, "fake.sock"), b"SSH-2.0-OpenSSH\r\n\r\n")
    try:
        with pytest.raises(ProtocolError):
            LocalClient(fake.path, timeout=WAIT).get("/v1/echo")
    finally:
        fake.stop()


def test_silent_server_times_out(sockdir):
    fake = FakeServer(os.path.join(sockdir, "fake.sock"), None, close=False)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="did not answer"):
            LocalClient(fake.path, timeout=0.3).get("/v1/echo")
        assert time.monotonic() - start < 5
    finally:
        fake.stop()


def test_stream_read_timeout(sockdir):
    reply = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{"a":1}\n\r\n'
    fake = FakeServer(os.path.join(sockdir, "fake.sock"), reply, close=False)
    try:
        stream = LocalClient(fake.path).stream("GET", "/v1/tail", read_timeout=0.3)
        assert next(stream) == {"a": 1}
        with pytest.raises(TimeoutError):
            next(stream)
    finally:
        fake.stop()


# ------------------------------------------------------------ interop/curl


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_can_talk_to_the_socket(server):
    out = subprocess.run(
        ["curl", "-sS", "--unix-socket", server.path, "http://awp/v1/echo?tag=a&tag=b"],
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    assert json.loads(out.stdout)["tags"] == ["a", "b"]
    big = json.dumps({"text": "y" * 5000})
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--unix-socket",
            server.path,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            big,
            "http://awp/v1/echo",
        ],
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    assert json.loads(out.stdout)["body"] == json.loads(big)


# --------------------------------------------------------- import budget


FORBIDDEN = ("trio", "httpx", "typer", "h11", "http", "urllib", "anyio", "email")


def _imported(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def test_client_import_stays_stdlib_only():
    # Subtract what the interpreter loads before our code runs (an editable
    # install's path finder, for one, pulls in pathlib and urllib.parse).
    baseline = _imported("pass")
    ours = _imported("import awp.localapi.client") - baseline
    assert "awp.localapi.client" in ours
    bad = sorted(
        name for name in ours if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )
    assert bad == [], f"awp.localapi.client pulls in {bad}"
    # Checked the direct way as well, for interpreters without -X importtime output.
    probe = (
        "import sys; before = set(sys.modules); import awp.localapi.client; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    bad = sorted(n for n in out if any(n == f or n.startswith(f + ".") for f in FORBIDDEN))
    assert bad == [], f"awp.localapi.client pulls in {bad}"
