"""The ``awp`` executable's entry point.

Kept tiny on purpose: ``awp hook`` runs after every tool call of an agent,
so it is dispatched before typer (and anything heavier) is imported.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from .app import run_app

    return run_app(args)
