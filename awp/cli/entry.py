"""The ``awp`` executable's entry point.

Kept tiny on purpose: ``awp hook`` runs after every tool call of an agent,
so it is dispatched before typer (and anything heavier) is imported; so are
the common verbs (``status``, ``send``, ``read``, ...) when their command
line is a plain one (:mod:`awp.cli.fastpath`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    hook = _hook_args(args)
    if hook is not None:
        from ..hooks.run import main as hook_main

        return hook_main(hook)
    import os

    if os.environ.get("AWP_FASTPATH", "1") != "0":  # 0: every line through typer
        from .fastpath import run as run_fast

        code = run_fast(args)
        if code is not None:
            return code
    from .app import run_app

    return run_app(args)


def _hook_args(args: list[str]) -> list[str] | None:
    """The arguments of ``awp [--home H] hook ...`` (None: not a hook, or asking for help)."""
    if "-h" in args or "--help" in args:
        return None
    if args[:1] == ["hook"]:
        return list(args[1:])
    if len(args) >= 3 and args[0] == "--home" and args[2] == "hook":
        return [*args[3:], "--home", args[1]]
    if len(args) >= 2 and args[0].startswith("--home=") and args[1] == "hook":
        return [*args[2:], args[0]]
    return None
