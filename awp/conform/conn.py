"""A blocking connection to the peer under test, where every wait has a deadline.

The socket is non-blocking and every wait goes through ``select`` with the
time left until an absolute deadline (``time.monotonic()``), so nothing here
can hang.  Writing and reading are interleaved: while a long line goes out,
whatever the peer says (say, ``err too_large`` before the line is finished)
is read into the buffer, so neither side can deadlock on a full socket.

Over the WebSocket binding (``ws://`` and ``wss://``) the socket is a
:class:`~awp.conform.wswire.WsWire`, shaped like one, so nothing above this
module knows which binding it runs on.

Every line the peer sends is decoded and checked against the schema
(:mod:`awp.conform.schema`); problems are collected in :attr:`PeerConn.problems`
for the scenario to report.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..wire.address import Address, parse_address, parse_listen
from ..wire.b64 import b64url
from ..wire.canonical import compact_json
from ..wire.framing import MAX_LINE
from ..wire.ids import IdGenerator
from ..wire.seal import Opener, Sealer, SealError
from ..wire.timefmt import format_ts, now_ms
from .schema import decode, shown

if TYPE_CHECKING:
    from .wswire import WsWire

Tracer = Callable[[str, str], None]  # (arrow, text)
MAX_PROBLEMS = 50


class Fail(Exception):
    """The peer did not meet a scenario's expectation; the message says how."""


class Skip(Exception):
    """The scenario does not apply to this peer (say, a capability it lacks)."""


def remaining(deadline: float) -> float:
    return deadline - time.monotonic()


