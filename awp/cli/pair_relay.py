"""The CLI's end of a pair stream: the upgrade request on awp.sock, then the copying.

Stdlib only.  After ``101 Switching Protocols`` the Unix socket carries the
stream's raw bytes; this module copies them between the socket and a
command's pipes (or our own stdin and stdout), one chunk at a time on each
side so a reader that stops holds the writer back:

* the command's stdout (or our stdin) at its end: ``shutdown(SHUT_WR)``, which
  the daemon passes on to the peer as a half-close;
* the socket at its end: the command's stdin is closed (it sees EOF);
* the command exited: the socket is closed entirely, which ends the session.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading

CHUNK = 64 * 1024
SOCK_BUF = 256 * 1024
PROTOCOL = "awp-pair"


class UpgradeRefused(Exception):
    """The daemon answered the upgrade with an error: its status, message and code."""

    def __init__(self, status: int, message: str, code: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def upgrade(sock_path: str, path: str, body: dict) -> tuple[socket.socket, dict, bytes]:
    """POST ``path`` asking to switch to raw bytes: the socket, the 101's headers and
    any bytes read past them.  Raises :class:`UpgradeRefused` for any other answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF)
        sock.connect(sock_path)
        data = json.dumps(body).encode()
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: awp\r\nConnection: Upgrade\r\n"
            f"Upgrade: {PROTOCOL}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            got = sock.recv(CHUNK)
            if not got:
                raise ConnectionError("the daemon closed the connection before answering")
            buf += got
            if len(buf) > 64 * 1024:
                raise ConnectionError("the daemon's answer has no end of head")
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("utf-8", "replace").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status == 101:
            return sock, headers, rest
        n = int(headers.get("content-length", "0") or 0)
        while len(rest) < n:
            got = sock.recv(CHUNK)
            if not got:
                break
            rest += got
        try:
            err = json.loads(rest[:n] or b"{}")
        except ValueError:
            err = {}
        raise UpgradeRefused(status, str(err.get("error") or f"HTTP {status}"), err.get("code"))
    except BaseException:
        sock.close()
        raise


def hung_up(sock: socket.socket) -> bool:
    """Whether the daemon closed the connection entirely (the session is over)."""
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN)
    return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _sock_to_fd(sock: socket.socket, rest: bytes, fd: int, close_fd: bool) -> None:
    """Socket -> ``fd`` until the socket's end (or ``fd`` refuses); then close ``fd``."""
    try:
        if rest:
            _write_all(fd, rest)
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            _write_all(fd, data)
    except OSError:
        pass
    finally:
        if close_fd:
            _close_quietly(fd)


def _fd_to_sock(fd: int, sock: socket.socket, close_fd: bool) -> None:
    """``fd`` -> socket until ``fd``'s end, then half-close the socket."""
    try:
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        if close_fd:
            _close_quietly(fd)


def _end(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def run_command(sock: socket.socket, rest: bytes, cmd: list[str]) -> int:
    """Wire ``cmd``'s stdin and stdout to the stream; its exit status."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    cin, cout = os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno())
    proc.stdin.close()
    proc.stdout.close()
    down = threading.Thread(target=_sock_to_fd, args=(sock, rest, cin, True), daemon=True)
    up = threading.Thread(target=_fd_to_sock, args=(cout, sock, True), daemon=True)
    down.start()
    up.start()
    try:
        rc = proc.wait()
        up.join()  # what it wrote before it exited still goes
    except KeyboardInterrupt:
        proc.terminate()
        rc = proc.wait()
    _end(sock)
    return rc


def run_stdio(sock: socket.socket, rest: bytes) -> int:
    """Wire our own stdin and stdout to the stream (``echo hi | awp pair bob``)."""
    down = threading.Thread(target=_sock_to_fd, args=(sock, rest, 1, False), daemon=True)
    up = threading.Thread(target=_fd_to_sock, args=(0, sock, False), daemon=True)
    down.start()
    up.start()
    try:
        down.join()
        # The peer's side ended: wait for ours unless the daemon ended the session.
        while up.is_alive() and not hung_up(sock):
            up.join(0.2)
    except KeyboardInterrupt:
        pass
    _end(sock)
    return 0


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
