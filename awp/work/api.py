"""The worker's line to its daemon: requests that outlast a daemon restart.

``awp work`` is a client of the local API like every other command, but it
runs for days: the daemon under it may be restarted (by systemd, by a user,
after ``kill -9``).  :class:`Daemon` retries a request whose connection
failed, starting the daemon again on demand as any command would, until a
deadline; what the daemon answered (an :class:`ApiFailure`) is never
retried here, since only the caller knows what it means.  A daemon the user
stopped (``awp down``) is the exception: it is not started again, and the
caller hears :class:`Stopped` (the worker then stops too).
"""

from __future__ import annotations

import time

from ..base.home import is_down
from ..localapi.client import ApiFailure, DaemonNotRunning, LocalClient
from ..localapi.daemonctl import DaemonStartError, client_if_running, ensure_daemon

RECONNECT_S = 1.0  # between attempts to reach a daemon that went away
SLACK_S = 30.0  # HTTP timeout beyond a request's own server-side wait

__all__ = ["ApiFailure", "Daemon", "Gone", "Stopped"]


class Gone(Exception):
    """The daemon could not be reached before the deadline."""


class Stopped(Gone):
    """The daemon is not running because the user stopped it (``awp down``)."""


class Daemon:
    """One thread's client for the home's daemon (a :class:`LocalClient` is not shared)."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._client: LocalClient | None = None

    def _connect(self, wait: float) -> LocalClient:
        if self._client is None:
            if is_down(self.home):
                self._client = client_if_running(self.home, wait + SLACK_S)
                if self._client is None:
                    raise Stopped("the awp daemon was stopped (awp down)")
            else:
                self._client = ensure_daemon(self.home, timeout=wait + SLACK_S)
        return self._client

    def call(self, method: str, path: str, body: dict | None = None, *, wait: float = 0.0,
             within: float = 120.0) -> dict:
        """One request; reconnects (and restarts the daemon) until ``within`` seconds passed.

        ``wait`` is how long the daemon itself may take (a long poll).
        """
        deadline = time.monotonic() + within
        while True:
            try:
                client = self._connect(wait)
                res = client.request(method, path, body, timeout=wait + SLACK_S)
                return res if isinstance(res, dict) else {}
            except ApiFailure:
                raise
            except (DaemonNotRunning, DaemonStartError, ConnectionError, TimeoutError,
                    OSError) as e:
                self.close()
                if time.monotonic() >= deadline:
                    raise Gone(f"the awp daemon did not answer: {e}") from None
                time.sleep(RECONNECT_S)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
