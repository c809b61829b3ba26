"""Plumbing shared by every command: the typer app, options, errors, output.

Conventions (see the CLI reference):

- every command takes ``--home``; most take ``--json``;
- an error prints one line, ``awp <cmd>: <reason>``, on stderr and exits 1;
- usage errors exit 2 (click's default); ``status`` without a daemon exits 3.

Kept light: typer and the stdlib client only (no trio, httpx, store or node).
"""

from __future__ import annotations

import functools

import typer

from .base import (  # noqa: F401  (re-exported for the command modules)
    CliError,
    CliExit,
    StdoutGone,
    compact,
    daemon,
    failure_code,
    home_of,
    note,
    out,
    out_json,
    parse_seconds,
    quiet_pipe,
)

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


# -- options shared by many commands ---------------------------------------------------

def home_opt() -> typer.models.OptionInfo:
    return typer.Option(None, "--home", metavar="DIR",
                        help="awp home (default $AWP_HOME, else ~/.awp)")


def json_opt() -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help="print machine-readable JSON")


# -- commands -----------------------------------------------------------------------

def command(name: str, *, on: typer.Typer | None = None, label: str = "", **kw):
    """Register a typer command whose failures print ``awp <label>: <reason>``.

    ``on`` is the typer app or group it belongs to (the top level by
    default); ``label`` what the message names (the command's name by default,
    ``topic create`` for a subcommand).
    """
    label = label or name

    def deco(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                code = failure_code(label, e)
                if code is None:
                    raise
                raise typer.Exit(code) from None

        return (on or app).command(name, **kw)(run)

    return deco


def fail(cmd: str, message: str, code: int = 1) -> None:
    """Report ``message`` as this command's failure and exit with ``code``."""
    raise typer.Exit(failure_code(cmd, CliError(message, code)))
