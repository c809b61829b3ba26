"""Finding, starting and stopping the daemon of a home, for the CLI.

Every command that needs the daemon calls :func:`ensure_daemon`, which starts
it on demand: ``python -I -m awp daemon --home H`` (see :mod:`awp.base.selfcmd`:
nothing is imported from the caller's directory) in the home as its working
directory, detached in its own session,
stdin closed, output appended to ``<home>/daemon.log``, then the socket is
polled every 50 ms for up to 20 s.  Several commands racing to start the
daemon of one fresh home are fine: every starter spawns one, the home lock
lets exactly one of them run (the others exit with "another awp daemon is
running for this home"), and every starter keeps polling the socket until the
winner answers.  A daemon already running is found by connecting to its
socket, not by asking for its status: the connection carries the command's
first request, so the everyday commands pay no extra round trip for it.

Stdlib only, and cheap to import: ``awp status`` has to be fast.
"""

from __future__ import annotations

import os
import time

from ..base.home import has_identity, is_locked, no_identity_reason, read_pid
from .client import ApiFailure, DaemonNotRunning, LocalClient, ProtocolError

POLL_INTERVAL = 0.05
START_TIMEOUT = 20.0
LOG_NAME = "daemon.log"


class DaemonStartError(Exception):
    """The daemon could not be started; the message carries its log's tail."""


class NoIdentityError(DaemonStartError):
    """The home has no identity and the caller may not make one: nothing was started."""


def _probe(client: LocalClient) -> dict | None:
    """The daemon's status if it answers on the socket, else ``None``."""
    try:
        status = client.request("GET", "/v1/status", timeout=5.0)
    except (DaemonNotRunning, ConnectionError, TimeoutError, ProtocolError, ApiFailure, OSError):
        client.close()
        return None
    return status if isinstance(status, dict) else None


def _listening(client: LocalClient) -> bool:
    """Whether the daemon takes connections on the socket; the connection is kept for
    the client's first request, so finding a running daemon costs no round trip."""
    try:
        client.open()
    except (DaemonNotRunning, ConnectionError, TimeoutError, OSError):
        client.close()
        return False
    return True


def status_if_running(home: str, timeout: float | None = 30.0
                      ) -> tuple[LocalClient, dict] | None:
    """``(client, status)`` if the home's daemon answers; never starts one."""
    try:
        client = LocalClient.for_home(home, timeout)
    except OSError:
        return None
    status = _probe(client)
    return None if status is None else (client, status)


def client_if_running(home: str, timeout: float | None = 30.0) -> LocalClient | None:
    """A client for the home's daemon if one answers; never starts one.

    A socket file left behind by a dead daemon (connection refused), a stale
    ``daemon.pid`` or a pointer file naming a vanished socket all read as
    "not running".
    """
    try:
        client = LocalClient.for_home(home, timeout)
    except OSError:
        return None
    return client if _probe(client) is not None else None


def tail_log(home: str, lines: int = 10) -> str:
    """The last ``lines`` lines of ``daemon.log`` (empty if there is none)."""
    try:
        with open(os.path.join(home, LOG_NAME), "rb") as f:
            try:
                f.seek(-16384, os.SEEK_END)
            except OSError:
                f.seek(0)
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _start_dir() -> str:
    """The caller's directory, which the daemon's default fs root and relative paths mean."""
    try:
        return os.getcwd()
    except OSError:  # the directory was removed under us
        return os.path.expanduser("~")


def _child_env(start: str) -> dict[str, str]:
    """Our environment, with the relative paths in it made absolute.

    The daemon runs in its home, so a relative ``AWP_TAILCAT_BIN`` or a
    ``unix:`` listener in ``AWP_LISTEN`` must be resolved here, against the
    caller's directory, to keep meaning what the caller meant.
    """
    env = dict(os.environ)

    def absolute(p: str) -> str:
        p = os.path.expanduser(p)
        return p if os.path.isabs(p) else os.path.join(start, p)

    if env.get("AWP_TAILCAT_BIN"):
        env["AWP_TAILCAT_BIN"] = absolute(env["AWP_TAILCAT_BIN"])
    if env.get("AWP_LISTEN"):
        items = [x.strip() for x in env["AWP_LISTEN"].split(",")]
        env["AWP_LISTEN"] = ",".join(
            "unix:" + absolute(x[5:]) if x.startswith("unix:") and x[5:] else x for x in items)
    return env