class PeerConn:
    """One connection to the peer, with deadline-bound reads and writes."""

    def __init__(self, sock: socket.socket | WsWire, label: str, ids: IdGenerator,
                 tracer: Tracer | None = None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.label = label
        self.ids = ids
        self.tracer = tracer
        self._buf = bytearray()
        self._discarding = False  # inside an over-long line: drop to its newline
        self.eof = False
        self.reset = False
        self.closed_in = ""  # the scenario during which the peer closed
        self.scenario = ""
        self.problems: list[str] = []
        self.received: list[dict] = []
        self._raws: dict[int, bytes] = {}
        self.auto_pong = False
        self.write_broken = ""
        self.board_subs_sent = 0  # a later board-sub is answered with a digest by its receiver
        self.sealer: Sealer | None = None  # sealing what we send (SPEC.md "Sealed links")
        self.opener: Opener | None = None  # unsealing what the peer sends
        self.seal_broken = ""  # why the peer's sealed bytes failed, once they did
        # A side connection past its handshake carries control lines (want, done,
        # err) with no envelope: they are held only to being objects of <= 4 KiB.
        self.side_control = False

    # -- opening ----------------------------------------------------------------

    @classmethod
    def dial(cls, address: str, deadline: float, ids: IdGenerator,
             tracer: Tracer | None = None, ca_file: str = "") -> PeerConn:
        """Connect to ``tcp:H:P``, ``unix:/path`` or a ``ws(s)://`` URL before
        ``deadline`` (``ca_file``: CAs trusted for wss beside the system's)."""
        addr = parse_address(address)
        if addr.kind == "ws":
            from .wswire import dial_ws  # wsproto only when the binding is used

            wire = dial_ws(addr, deadline, ca_file)
            conn = cls(wire, address, ids, tracer)
            wire.note = conn.note
            conn.note(f"WebSocket open: {address}, subprotocol awp.v0")
            return conn
        if addr.kind == "tcp":
            left = max(0.05, remaining(deadline))
            try:
                sock = socket.create_connection((addr.host, addr.port), timeout=left)
            except TimeoutError:
                raise Fail(f"cannot connect to {address}: timed out") from None
            except OSError as e:
                raise Fail(f"cannot connect to {address}: {e.strerror or e}") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif addr.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(0.05, remaining(deadline)))
            try:
                sock.connect(addr.path)
            except (OSError, TimeoutError) as e:
                sock.close()
                raise Fail(f"cannot connect to {address}: {e.strerror or e}") from None
        else:
            raise Fail(f"awp conform speaks tcp:, unix: and ws(s):// addresses, not {address!r}")
        return cls(sock, address, ids, tracer)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- tracing ----------------------------------------------------------------

    def _trace(self, arrow: str, raw: bytes) -> None:
        if self.tracer is not None:
            text = raw.decode("utf-8", "replace")
            if len(text) > 600:
                text = text[:600] + f"...({len(raw)} bytes)"
            self.tracer(arrow, text)

    def note(self, text: str) -> None:
        if self.tracer is not None:
            self.tracer("*", text)

    # -- writing ----------------------------------------------------------------

    def envelope(self, obj: dict) -> dict:
        """``obj`` with a fresh ``id`` and ``ts`` (``t`` first) unless given."""
        full: dict = {"t": obj["t"]}
        if "id" not in obj:
            full["id"] = self.ids.next()
        if "ts" not in obj:
            full["ts"] = format_ts(now_ms())
        full.update(obj)
        return full

    def send(self, obj: dict, deadline: float) -> tuple[dict, bytes]:
        """Send one envelope; returns it as sent and its exact bytes (no ``\\n``)."""
        full = self.envelope(obj)
        raw = compact_json(full).encode("utf-8")
        self.send_raw(raw + b"\n", deadline)
        return full, raw

    def seal_sending(self, key: bytes) -> None:
        """Seal every byte sent from now on (after our auth line)."""
        self.sealer = Sealer(key)

    def seal_receiving(self, key: bytes) -> None:
        """Unseal every byte after the peer's auth line, including what is buffered."""
        self.opener = Opener(key)
        held, self._buf = bytes(self._buf), bytearray()
        self._unseal(held)

    def _unseal(self, data: bytes) -> None:
        assert self.opener is not None
        if self.seal_broken:
            return
        try:
            self._buf += self.opener.feed(data)
        except SealError as e:
            self.seal_broken = str(e)
            self._problem(f"the peer's sealed bytes: {e}")
            self.note(f"sealed bytes from the peer failed: {e}")

    def send_raw(self, data: bytes, deadline: float, *, tolerate_close: bool = False,
                 unsealed: bool = False) -> bool:
        """Write ``data``, reading meanwhile.  Returns False if the peer closed
        or reset before all of it went out (only with ``tolerate_close``;
        otherwise that is a :class:`Fail`).  On a sealed link ``data`` is
        sealed first, unless ``unsealed`` (bytes already made for the wire)."""
        if self.tracer is not None:
            lines = data.rstrip(b"\n").split(b"\n") if len(data) < 65536 else [data.rstrip(b"\n")]
            for ln in lines:
                self._trace(">", ln)
        if self.sealer is not None and not unsealed:
            data = self.sealer.seal(data)
        return self._write(data, deadline, tolerate_close)

    def flush(self, deadline: float, *, tolerate_close: bool = False) -> bool:
        """Push out what the wire still holds (frames a ws scenario queued itself)."""
        return self._write(b"", deadline, tolerate_close)

    def _unflushed(self) -> int:
        return getattr(self.sock, "unflushed", 0)

    def _ready(self) -> bool:
        """Bytes already off the socket but not handed over yet (TLS, a WebSocket)."""
        pending = getattr(self.sock, "pending", None)
        return bool(pending is not None and pending())

    def _write(self, data: bytes, deadline: float, tolerate_close: bool) -> bool:
        view = memoryview(data)
        while view or self._unflushed():
            left = remaining(deadline)
            if left <= 0:
                raise Fail(f"timed out writing to the peer ({len(view)} of {len(data)} bytes"
                           " not taken)")
            rlist = [] if self.eof else [self.sock]
            try:
                r, w, _ = select.select(rlist, [self.sock], [], left)
            except (OSError, ValueError) as e:
                raise Fail(f"connection failed: {e}") from None
            if r or (not self.eof and self._ready()):
                self._recv_once()
            if w:
                try:
                    if not view:
                        self.sock.flush()  # only a WsWire has frames of its own to flush
                        continue
                    n = self.sock.send(view[:262144])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    self.write_broken = e.strerror or str(e)
                    if tolerate_close:
                        return False
                    raise Fail(f"the peer closed the connection while we wrote ({e.strerror or e})"
                               f"{self._last_seen()}") from None
                view = view[n:]
        return True

    def half_close(self) -> None:
        if self.sealer is not None and not self.sealer.finished:
            try:  # a sealed half-close is the FINAL record, then the socket's own
                self.send_raw(self.sealer.final(), time.monotonic() + 5, tolerate_close=True,
                              unsealed=True)
            except Fail:
                pass
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # -- reading ----------------------------------------------------------------

    def _recv_once(self) -> None:
        try:
            data = self.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
            self.reset = True
        if not data:
            if not self.eof:
                self.eof = True
                self.closed_in = self.scenario
                self.note("connection reset by the peer" if self.reset else
                          "the peer closed the connection (EOF)")
                if self.opener is not None and not self.opener.finished and not self.reset:
                    self.note("the peer's sealed stream ended without its final record")
            return
        if self.opener is not None:
            self._unseal(data)
        else:
            self._buf += data

    def _take_line(self) -> bytes | None:
        """The next complete line in the buffer, handling over-long lines."""
        while True:
            nl = self._buf.find(b"\n")
            if self._discarding:
                if nl < 0:
                    self._buf.clear()
                    return None
                del self._buf[:nl + 1]
                self._discarding = False
                continue
            if nl < 0:
                if len(self._buf) > MAX_LINE:
                    self._problem("the peer sent a line over 1 MiB")
                    self.note("line over 1 MiB from the peer (discarded)")
                    self._buf.clear()
                    self._discarding = True
                return None
            if nl > MAX_LINE:
                self._problem(f"the peer sent a line of {nl} bytes (over 1 MiB)")
                del self._buf[:nl + 1]
                continue
            raw = bytes(self._buf[:nl])
            del self._buf[:nl + 1]
            return raw

    def next_line(self, deadline: float) -> dict | None:
        """The next line from the peer (decoded; a non-JSON line comes back as
        ``{"_invalid": text}``), None at EOF.  Raises TimeoutError at the deadline."""
        while True:
            raw = self._take_line()
            if raw is not None:
                return self._handle(raw)
            if self.eof:
                if self._buf:
                    self.note(f"unterminated final fragment ignored: {shown(bytes(self._buf))}")
                    self._buf.clear()
                return None
            if self._ready():
                self._recv_once()
                continue
            left = remaining(deadline)
            if left <= 0:
                raise TimeoutError
            try:
                r, _, _ = select.select([self.sock], [], [], left)
            except (OSError, ValueError):
                self.eof = True
                continue
            if r:
                self._recv_once()

    def _handle(self, raw: bytes) -> dict:
        self._trace("<", raw)
        obj, problems = decode(raw)
        if self.side_control and obj is not None:
            problems = ([f"side control line of {len(raw)} bytes is over 4096"]
                        if len(raw) > 4096 else [])
        if obj is None:
            self._problem(*problems)
            line: dict = {"_invalid": shown(raw, 2000)}
        else:
            self._problem(*[f"{p} (in {shown(obj, 160)})" for p in problems])
            line = obj
        # Bounded memory whatever the peer floods us with: recent lines only,
        # and raw bytes only for hellos (the auth transcript needs them) and
        # board lines (records are relayed byte for byte, which is checked).
        self.received.append(line)
        if len(self.received) > 400:
            for old in self.received[:200]:
                self._raws.pop(id(old), None)
            del self.received[:200]
        t = line.get("t")
        if t == "hello" or (isinstance(t, str) and t.startswith("board-")):
            self._raws[id(line)] = raw
        if self.auto_pong and line.get("t") == "ping" and isinstance(line.get("id"), str) \
                and not self.eof:
            try:
                self.send({"t": "pong", "re": line["id"]}, time.monotonic() + 5)
            except Fail:
                pass
        return line

    def _problem(self, *problems: str) -> None:
        room = MAX_PROBLEMS - len(self.problems)
        if room > 0:
            self.problems += problems[:room]
        elif problems and not self.problems[-1].startswith("(more problems"):
            self.problems.append("(more problems not shown)")

    def raw_of(self, line: dict) -> bytes:
        """The exact bytes a received line arrived as (the auth transcript needs them)."""
        return self._raws[id(line)]

    def _last_seen(self) -> str:
        if not self.received:
            return ""
        return "; last line from the peer: " + shown(self.received[-1], 160)

    def expect(self, pred: Callable[[dict], bool], deadline: float, what: str, *,
               reject: Callable[[dict], bool] | None = None,
               explain: Callable[[dict], str] | None = None) -> dict:
        """Read until a line matches ``pred``; ``reject`` ends the wait with a
        :class:`Fail` on an unwanted line (by default: any err, any non-JSON line),
        worded by ``explain`` when it has something better to say."""
        if reject is None:
            reject = is_bad
        seen: list[dict] = []
        start = time.monotonic()
        while True:
            try:
                line = self.next_line(deadline)
            except TimeoutError:
                waited = time.monotonic() - start
                got = (": got only " + ", ".join(describe(x) for x in seen[-6:])) if seen else \
                    ": got nothing"
                raise Fail(f"expected {what} within {waited:.1f}s{got}") from None
            if line is None:
                how = " (reset)" if self.reset else ""
                before = (" after " + ", ".join(describe(x) for x in seen[-6:])) if seen else ""
                raise Fail(f"expected {what}, but the peer closed the connection{how}{before}")
            if pred(line):
                return line
            if reject(line):
                better = explain(line) if explain is not None else ""
                raise Fail(better or f"expected {what}, got {describe(line, full=True)}")
            seen = [*seen[-5:], line]

    def expect_close(self, deadline: float, what: str = "the peer to close") -> list[dict]:
        """Read until EOF (a half-close is enough); returns the lines read meanwhile."""
        seen: list[dict] = []
        start = time.monotonic()
        while True:
            try:
                line = self.next_line(deadline)
            except TimeoutError:
                waited = time.monotonic() - start
                raise Fail(f"expected {what}, but the connection was still open after"
                           f" {waited:.1f}s") from None
            if line is None:
                return seen
            seen = [*seen[-50:], line]

    def quiet_for(self, seconds: float, deadline: float) -> list[dict]:
        """Read whatever comes for ``seconds`` (bounded by ``deadline``); returns
        the errs, non-JSON lines and acks among it (the rest is only validated)."""
        until = min(deadline, time.monotonic() + seconds)
        seen: list[dict] = []
        while True:
            try:
                line = self.next_line(until)
            except TimeoutError:
                return seen
            if line is None:
                return seen
            if is_bad(line) or line.get("t") == "ack":
                seen.append(line)  # what callers look at; the rest is not kept
                if len(seen) > 100:
                    return seen


