"""Plumbing shared by every command: the typer app, options, errors, output.

Conventions (see the CLI reference):

- every command takes ``--home``; most take ``--json``;
- an error prints one line, ``awp <cmd>: <reason>``, on stderr and exits 1;
- usage errors exit 2 (click's default); ``status`` without a daemon exits 3.

Kept light: typer and the stdlib client only (no trio, httpx, store or node).
"""

from __future__ import annotations

import functools
import json
import sys

import typer

from ..daemon.home import HomeError, resolve_home
from ..localapi.client import (
    ApiFailure,
    DaemonForbidden,
    DaemonNotRunning,
    LocalClient,
    ProtocolError,
)
from .daemonctl import DaemonStartError, ensure_daemon

app = typer.Typer(
    name="awp",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help=(
        "awp: talk to other coding agents over the Agent Wire Protocol.\n\n"
        "Start with 'awp up' (prints the address to share), then 'awp connect ADDRESS' "
        "on the other side. Run 'awp help COMMAND' for a command's details."
    ),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


class CliError(Exception):
    """A failure to report as ``awp <cmd>: <message>`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# -- options shared by many commands ---------------------------------------------------

def home_opt() -> typer.models.OptionInfo:
    return typer.Option(None, "--home", metavar="DIR",
                        help="awp home (default $AWP_HOME, else ~/.awp)")


def json_opt() -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help="print machine-readable JSON")


def home_of(flag: str | None) -> str:
    return resolve_home(flag)


# -- output -------------------------------------------------------------------------

class StdoutGone(Exception):
    """The reader of our stdout went away (``| head``)."""


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
    out(json.dumps(obj, ensure_ascii=False, indent=2))


def compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def parse_seconds(text: str, flag: str) -> float:
    from ..durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise CliError(f"{flag}: {e}") from None


# -- commands -----------------------------------------------------------------------

def command(name: str, **kw):
    """Register a typer command whose failures print ``awp <name>: <reason>``."""

    def deco(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except CliError as e:
                fail(name, e.message, e.code)
            except (DaemonStartError, HomeError, DaemonForbidden) as e:
                fail(name, str(e))
            except ApiFailure as e:
                fail(name, e.message)
            except DaemonNotRunning as e:
                fail(name, f"{e} (start it with awp up)")
            except (ProtocolError, ConnectionError, TimeoutError) as e:
                fail(name, str(e) or type(e).__name__)
            except StdoutGone:
                _quiet_pipe()
                raise typer.Exit(0) from None
            except OSError as e:
                fail(name, e.strerror or str(e) if not e.filename
                     else f"{e.filename}: {e.strerror or e}")

        return app.command(name, **kw)(run)

    return deco


def fail(cmd: str, message: str, code: int = 1) -> None:
    first, _, rest = message.partition("\n")
    sys.stderr.write(f"awp {cmd}: {first}\n")
    if rest:
        # Only the daemon's log tail continues past the first line.
        sys.stderr.write(rest + "\n")
    sys.stderr.flush()
    raise typer.Exit(code)


def _quiet_pipe() -> None:
    """stdout went away (``| head``): stop without a traceback on exit."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def daemon(home: str, *, timeout: float | None = 30.0) -> LocalClient:
    """A client for the home's daemon, started on demand."""
    return ensure_daemon(home, timeout=timeout)
