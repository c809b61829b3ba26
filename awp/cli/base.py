"""CLI plumbing that does not need typer: errors, output, the daemon client.

The common verbs (``status``, ``send``, ``read``, ``threads``, ``peers``,
``tail``, ``wait``) run on a fast path (:mod:`awp.cli.fastpath`) that never
imports typer or click, whose import alone costs several times what the
request does; so everything those verbs need lives here, and
:mod:`awp.cli.common` re-exports it for the typer commands.
"""

from __future__ import annotations

import sys

from ..base.home import HomeError, resolve_home
from ..localapi.client import (
    ApiFailure,
    DaemonForbidden,
    DaemonNotRunning,
    LocalClient,
    ProtocolError,
)


class CliError(Exception):
    """A failure to report as ``awp <cmd>: <message>`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class CliExit(Exception):
    """End the command with ``code`` and nothing more to say (typer.Exit, without typer)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


class StdoutGone(Exception):
    """The reader of our stdout went away (``| head``)."""


def home_of(flag: str | None) -> str:
    return resolve_home(flag)


def out(text: str = "") -> None:
    """One line (or block) on stdout, flushed: agents often read through pipes."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutGone() from None


def note(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def out_json(obj: object) -> None:
    import json  # indented output needs the json package's own encoder

    out(json.dumps(obj, ensure_ascii=False, indent=2))


def compact(obj: object) -> str:
    from ..localapi import cjson

    return cjson.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def parse_seconds(text: str, flag: str) -> float:
    from ..base.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise CliError(f"{flag}: {e}") from None


def daemon(home: str, *, timeout: float | None = 30.0) -> LocalClient:
    """A client for the home's daemon, started on demand."""
    from ..localapi.daemonctl import ensure_daemon

    return ensure_daemon(home, timeout=timeout)


def failure_code(cmd: str, e: BaseException) -> int | None:
    """Report a command's failure as one line on stderr; its exit status.

    ``None`` for exceptions that are not command failures (the caller
    re-raises them).
    """
    from ..localapi.daemonctl import DaemonStartError

    if isinstance(e, CliExit):
        return e.code
    if isinstance(e, CliError):
        return _fail(cmd, e.message, e.code)
    if isinstance(e, DaemonStartError | HomeError | DaemonForbidden):
        return _fail(cmd, str(e))
    if isinstance(e, ApiFailure):
        return _fail(cmd, e.message)
    if isinstance(e, DaemonNotRunning):
        return _fail(cmd, f"{e} (start it with awp up)")
    if isinstance(e, ProtocolError | ConnectionError | TimeoutError):
        return _fail(cmd, str(e) or type(e).__name__)
    if isinstance(e, StdoutGone):
        quiet_pipe()
        return 0
    if isinstance(e, OSError):
        return _fail(cmd, e.strerror or str(e) if not e.filename
                     else f"{e.filename}: {e.strerror or e}")
    return None


def _fail(cmd: str, message: str, code: int = 1) -> int:
    first, _, rest = message.partition("\n")
    sys.stderr.write(f"awp {cmd}: {first}\n")
    if rest:
        # Only the daemon's log tail continues past the first line.
        sys.stderr.write(rest + "\n")
    sys.stderr.flush()
    return code


def quiet_pipe() -> None:
    """stdout went away (``| head``): stop without a traceback on exit."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