def is_bad(line: dict) -> bool:
    return "_invalid" in line or line.get("t") == "err"


def describe(line: dict, full: bool = False) -> str:
    """A short description of a received line for a report."""
    if "_invalid" in line:
        return "a non-JSON line " + shown(line["_invalid"], 120)
    t = line.get("t")
    if t == "err":
        detail = line.get("detail")
        code = line.get("code")
        return f"err {code}" + (f" ({shown(detail, 120)})" if isinstance(detail, str)
                                and detail else "")
    if full:
        return shown(line, 200)
    return str(t)


class Listener:
    """A listening socket for listen mode (``tcp:H:P``, port 0 allowed, or ``unix:/path``)."""

    def __init__(self, address: str) -> None:
        addr = parse_listen(address)
        self.path = ""
        if addr.kind == "tcp":
            family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((addr.host, addr.port))
            port = self.sock.getsockname()[1]
            self.address = str(Address(kind="tcp", host=addr.host, port=port))
        elif addr.kind == "unix":
            if os.path.exists(addr.path):
                import stat

                if not stat.S_ISSOCK(os.stat(addr.path).st_mode):
                    raise OSError(f"{addr.path} exists and is not a socket")
                os.unlink(addr.path)
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(addr.path)
            self.path = addr.path
            self.address = f"unix:{addr.path}"
        else:
            raise ValueError("listen mode takes tcp:HOST:PORT or unix:/path")
        self.sock.listen(8)
        self.sock.setblocking(False)

    def accept(self, deadline: float, alive: Callable[[], str]) -> socket.socket:
        """The first inbound connection before ``deadline``.  ``alive`` returns
        a reason to give up early (the peer's command exited) or ``""``."""
        while True:
            left = remaining(deadline)
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([self.sock], [], [], min(left, 0.1))
            if r:
                try:
                    conn, _ = self.sock.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                if conn.family in (socket.AF_INET, socket.AF_INET6):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return conn
            why = alive()
            if why:
                raise Fail(why)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def random_thread() -> str:
    alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
    return "thr_" + "".join(alphabet[b % 32] for b in os.urandom(8))


def random_nonce(n: int = 32) -> str:
    return b64url(os.urandom(n))
