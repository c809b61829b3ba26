"""The tailcat listener: a supervised ``tailcat serve`` and its bridged connections.

:mod:`awp.transport.tailcat` sets the transport up, finds the program and
dials; this module is the listening half its docstring describes: one
``tailcat serve --json exec -- <bridge>`` child, kept running with backoff
and watched until its relay connects, whose per-connection bridge (a few
lines of stdlib Python, :data:`BRIDGE_CODE`) reaches the daemon over a
private Unix socket with a preamble naming the peer.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import signal
import stat
import struct
import subprocess
import sys

import trio

from awp.base.files import write_private
from awp.transport import streams
from awp.transport.streams import Listener
from awp.transport.tailcat import (
    _TAILCAT_RE,
    TailcatConfig,
    TailcatError,
    _binary,
    _Child,
    _child_env,
    _clean_line,
    _read_lines,
    _require_config,
    _short,
    bridge_socket_path,
)
from awp.wire.address import Address

log = logging.getLogger("awp.tailcat")

STATE_FILE = "tailcat.json"
KEY_FILE = "tailcat.private.json"
PID_FILE = "tailcat.pid"
BRIDGE_FILE = "tailcat-bridge.py"

ADDRESS_TIMEOUT = 45.0  # serve must print its address within this
GENKEY_TIMEOUT = 60.0
BACKOFF_START = 1.0
BACKOFF_MAX = 60.0
STABLE_AFTER = 60.0  # a child that ran this long earns a fresh backoff
PREAMBLE_TIMEOUT = 10.0
# tailcat v0.7.0, on a machine whose only interface is loopback (some
# sandboxes, our test namespaces), can start with magicsock's network "down":
# its first endpoint update then skips netcheck, picks no home relay, and the
# server sits unreachable until the periodic re-probe 20-26 s later (fixed
# upstream after v0.7.0 by marking the network up first).  A child that shows
# no sign of probing its relay within RELAY_TIMEOUT is restarted at once;
# one that is probing gets RELAY_CONNECT_TIMEOUT to connect.  The address is
# announced once the relay is connected (or reported unreachable).
RELAY_TIMEOUT = 5.0
RELAY_CONNECT_TIMEOUT = 20.0
# Consecutive misses, with no child ever showing those log lines, before we
# conclude this tailcat logs differently and stop restarting it for that.
RELAY_WATCH_GIVE_UP = 6

_RELAY_DOWN_RE = re.compile(r"derp\.Recv\((derp-\d+)\): (.*)$")
_RELAY_UP_RE = re.compile(r"\b(derp-\d+) connected\b")
_RELAY_PROBING_RE = re.compile(r"\bnetcheck: |\bderp-\d+\b|derphttp\.")

_MAGIC = b"AWPTC1"

# The per-connection bridge tailcat runs (``serve exec``), kept in the home as
# tailcat-bridge.py: stdlib only, started with ``python -I -S`` so it costs a
# few milliseconds.  It sends a preamble
# (magic, 2-byte length, "peer-key remote-addr"), then copies bytes both ways,
# passing each direction's EOF on as a half-close.
BRIDGE_CODE = r"""# Written by awp: tailcat runs this for each inbound tunnel connection.
import os, select, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    meta = ("%s %s" % (os.environ.get("TAILCAT_PEER_KEY") or "-",
                       os.environ.get("TAILCAT_REMOTE_ADDR") or "-")).encode()[:512]
    s.sendall(b"AWPTC1" + struct.pack("!H", len(meta)) + meta)
    up = down = True
    while up or down:
        want = ([0] if up else []) + ([s] if down else [])
        ready = select.select(want, [], [], None if down else 60)[0]
        if not ready:
            break
        if 0 in ready:
            data = os.read(0, 65536)
            if data:
                s.sendall(data)
            else:
                up = False
                s.shutdown(socket.SHUT_WR)
        if s in ready:
            data = s.recv(65536)
            if data:
                view = memoryview(data)
                while view:
                    view = view[os.write(1, view):]
            else:
                down = False
                os.close(1)
except OSError:
    pass
