"""The typer application: every command of the CLI reference.

The app object and shared plumbing live in :mod:`awp.cli.common`; the
commands are registered by importing their modules below.  ``run_app`` is the
entry point: it rewrites ``awp help X`` and peer arguments that look like
flags (a key prefix such as ``-Abc12``) before click parses the line.
"""

from __future__ import annotations

import re

import typer

from .. import PROTOCOL_VERSION, __version__
from . import (  # noqa: F401  (registers the commands)
    cmd_conn,
    cmd_fetch,
    cmd_grants,
    cmd_invite,
    cmd_key,
    cmd_msg,
    cmd_operator,
    cmd_pair,
    cmd_release,
    cmd_repair,
    cmd_service,
    cmd_share,
)
from .cmd_agent import hook_cmd as _hook  # noqa: F401  (registers hook, mcp, bootstrap, model)
from .cmd_board import topic_app as _board  # noqa: F401  (registers topics, topic, post, get, ...)
from .cmd_conform import conform as _conform  # noqa: F401  (registers awp conform)
from .cmd_queue import claim_cmd as _queue  # noqa: F401  (registers claim, queue, ...)
from .cmd_web import web_cmd as _web  # noqa: F401  (registers awp web)
from .cmd_work import work_cmd as _work  # noqa: F401  (registers awp work)
from .common import app, compact, home_opt, json_opt, out
from .fastpath import help_argv, home_first

# Commands with a peer positional (or -p/--peer/--to value) that may start with "-".
PEER_COMMANDS = frozenset(
    {"send", "state", "connect", "alias", "bye", "read", "tail", "wait", "threads", "peers"})

# A key prefix: base64url characters, at least four of them counting the "-".
_KEYISH = re.compile(r"-[A-Za-z0-9_-]{3,}")


@app.command("daemon", short_help="Run the daemon in the foreground (others start it on demand)")
def daemon_cmd(
    home: str = home_opt(),
    name: str = typer.Option(None, "--name", help="name sent in hello (default awp@HOSTNAME)"),
    about: str = typer.Option(None, "--about", help="free-text description sent in hello"),
    harness: str = typer.Option(None, "--harness", help="agent harness (remembered)"),
    listen: list[str] = typer.Option(
        [], "--listen", help="tailcat, tcp:HOST:PORT or unix:/path (repeatable)"),
    no_tailcat: bool = typer.Option(False, "--no-tailcat", help="do not listen on tailcat"),
    advertise: str = typer.Option(
        None, "--advertise", help="address sent in hello for dial-back (none to disable)"),
    accept: str = typer.Option(None, "--accept", help="admission policy: any, allowlist, invite-only or operator"),
    allow: list[str] = typer.Option([], "--allow", help="key to admit under allowlist"),
    trust: list[str] = typer.Option([], "--trust", help="issuer key whose grants to honor"),
    serve: list[str] = typer.Option(
        [], "--serve", help="capabilities to fulfil automatically: exec, fs:read, fs:write"),
    root: str = typer.Option(None, "--root", help="directory fs:* are confined to"),
    presence: bool = typer.Option(None, "--presence", help="publish signed presence"),
    share_with: str = typer.Option(
        None, "--share-with", hidden=True, help="hosts to mirror conversations to (comma-separated)"),
    trace: bool = typer.Option(False, "--trace", help="log every protocol line"),
    verbose: bool = typer.Option(False, "--verbose", help="include tailcat's own logs"),
    start_dir: str = typer.Option(
        None, "--start-dir", hidden=True,
        help="directory the default --root and relative paths refer to (set by the CLI when"
             " it starts the daemon in its home)"),
) -> None:
    """Run the daemon in the foreground (for a service manager, or to watch its log).

    Other commands start it on demand in the background, with its output in
    <home>/daemon.log. Run this way, it exits 1 when a TCP or Unix listener
    cannot be bound (a port taken, a bad path), saying which.

    \b
    Example:
      awp daemon --listen tcp:127.0.0.1:7000 --no-tailcat
    """
    from .daemon_verb import daemon

    daemon(home, name, about, harness, listen, no_tailcat, advertise, accept, allow, trust, serve,
           root, presence, share_with, trace, verbose, start_dir)


