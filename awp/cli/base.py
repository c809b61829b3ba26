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
    from ..localapi import cjson  # indented as json.dumps(indent=2) does, without its import

    out(cjson.indented(obj))


def compact(obj: object) -> str:
    from ..localapi import cjson

    return cjson.dumps(obj, ensure_ascii=False, separators=(",", ":"))


USAGE = 2  # the exit status of a usage error: a bad option value, as click's own


def parse_seconds(text: str, flag: str) -> float:
    """A duration flag's seconds; a malformed one is a usage error (exit 2)."""
    from ..base.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise CliError(f"{flag}: {e}", USAGE) from None


def invoked_as() -> str:
    """``awp`` as the user ran it, for hints: ``awp`` when that finds this same
    program on PATH, else the path they typed (``.venv/bin/awp``), or
    ``python -m awp``."""
    import os
    import shutil

    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "awp"
    if os.path.basename(argv0) == "__main__.py":
        exe = os.path.basename(sys.executable)
        found = shutil.which(exe)
        py = exe if found and os.path.realpath(found) == os.path.realpath(sys.executable) \
            else sys.executable
        return f"{py} -m awp"
    base = os.path.basename(argv0)
    found = shutil.which(base)
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return base
    if os.path.isabs(argv0):
        cwd = os.getcwd()
        rel = os.path.relpath(argv0, cwd)
        if not rel.startswith(".."):
            return os.path.join(".", rel) if os.sep not in rel else rel
    return argv0


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
    from ..base.echo import cut_message

    first, _, rest = message.partition("\n")
    first = cut_message(first)  # the backstop: no error repeats a huge argument
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