"""


# listening: ``tailcat serve ... exec -- <bridge>``


class _InboundStream(trio.abc.HalfCloseableStream):
    """A bridged inbound connection: the Unix stream, named after the tunnel peer."""

    def __init__(self, inner: trio.SocketStream, peer_key: str, remote: str) -> None:
        self._inner = inner
        self.peer_key = peer_key
        self.remote = remote
        short = peer_key[:20] + "..." if len(peer_key) > 23 else peer_key
        self.peer_description = f"tailcat {short}"

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = await stream.receive_some(n - len(buf))
        if not data:
            raise trio.BrokenResourceError("bridge closed during its preamble")
        buf += data
    return buf


class TailcatListener(Listener):
    """A supervised ``tailcat serve`` plus the Unix socket its bridges reach."""

    def __init__(self, cfg: TailcatConfig, sock: trio.socket.SocketType, sock_path: str) -> None:
        super().__init__(Address(kind="tailcat", tailcat=""), [], on_close=None)
        self.cfg = cfg
        self.home = cfg.home
        self.key_path = os.path.join(cfg.home, KEY_FILE)
        self.state_path = os.path.join(cfg.home, STATE_FILE)
        self.pid_path = os.path.join(cfg.home, PID_FILE)
        self.sock_path = sock_path
        self.bridge_path = os.path.join(cfg.home, BRIDGE_FILE)
        self._sock = sock
        self._sock_id = os.stat(sock_path)[stat.ST_INO]
        self._ready = trio.Event()
        self._scope: trio.CancelScope | None = None
        self.child: _Child | None = None
        self.address = ""
        self.last_error = ""
        self.restarts = 0
        self._relay_error = ""
        self._relay_seen = trio.Event()  # connected, or an error from the relay
        self._relay_probing = trio.Event()  # any sign that tailcat works on its relay
        self._relay_misses = 0
        self._watch_relay = True
        self._probing_ever = False  # some child logged relay work: the lines are known

    # -- status -------------------------------------------------------------------

    def _report(self, error: str | None) -> None:
        self.last_error = error or ""
        if self.cfg.report is not None:
            try:
                self.cfg.report(error)
            except Exception:
                log.exception("tailcat status report failed")

    # -- serving ------------------------------------------------------------------

    async def serve(self, handler: streams.Handler, *,
                    task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the supervisor and accept bridged connections until aclose().

        Reports the tailcat address through task_status once tailcat has
        printed it (so the caller learns the address, not a placeholder).
        """
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                if self._closed:
                    nursery.cancel_scope.cancel()
                nursery.start_soon(self._accept_loop_bridge, handler, nursery)
                nursery.start_soon(self._supervise)
                await self._ready.wait()
                task_status.started(self.bound)
        finally:
            await self._cleanup()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
        await self._cleanup()

    async def _cleanup(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            await child.stop()  # shielded inside
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            if os.stat(self.sock_path)[stat.ST_INO] == self._sock_id:
                os.unlink(self.sock_path)
        except OSError:
            pass
        self._remove_pid_file()

    async def _accept_loop_bridge(self, handler: streams.Handler, nursery: trio.Nursery) -> None:
        listener = trio.SocketListener(self._sock)
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            except OSError as exc:
                log.error("tailcat bridge accept failed, retrying: %s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(self._handle_bridged, handler, stream)

    async def _handle_bridged(self, handler: streams.Handler, stream: trio.SocketStream) -> None:
        try:
            with trio.fail_after(PREAMBLE_TIMEOUT):
                head = await _receive_exactly(stream, len(_MAGIC) + 2)
                if head[: len(_MAGIC)] != _MAGIC:
                    raise trio.BrokenResourceError("not a tailcat bridge")
                (n,) = struct.unpack("!H", head[len(_MAGIC):])
                meta = (await _receive_exactly(stream, n)).decode("utf-8", "replace")
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                OSError) as e:
            log.warning("dropping a bridged tailcat connection: %s", e or "timed out")
            await trio.aclose_forcefully(stream)
            return
        peer_key, _, remote = meta.partition(" ")
        inbound = _InboundStream(stream, peer_key, remote)
        try:
            await handler(inbound)
        except Exception:
            log.exception("connection handler failed (%s)", inbound.peer_description)
        finally:
            await trio.aclose_forcefully(inbound)

    # -- supervision --------------------------------------------------------------

    async def _supervise(self) -> None:
        backoff = BACKOFF_START
        while True:
            started = trio.current_time()
            quick = False
            try:
                error, quick = await self._run_once()
            except TailcatError as e:
                error = str(e)
            except OSError as e:
                error = f"tailcat: {e.strerror or e}"
            except Exception as e:  # never let the transport take the daemon down
                log.exception("tailcat supervisor failed")
                error = f"tailcat: internal error: {e!r}"
            self.restarts += 1
            if quick:
                # A known tailcat startup hiccup, not a failure: retry at once,
                # keeping the address (and no error) in the status.
                log.info("%s; restarting it", error)
                continue
            if trio.current_time() - started >= STABLE_AFTER:
                backoff = BACKOFF_START
            self._report(error)
            log.warning("%s; retrying in %gs", error, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _load_state(self) -> dict:
        try:
            with open(self.state_path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self, **updates: str) -> None:
        state = self._load_state()
        state.update(updates)
        state.setdefault("key_file", KEY_FILE)
        try:
            write_private(self.state_path, json.dumps(state, indent=2) + "\n")
        except OSError as e:
            log.warning("cannot write %s: %s", self.state_path, e)

    async def _ensure_key(self, binary: str) -> None:
        """Make the persistent server key once (genkey), or again if the relay changed."""
        cfg = self.cfg
        state = self._load_state()
        want_map, want_region = cfg.effective_map(), cfg.region
        if os.path.exists(self.key_path):
            if not state or (state.get("derpmap_url") == want_map
                             and state.get("region", "") == want_region):
                if not state:
                    self._save_state(derpmap_url=want_map, region=want_region)
                return
            old = self.key_path + ".old"
            os.replace(self.key_path, old)
            log.warning("tailcat relay settings changed (map %s -> %s, region %r -> %r): "
                        "made a new key, so the tailcat address changes; the old key is in %s",
                        state.get("derpmap_url"), want_map, state.get("region", ""),
                        want_region, old)
        tmp = self.key_path + ".new"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        region_args = ["--region", cfg.region] if cfg.region else ["--fixed-region"]
        argv = [binary, "genkey", "--key", tmp, *cfg.derp_args(), *region_args]
        with trio.move_on_after(GENKEY_TIMEOUT) as scope:
            result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True,
                                            check=False, env=_child_env(cfg))
        if scope.cancelled_caught:
            raise TailcatError(f"tailcat genkey gave no key within {GENKEY_TIMEOUT:g}s")
        out = result.stdout.decode("utf-8", "replace").strip()
        if result.returncode != 0 or not os.path.exists(tmp):
            lines = [_clean_line(x) for x in result.stderr.splitlines()]
            lines = [x for x in lines if x and not x.startswith("#")]
            why = lines[-1] if lines else f"exit status {result.returncode}"
            raise TailcatError(f"tailcat genkey failed: {why}")
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.key_path)
        address = out.splitlines()[-1].strip() if out else ""
        self._save_state(derpmap_url=want_map, region=want_region, address=address)
        log.info("made a tailcat key in %s (address %s)", self.key_path, _short(address))

    def _serve_argv(self, binary: str) -> list[str]:
        cfg = self.cfg
        bridge = [sys.executable, "-I", "-S", self.bridge_path, self.sock_path]
        full = ["--full-address"] if cfg.derpmap_url else []
        return [binary, "serve", "--key", self.key_path, "--verbose", "--json",
                *cfg.derp_args(), *full, "exec", "--", *bridge]

    def _on_stderr(self, raw: bytes, recent: collections.deque[str]) -> None:
        line = _clean_line(raw)
        if not line:
            return
        if self.cfg.verbose:
            log.info("tailcat[serve]: %s", line)
        elif line.startswith("#"):
            log.info("tailcat: %s", line.lstrip("# ").strip())
        if _RELAY_PROBING_RE.search(line):
            self._relay_probing.set()
        down = _RELAY_DOWN_RE.search(line)
        if down:
            self._relay_seen.set()
            error = f"relay {down.group(1)} unreachable: {down.group(2)}"
            if error != self._relay_error:
                self._relay_error = error
                if not self.cfg.verbose:
                    log.warning("tailcat: %s", error)
                self._report(error)
            return
        if _RELAY_UP_RE.search(line):
            self._relay_seen.set()
            if self._relay_error:
                log.info("tailcat: relay %s connected again", _RELAY_UP_RE.search(line).group(1))
            self._relay_error = ""
            if self._ready.is_set():
                self._report(None)
            return
        if not line.startswith("#") and "[v" not in line[:40]:
            recent.append(line)

    async def _run_once(self) -> tuple[str, bool]:
        """Run one tailcat serve until it dies; return (why, restart_at_once)."""
        binary = await _binary(self.cfg)
        await self._ensure_key(binary)
        self._write_bridge()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            child = _Child(self._serve_argv(binary), env=_child_env(self.cfg),
                           stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w)
        except OSError as e:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            raise TailcatError(f"cannot run tailcat ({binary}): {e.strerror or e}") from None
        os.close(out_w)
        os.close(err_w)
        self.child = child
        self._relay_error = ""
        self._relay_seen = trio.Event()
        self._relay_probing = trio.Event()
        self._write_pid_file(child.pid)
        stdout = trio.lowlevel.FdStream(out_r)
        stderr = trio.lowlevel.FdStream(err_r)
        recent: collections.deque[str] = collections.deque(maxlen=20)
        lines, line_recv = trio.open_memory_channel[bytes](16)

        def offer(raw: bytes) -> None:
            try:
                lines.send_nowait(raw)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # nobody reads stdout after the address

        async def read_stdout() -> None:
            async with lines:
                await _read_lines(stdout, offer)

        outcome: tuple[str, bool] = ("tailcat exited", False)
        try:
            # Nothing in this nursery raises (exceptions would come out as a group).
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_lines, stderr, lambda raw: self._on_stderr(raw, recent))
                nursery.start_soon(read_stdout)
                outcome = await self._watch(child, line_recv, recent)
                nursery.cancel_scope.cancel()
        finally:
            self.child = None
            with trio.CancelScope(shield=True):
                await child.stop()
                self._remove_pid_file()
                await trio.aclose_forcefully(stdout)
                await trio.aclose_forcefully(stderr)
        return outcome

    async def _watch(self, child: _Child, line_recv: trio.MemoryReceiveChannel[bytes],
                     recent: collections.deque[str]) -> tuple[str, bool]:
        address = ""
        with trio.move_on_after(ADDRESS_TIMEOUT) as timer:
            async for raw in line_recv:
                address = self._parse_address(raw)
                if address:
                    break
        if not address:
            if timer.cancelled_caught:
                return f"tailcat printed no address within {ADDRESS_TIMEOUT:g}s", False
            # stdout closed: the child is exiting (its exit may lag the EOF a little)
            with trio.move_on_after(5):
                await child.wait()
            if child.returncode is None:
                return "tailcat closed its output without printing an address", False
            rc = child.returncode
            await trio.sleep(0.05)  # let the stderr reader take the last lines
            return self._exit_reason(rc, recent), False
        self._got_address(address)
        if self._watch_relay:
            with trio.move_on_after(RELAY_TIMEOUT):
                await self._relay_probing.wait()
            if self._relay_probing.is_set():
                self._relay_misses = 0
                self._probing_ever = True
                with trio.move_on_after(RELAY_CONNECT_TIMEOUT):
                    await self._relay_seen.wait()
            elif child.alive():
                self._relay_misses += 1
                if self._probing_ever or self._relay_misses < RELAY_WATCH_GIVE_UP:
                    return (f"tailcat did not start on its DERP relay within {RELAY_TIMEOUT:g}s",
                            True)
                self._watch_relay = False
                log.warning("tailcat never logged work on its relay; "
                            "no longer restarting it for that")
        if child.alive():
            self._mark_ready()
        rc = await child.wait()
        await trio.sleep(0.05)
        return self._exit_reason(rc, recent), False

    @staticmethod
    def _parse_address(raw: bytes) -> str:
        try:
            data = json.loads(raw)
        except ValueError:
            return ""
        addr = data.get("listenAddr") if isinstance(data, dict) else None
        return addr if isinstance(addr, str) and _TAILCAT_RE.fullmatch(addr) else ""

    @staticmethod
    def _exit_reason(rc: int, recent: collections.deque[str]) -> str:
        if rc is not None and rc < 0:
            try:
                return f"tailcat was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"tailcat was killed by signal {-rc}"
        if recent:  # a fatal error is tailcat's last word
            return f"tailcat exited with status {rc}: {recent[-1]}"
        return f"tailcat exited with status {rc}"

    def _got_address(self, address: str) -> None:
        if self.address and address != self.address:
            log.warning("tailcat address changed from %s to %s", _short(self.address),
                        _short(address))
        self.address = address
        self.bound = Address(kind="tailcat", tailcat=address)
        if self._load_state().get("address") != address:
            self._save_state(address=address)

    def _mark_ready(self) -> None:
        """The child is on its relay (or says why not): announce the address."""
        if not self._ready.is_set():
            log.info("tailcat listening: %s", self.address)
        else:
            log.info("tailcat is back (restart %d), same address", self.restarts)
        self._ready.set()
        self._report(self._relay_error or None)

    def _write_bridge(self) -> None:
        try:
            with open(self.bridge_path) as f:
                if f.read() == BRIDGE_CODE:
                    return
        except OSError:
            pass
        try:
            write_private(self.bridge_path, BRIDGE_CODE)
        except OSError as e:
            raise TailcatError(f"cannot write {self.bridge_path}: {e.strerror or e}") from None

    def _write_pid_file(self, pid: int) -> None:
        try:
            write_private(self.pid_path, f"{pid}\n")
        except OSError:
            pass

    def _remove_pid_file(self) -> None:
        try:
            os.unlink(self.pid_path)
        except OSError:
            pass


async def listen(addr: Address) -> Listener:
    """Start listening on tailcat; the address comes once tailcat prints it."""
    cfg = _require_config()
    if addr.tailcat:
        raise TailcatError("listen on tailcat takes no address: use 'tailcat' "
                           "(the address comes from the key in the home)")
    path = bridge_socket_path(cfg.home)
    try:
        os.unlink(path)  # ours: one daemon per home (the home lock)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise TailcatError(f"cannot remove stale {path}: {e.strerror or e}") from None
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        # Restrict before listen(): until then every connect() is refused.
        os.chmod(path, 0o600)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise TailcatError(f"cannot listen on {path}: {e.strerror or e}") from None
    return TailcatListener(cfg, sock, path)
