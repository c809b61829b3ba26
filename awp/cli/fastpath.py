"""The everyday commands without typer: parse a plain command line, run the verb.

Agents run ``awp send``, ``status``, ``get``, ``post``, ``claim`` and the
like many times a turn, and importing typer and click costs several times
what the request to the daemon does.  This parser takes the command lines
those commands are normally given (long and short options, ``=`` values,
repeated options, positionals, ``--``, ``--help``) and hands the values to
the same functions the typer commands call (:mod:`awp.cli.verbs`,
:mod:`awp.cli.board_verbs`, :mod:`awp.cli.board_policy`, :mod:`awp.cli.queue_verbs`).

It has no option list of its own: every command's options, arguments and
defaults come from :mod:`awp.cli.clitable`, and its help from
:mod:`awp.cli.clihelp`, both generated from the typer commands by
:mod:`awp.cli.gentable` (a test fails when they drift).

Anything it is not sure of returns ``None``, and the full typer app takes
the line instead: an unknown option, a missing or malformed value, too many
or too few positionals, a positional that starts with ``-`` (a key prefix,
which ``run_app`` knows how to place), help on a terminal of another width
than the one the help was rendered for.  So every usage error is still
click's; this path only ever runs lines typer would have accepted, with the
values typer would have passed, and prints the help click would print.
"""

from __future__ import annotations

import os
import sys

# command path -> (module under awp.cli, function): the bodies both doors call.
# Each function's parameters are exactly the command's, as clitable lists them.
RUNNERS: dict[str, tuple[str, str]] = {
    **{v: ("verbs", v) for v in ("status", "peers", "threads", "read", "tail", "wait", "send",
                                 "state")},
    **{v: ("board_verbs", v) for v in ("topics", "subscribe", "unsubscribe", "post", "reply",
                                       "get", "edit", "delete", "hide")},
    **{f"topic {v}": ("board_policy", f"topic_{v}") for v in ("create", "set")},
    **{f"topic {v}": ("board_verbs", f"topic_{v}") for v in ("show", "grant", "revoke", "ban")},
    **{v: ("queue_verbs", v) for v in ("claim", "renew", "release", "complete", "fail",
                                       "queue")},
    "daemon": ("daemon_verb", "daemon"),  # a daemon that never holds typer in memory
}

HELP = object()  # parse's answer for a line that asks for the help


def _lookup(words: list[str]) -> tuple[str, dict, list[str], dict] | None:
    """(command path, its table entry, its own arguments, the group's values)."""
    from .clitable import COMMANDS

    name = words[0]
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    if not entry.get("group"):
        return name, entry, words[1:], {}
    # A group (awp topic): its own options, then the subcommand.
    rest = words[1:]
    group_vals = _options(entry, rest, stop_at_positional=True)
    if group_vals is None or group_vals is HELP:
        return None if group_vals is None else (name, entry, [], {"help": True})
    consumed = group_vals.pop("__consumed__")
    if consumed >= len(rest):
        return None  # no subcommand: typer prints the group's help
    sub = f"{name} {rest[consumed]}"
    sub_entry = COMMANDS.get(sub)
    if sub_entry is None:
        return None
    return sub, sub_entry, rest[consumed + 1:], group_vals


def _options(entry: dict, args: list[str], *, stop_at_positional: bool = False):
    """Parse ``args`` against ``entry``: the values (with ``__rest__``, the
    positionals), ``HELP``, or ``None`` when typer should decide."""
    from .clitable import HELP_OPTIONS

    table = entry["opts"]
    values: dict[str, object] = {}
    for k, v in entry["defaults"].items():
        values[k] = list(v) if isinstance(v, list) else v
    rest: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            if stop_at_positional:
                return None
            rest += args[i:]
            break
        if tok == "-" or not tok.startswith("-"):
            if stop_at_positional:
                values["__consumed__"] = i - 1
                return values
            rest.append(tok)
            continue
        if tok in HELP_OPTIONS:
            return HELP
        if tok.startswith("--"):
            name, eq, attached = tok.partition("=")
        else:
            name, attached = tok[:2], tok[2:]
            eq = "=" if attached else ""
        spec = table.get(name)
        if spec is None:
            return None  # an unknown option, or a key prefix: typer decides
        param, kind = spec[0], spec[1]
        if kind == "flag":
            if eq:
                return None
            values[param] = spec[2]
            continue
        if eq:
            value = attached
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            return None  # a missing value is click's usage error
        if kind == "int":
            try:
                values[param] = int(value)
            except ValueError:
                return None
        elif kind == "multi":
            values[param].append(value)  # type: ignore[union-attr]
        else:
            values[param] = value
    if stop_at_positional:
        values["__consumed__"] = len(args)
        return values
    values["__rest__"] = rest
    return values