def _spawn(home: str, flags_args: list[str]):
    import subprocess  # only when starting the daemon: its import is not free

    from ..base.selfcmd import python_argv

    os.makedirs(home, mode=0o700, exist_ok=True)
    try:
        if os.stat(home).st_mode & 0o077:
            os.chmod(home, 0o700)
    except OSError:
        pass
    log_path = os.path.join(home, LOG_NAME)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    start = _start_dir()
    try:
        return subprocess.Popen(
            [*python_argv(), "daemon", "--home", home, "--start-dir", start, *flags_args],
            stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
            close_fds=True, cwd=home, env=_child_env(start),
        )
    finally:
        os.close(fd)


def _socket_client(home: str, timeout: float | None) -> LocalClient | None:
    """A client for where the socket is now (the pointer file may appear late)."""
    try:
        return LocalClient.for_home(home, timeout)
    except OSError:
        return None


def ensure_daemon(
    home: str, *, flags_args: list[str] | None = None, timeout: float | None = 30.0,
    start_timeout: float = START_TIMEOUT, create: bool = False,
) -> LocalClient:
    """A client for the home's daemon, starting the daemon first if needed.

    ``flags_args`` are passed to ``awp daemon`` when this call starts it (they
    are ignored when it is already running). Only a caller with ``create``
    (``awp up``, ``awp mcp``) starts one in a home with no identity yet; the
    others raise :class:`NoIdentityError`, since a mistyped home would get a
    new identity nobody asked for. Raises :class:`DaemonStartError`.
    """
    client = _socket_client(home, timeout)
    if client is not None and _listening(client):
        return client
    if not create and not has_identity(home):
        raise NoIdentityError(no_identity_reason(home))
    try:
        proc = _spawn(home, list(flags_args or []))
    except OSError as e:
        raise DaemonStartError(f"cannot start the awp daemon: {e}") from None
    deadline = time.monotonic() + start_timeout
    exited_at: float | None = None
    while True:
        client = _socket_client(home, timeout)
        if client is not None and _probe(client) is not None:
            # Reap our child if it lost the race; a winner keeps running
            # detached (it is in its own session and nobody waits for it).
            proc.poll()
            return client
        now = time.monotonic()
        if proc.poll() is not None:
            # Ours exited: lost the race to a concurrent starter (fine, that
            # daemon holds the lock and will answer soon), or failed.
            if exited_at is None:
                exited_at = now
            if not is_locked(home) and now - exited_at > 1.0:
                break
        if now >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    code = proc.poll()
    if code is None:
        why = f"the awp daemon did not answer within {start_timeout:g}s"
    else:
        why = f"the awp daemon exited with status {code}"
    log = tail_log(home)
    last = log.splitlines()[-1] if log else ""
    if code is not None and last.startswith("awp daemon: "):
        why += ": " + last[len("awp daemon: "):]  # its own one-line reason
    where = os.path.join(home, LOG_NAME)
    detail = f"\n--- last lines of {where} ---\n{log}" if log else f" (nothing in {where})"
    raise DaemonStartError(why + detail)


def stop_daemon(home: str, client: LocalClient | None, timeout: float = 10.0) -> bool:
    """Ask the daemon to stop and wait until it is gone.

    Returns False when no daemon was running. Falls back to SIGTERM (pid from
    ``daemon.pid``) when the API does not answer; raises ``TimeoutError``
    when the daemon outlives ``timeout``.
    """
    if client is None and not is_locked(home):
        return False
    pid = read_pid(home)
    if client is not None:
        try:
            client.request("POST", "/v1/shutdown", timeout=5.0)
        except (DaemonNotRunning, ConnectionError, TimeoutError, ProtocolError, ApiFailure):
            client = None
        finally:
            if client is not None:
                client.close()
    if client is None:
        _terminate(home)
    deadline = time.monotonic() + timeout
    signalled = client is None
    while True:
        # Gone means the process too, not just its lock: until it exits it
        # holds daemon.log and the store open (a read-only remount, a backup
        # or an uninstall right after awp down would find them busy).
        gone = not is_locked(home) and client_if_running(home, 2.0) is None \
            and not pid_alive(pid)
        if gone:
            return True
        now = time.monotonic()
        if not signalled and now > deadline - timeout / 2:
            _terminate(home)
            signalled = True
        if now >= deadline:
            pid = read_pid(home)
            who = f" (pid {pid})" if pid else ""
            raise TimeoutError(f"the awp daemon{who} did not stop within {timeout:g}s")
        time.sleep(POLL_INTERVAL)


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as gone)."""
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        # Gone between the signal and the read, unless there is no /proc here.
        return not os.path.isdir("/proc/self")


def _terminate(home: str) -> None:
    import signal

    pid = read_pid(home)
    if pid and pid != os.getpid() and is_locked(home):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
