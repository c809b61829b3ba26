"""The wake proxy test rig (tests/fixtures/wakeproxy.py) against a fake HTTP upstream.

The "daemon" is a ``sleep`` process (it only has to be stopped and
continued), and the upstream a thread that answers any request with 101 and
then echoes, the way a WebSocket upgrade would turn into a byte stream.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest
from fixtures.wakeproxy import WakeProxy

UPGRADE = (b"GET /awp HTTP/1.1\r\nHost: sandbox\r\nUpgrade: websocket\r\n"
           b"Connection: Upgrade\r\nSec-WebSocket-Protocol: awp\r\n\r\n")


class _Upstream:
    """Answers every request with 101, then echoes what follows."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                data = c.recv(4096)
                if not data:
                    return
                buf += data
            self.requests += 1
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\n\r\n")
            rest = buf.split(b"\r\n\r\n", 1)[1]
            if rest:
                c.sendall(rest)
            while data := c.recv(4096):
                c.sendall(data)
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _request(port: int, data: bytes = UPGRADE) -> bytes:
    """Send ``data``, read until the far end closes or a reply head arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            return b"RST"
        return got or b"EOF"


def _wait(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.01)


@pytest.fixture
def rig():
    sleeper = subprocess.Popen(["sleep", "60"])
    up = _Upstream()
    proxy = WakeProxy(up.port, sleeper.pid, wake_time=0.4, http=True)
    yield proxy, up, sleeper
    proxy.close()
    up.close()
    sleeper.kill()
    sleeper.wait()


def test_http_mode_answers_503_while_waking_then_proxies(rig):
    proxy, up, sleeper = rig
    assert _request(proxy.port).startswith(b"HTTP/1.1 101")
    proxy.pause()
    _wait(lambda: _state(sleeper.pid) == "T")
    t0 = time.monotonic()
    assert _request(proxy.port).startswith(b"HTTP/1.1 503")  # this one starts the wake
    _wait(lambda: _state(sleeper.pid) != "T")
    assert proxy.wakes == 1 and proxy.state == "waking"
    assert _request(proxy.port).startswith(b"HTTP/1.1 503")  # still waking
    _wait(lambda: proxy.state == "awake")
    assert time.monotonic() - t0 >= 0.4
    assert _request(proxy.port).startswith(b"HTTP/1.1 101")
    assert (proxy.wakes, proxy.refused, proxy.refused_http) == (1, 2, 2)
    assert up.requests == 2


def test_a_pause_cuts_links_and_tcp_is_refused_with_a_reset(rig):
    proxy, up, sleeper = rig
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        s.sendall(UPGRADE + b"hello")
        got = b""
        while not got.endswith(b"hello"):
            got += s.recv(4096)
        proxy.pause()
        try:
            assert s.recv(4096) == b""
        except ConnectionResetError:
            pass
    assert proxy.cut == 1
    assert _request(proxy.port, b'{"t":"hello"}\n') == b"RST"  # not HTTP: a TCP reset
    assert proxy.wakes == 1 and proxy.refused_http == 0


def test_hold_refuses_without_waking_until_armed(rig):
    proxy, up, sleeper = rig
    proxy.pause(wake_on_dial=False)
    assert _request(proxy.port).startswith(b"HTTP/1.1 503")
    assert proxy.wakes == 0 and _state(sleeper.pid) == "T"
    proxy.arm()
    assert _request(proxy.port).startswith(b"HTTP/1.1 503")
    assert proxy.wakes == 1
    _wait(lambda: _state(sleeper.pid) != "T")