def _positionals(entry: dict, values: dict) -> bool:
    """Place the positionals as click would; False when click would refuse them."""
    rest: list[str] = values.pop("__rest__")  # type: ignore[assignment]
    spec = entry["args"]
    if any(n == -1 for _, n, _ in spec):
        if len(spec) != 1:
            return False  # not a shape any of our commands has: typer decides
        name, _, required = spec[0]
        if required and not rest:
            return False
        if rest:
            values[name] = rest
        return True
    if len(rest) > len(spec):
        return False
    for (name, _, required), value in zip(spec, [*rest, *[None] * len(spec)], strict=False):
        if value is None and required:
            return False
        if value is not None:
            values[name] = value
    return True


def parse(words: list[str]) -> tuple[str, object] | None:
    """(command path, keyword arguments or ``HELP``) for ``awp WORDS``; None: typer's."""
    found = _lookup(words)
    if found is None:
        return None
    path, entry, args, group_vals = found
    if group_vals.get("help"):
        return path, HELP
    if entry.get("opaque") or entry.get("group"):
        return None
    values = _options(entry, args)
    if values is None or values is HELP:
        return None if values is None else (path, HELP)
    if not _positionals(entry, values):
        return None
    if values.get("home") is None and group_vals.get("home") is not None:
        values["home"] = group_vals["home"]  # awp topic --home H create ...
    return path, values


def home_first(args: list[str]) -> list[str]:
    """Accept ``awp --home H cmd ...`` as well as ``awp cmd --home H ...``."""
    if len(args) >= 3 and args[0] == "--home":
        return [args[2], "--home", args[1], *args[3:]]
    if len(args) >= 2 and args[0].startswith("--home="):
        return [args[1], args[0], *args[2:]]
    return args


def _columns() -> int:
    """The terminal width click would wrap help to (shutil's rule, without shutil)."""
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            cols = 0
    return cols or 80


def help_text(path: str) -> str | None:
    """What ``awp PATH --help`` prints here, or None when only click can say it."""
    from .clihelp import HELP as TEXTS
    from .clihelp import WIDTH

    if min(_columns(), 100) != min(WIDTH, 100):
        return None  # wrapped for another width: click renders it
    return TEXTS.get(path)


def help_argv(rest: list[str]) -> list[str]:
    """``awp help [--home H] [COMMAND...]`` as the line ``awp COMMAND... --help``.

    The one reading of ``awp help`` for both doors (typer's in
    :func:`awp.cli.app.run_app`): ``--home`` is dropped, since help needs no
    daemon; any other option is kept, so click judges it as it would on
    ``awp COMMAND OPTION --help`` (an unknown one is its usage error, exit 2).
    """
    out = []
    skip = False
    for tok in rest:
        if skip:
            skip = False
        elif tok == "--home":
            skip = True
        elif not tok.startswith("--home="):
            out.append(tok)
    return [*out, "--help"]


def _print_help(path: str) -> int | None:
    text = help_text(path)
    if text is None:
        return None
    from .base import StdoutGone, out, quiet_pipe

    try:
        out(text.rstrip("\n"))
    except StdoutGone:
        quiet_pipe()
    return 0


def run(args: list[str]) -> int | None:
    """Run an everyday command without typer; ``None`` when typer should take the line."""
    args = home_first(list(args))
    if not args:
        return None
    if args[0] in ("-h", "--help") and len(args) == 1:
        return _print_help("")
    if args[0] == "help":
        words = help_argv(args[1:])[:-1]
        if any(w.startswith("-") for w in words):
            return None  # an option: click's to judge
        return _print_help(" ".join(words))
    parsed = parse(args)
    if parsed is None:
        return None
    path, kwargs = parsed
    if kwargs is HELP:
        return _print_help(path)
    runner = RUNNERS.get(path)
    if runner is None:
        return None
    from .base import failure_code

    module = __import__(f"awp.cli.{runner[0]}", fromlist=[runner[1]])
    fn = getattr(module, runner[1])
    try:
        fn(**kwargs)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        sys.stderr.write("Aborted!\n")  # what click says
        return 1
    except Exception as e:
        code = failure_code(path, e)
        if code is None:
            raise
        return code
    return 0
