"""The ``awp`` executable's entry point.

Kept tiny on purpose: ``awp hook`` runs after every tool call of an agent,
so it is dispatched before typer (and anything heavier) is imported; so are
the common verbs (``status``, ``send``, ``read``, ...) when their command
line is a plain one (:mod:`awp.cli.fastpath`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``awp ARGV`` (default: this process's arguments); its exit status."""
    args = sys.argv[1:] if argv is None else argv
    code = _light(args)
    if code is not None:
        return code
    from .app import run_app

    return run_app(args)


def program() -> None:
    """The executable's door (``scripts/awp``, ``python -m awp``): never returns.

    A hook or a fast-path command ends with ``os._exit`` once its output is
    flushed: the interpreter's teardown (every module's dict cleared, the
    caches and the allocator's arenas freed) is a few ms of every run, as
    much as the request itself, and such a run leaves nothing behind it
    (no thread, no open file it wrote, no exit handler: every file it writes
    is closed by a ``with``).  The typer commands exit the ordinary way, and
    so does the daemon, whose body ends in ``SystemExit`` (a test holds it to
    that: its store and log are closed by the interpreter's exit).
    """
    args = sys.argv[1:]
    code = _light(args)
    if code is None:
        from .app import run_app

        sys.exit(run_app(args))
    _leave(code)


def _light(args: list[str]) -> int | None:
    """A hook's or a fast-path command's exit status; None: typer's to run."""
    if args in (["--version"], ["-V"]):
        from ..base.version import version_line

        print(version_line())
        return 0
    hook = _hook_args(args)
    if hook is not None:
        from ..hooks.run import main as hook_main

        return hook_main(hook)
    import os

    if os.environ.get("AWP_FASTPATH", "1") != "0":  # 0: every line through typer
        from .fastpath import run as run_fast

        return run_fast(args)
    return None


def _leave(code: int) -> None:
    """Flush what was written, then end the process at once (see :func:`program`)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a reader that went away (| head): nothing more to say to it
    os._exit(code)


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
