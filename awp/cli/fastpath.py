"""The common verbs without typer: parse a plain command line, run the verb.

``awp status``, ``send``, ``read``, ``threads``, ``peers``, ``tail`` and
``wait`` are what agents run all day, and importing typer and click cost
three times what the request to the daemon does.  This parser takes the
command lines those verbs are normally given (long and short options, ``=``
values, repeated options, positionals, ``--``) and hands the values to the
same functions the typer commands call (:mod:`awp.cli.verbs`).

Anything it is not sure of returns ``None``, and the full typer app takes
the line instead: help, an unknown option, a missing or malformed value, too
many positionals, a positional that starts with ``-`` (a key prefix, which
``run_app`` knows how to place).  So every usage error, and every help text,
is still click's; this path only ever runs lines typer would have accepted,
with the values typer would have passed.
"""

from __future__ import annotations

FLAG, VALUE, MULTI, INT = "flag", "value", "multi", "int"

_COMMON = {"--home": ("home", VALUE), "--json": ("as_json", FLAG)}

# verb -> (options: spelling -> (parameter, kind), defaults, positional parameter, how many)
_SPECS: dict[str, tuple[dict[str, tuple[str, str]], dict[str, object], str | None, int]] = {
    "status": ({}, {}, None, 0),
    "peers": ({}, {}, None, 0),
    "threads": (
        {"--open": ("open_only", FLAG), "--wide": ("wide", FLAG),
         "-p": ("peer", VALUE), "--peer": ("peer", VALUE)},
        {"open_only": False, "wide": False, "peer": None}, None, 0),
    "read": (
        {"-n": ("last", INT), "--last": ("last", INT), "-p": ("peer", VALUE),
         "--peer": ("peer", VALUE), "--no-mark": ("no_mark", FLAG)},
        {"last": 50, "peer": None, "no_mark": False}, "target", 1),
    "tail": (
        {"--once": ("once", FLAG), "--all": ("all_", FLAG), "--mark": ("mark", FLAG),
         "-p": ("peer", VALUE), "--peer": ("peer", VALUE),
         "-t": ("thread", VALUE), "--thread": ("thread", VALUE)},
        {"once": False, "all_": False, "mark": False, "peer": None, "thread": None}, None, 0),
    "wait": (
        {"-t": ("thread", VALUE), "--thread": ("thread", VALUE), "-p": ("peer", VALUE),
         "--peer": ("peer", VALUE), "--state": ("states", VALUE),
         "--timeout": ("timeout", VALUE)},
        {"thread": None, "peer": None, "states": None, "timeout": "5m"}, None, 0),
    "send": (
        {"-s": ("subject", VALUE), "--subject": ("subject", VALUE),
         "-t": ("thread", VALUE), "--thread": ("thread", VALUE), "--to": ("to", VALUE),
         "--re": ("re_id", VALUE), "--code": ("code", MULTI), "--lang": ("lang", VALUE),
         "--data": ("data", MULTI), "--mime": ("mime", VALUE),
         "-f": ("files", MULTI), "--file": ("files", MULTI), "--wait-ack": ("wait_ack", VALUE)},
        {"subject": None, "thread": None, "to": None, "re_id": None, "code": [], "lang": None,
         "data": [], "mime": "application/json", "files": [], "wait_ack": None},
        "args", -1),
}

VERBS = frozenset(_SPECS)


def parse(verb: str, args: list[str]) -> dict | None:
    """The verb's keyword arguments for ``args``, or ``None`` to leave it to typer."""
    spec = _SPECS.get(verb)
    if spec is None:
        return None
    options, defaults, positional, count = spec
    table = {**options, **_COMMON}
    values: dict[str, object] = {"home": None, "as_json": False, **defaults}
    for k, v in values.items():
        if isinstance(v, list):
            values[k] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            rest += args[i:]
            break
        if tok == "-" or not tok.startswith("-"):
            rest.append(tok)
            continue
        if tok.startswith("--"):
            name, eq, attached = tok.partition("=")
        else:
            name, attached = tok[:2], tok[2:]
            eq = "=" if attached else ""
        entry = table.get(name)
        if entry is None:
            return None  # help, an unknown option, or a key prefix: typer decides
        param, kind = entry
        if kind == FLAG:
            if eq:
                return None
            values[param] = True
            continue
        if eq:
            value = attached
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            return None  # a missing value is click's usage error
        if kind == INT:
            try:
                values[param] = int(value)
            except ValueError:
                return None
        elif kind == MULTI:
            values[param].append(value)  # type: ignore[union-attr]
        else:
            values[param] = value
    if positional is None:
        if rest:
            return None
    elif count == 1:
        if len(rest) > 1:
            return None
        values[positional] = rest[0] if rest else None
    else:
        values[positional] = rest or None
    return values


def home_first(args: list[str]) -> list[str]:
    """Accept ``awp --home H cmd ...`` as well as ``awp cmd --home H ...``."""
    if len(args) >= 3 and args[0] == "--home":
        return [args[2], "--home", args[1], *args[3:]]
    if len(args) >= 2 and args[0].startswith("--home="):
        return [args[1], args[0], *args[2:]]
    return args


def run(args: list[str]) -> int | None:
    """Run a common verb without typer; ``None`` when the full CLI should take the line."""
    args = home_first(list(args))
    if not args or args[0] not in VERBS:
        return None
    verb = args[0]
    kwargs = parse(verb, args[1:])
    if kwargs is None:
        return None
    from . import verbs
    from .base import failure_code

    try:
        getattr(verbs, verb)(**kwargs)
    except KeyboardInterrupt:
        import sys

        sys.stderr.write("Aborted!\n")  # what click says
        return 1
    except Exception as e:
        code = failure_code(verb, e)
        if code is None:
            raise
        return code
    return 0