@app.command("version", short_help="Print the awp and protocol versions")
def version_cmd(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Print awp's version and the protocol version it speaks.

    \b
    Example:
      awp version        # awp 0.5.0 (protocol v0)
    """
    if as_json:
        out(compact({"version": __version__, "protocol": PROTOCOL_VERSION}))
    else:
        out(f"awp {__version__} (protocol v{PROTOCOL_VERSION})")


@app.command("help", short_help="Show help for a command (same as awp COMMAND --help)")
def help_cmd(
    command: str = typer.Argument(None, metavar="COMMAND", help="the command to explain"),
    home: str = home_opt(),
) -> None:
    """Show help for a command, the same as 'awp COMMAND --help'.

    \b
    Example:
      awp help send
    """
    # run_app rewrites "awp help X" before parsing; this runs only if called oddly.
    raise typer.Exit(run_app([command, "--help"] if command else ["--help"]))


def _option_table(cmd) -> dict[str, bool]:
    """Every option string of a click command, and whether it takes a value."""
    table: dict[str, bool] = {}
    for p in getattr(cmd, "params", []):
        if getattr(p, "param_type_name", "") != "option":
            continue
        takes = not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for o in [*p.opts, *p.secondary_opts]:
            table[o] = takes
    return table


def fix_dash_peers(args: list[str], opts: dict[str, bool]) -> list[str]:
    """Let a key prefix that starts with ``-`` be a positional, not a flag.

    ``args`` is a command's argument list (without the command word). Tokens
    that look like a key prefix (``-Abc12``) and are not one of the command's
    options, nor the value of one, are moved after a ``--`` so click takes
    them as positionals; every other token keeps its place and meaning.
    Returns ``args`` unchanged when there is nothing to move.
    """
    options: list[str] = []
    positionals: list[str] = []
    moved = False
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            positionals += args[i + 1:]
            break
        if tok in opts:
            options.append(tok)
            if opts[tok] and i + 1 < len(args):
                options.append(args[i + 1])
                i += 1
        elif tok.startswith("--") or not tok.startswith("-") or tok == "-":
            (options if tok.startswith("--") else positionals).append(tok)
        elif _KEYISH.fullmatch(tok) and not _attached_value(tok, opts):
            positionals.append(tok)
            moved = True
        else:
            options.append(tok)
        i += 1
    if not moved:
        return args
    return [*options, "--", *positionals]


def _attached_value(tok: str, opts: dict[str, bool]) -> bool:
    """``-n20`` or ``-tthr_x``: a short option with its value glued on."""
    short, rest = tok[:2], tok[2:]
    return bool(opts.get(short)) and (rest.isdigit() or rest.startswith("thr_"))


_PLAIN = (str, int, bool, list[str])


def _fast_coercion() -> None:
    """Coerce plain ``str``/``int``/``bool``/``list[str]`` parameters without pydantic.

    This typer builds a pydantic ``TypeAdapter`` per parameter on first use,
    and importing pydantic alone costs ~90 ms: more than the rest of
    ``awp status``. Our parameters are all plain, so they get a trivial
    coercion instead. Anything else (or a typer without these internals)
    keeps typer's own path: slower, never wrong.
    """
    try:
        from dataclasses import dataclass

        from typer._coercion import RuntimeParam
        from typer.core import _TyperParameter
    except ImportError:
        return
    original = getattr(_TyperParameter, "get_runtime_param", None)
    if original is None or getattr(original, "_awp_fast", False):
        return

    @dataclass(frozen=True)
    class Plain(RuntimeParam):
        def _coerce_value(self, value, param, ctx):
            kind = self.annotation
            if kind == list[str]:
                return [str(v) for v in value]
            if kind is bool:
                if isinstance(value, bool):
                    return value
                return str(value).strip().lower() in ("1", "true", "yes", "on", "y")
            if kind is int:
                try:
                    return int(value)
                except (TypeError, ValueError):
                    raise typer.BadParameter(f"{value!r} is not a whole number",
                                             ctx=ctx, param=param) from None
            return str(value)

    def get_runtime_param(self):
        if getattr(self, "_runtime_param", None) is None:
            desc = getattr(self, "type_descriptor", None)
            info = getattr(desc, "parameter_info", None)
            if desc is not None and desc.annotation in _PLAIN \
                    and getattr(desc, "file_annotation", None) is None \
                    and getattr(info, "parser", None) is None \
                    and getattr(info, "min", None) is None \
                    and getattr(info, "max", None) is None:
                try:
                    self._runtime_param = Plain(parameter_info=info, annotation=desc.annotation)
                except Exception:  # noqa: BLE001 - keep typer's own coercion
                    pass
        return original(self)

    get_runtime_param._awp_fast = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param


def run_app(args: list[str]) -> int:
    args = home_first(list(args))
    if args and args[0] == "help":
        args = help_argv(args[1:])
    _fast_coercion()
    group = typer.main.get_command(app)
    if args and args[0] in PEER_COMMANDS:
        sub = group.commands.get(args[0]) if hasattr(group, "commands") else None
        if sub is not None:
            args = [args[0], *fix_dash_peers(args[1:], _option_table(sub))]
    try:
        group.main(args=args, prog_name="awp", standalone_mode=True)
    except SystemExit as e:
        if e.code is None:
            return 0
        return e.code if isinstance(e.code, int) else 1
    return 0
