"""The fast path's table and help are the typer commands' own, and its runners fit them.

The typer declarations are the one source of truth for options and help;
``awp.cli.clitable`` and ``awp.cli.clihelp`` are generated from them.  When
this fails after a change to a command, run ``python -m awp.cli.gentable``.
"""

import importlib
import inspect

from awp.cli import gentable
from awp.cli.clitable import COMMANDS
from awp.cli.fastpath import RUNNERS


def test_generated_table_and_help_are_current():
    table_src, help_src = gentable.build()
    table_path, help_path = gentable.paths()
    with open(table_path, encoding="utf-8") as f:
        assert f.read() == table_src, "run: python -m awp.cli.gentable"
    with open(help_path, encoding="utf-8") as f:
        assert f.read() == help_src, "run: python -m awp.cli.gentable"


def test_every_runner_takes_exactly_its_commands_parameters():
    for path, (module, name) in RUNNERS.items():
        entry = COMMANDS[path]
        assert not entry.get("opaque") and not entry.get("group"), path
        fn = getattr(importlib.import_module(f"awp.cli.{module}"), name)
        params = list(inspect.signature(fn).parameters)
        assert sorted(params) == sorted(entry["defaults"]), path


def test_the_board_and_queue_commands_are_on_the_fast_path():
    everyday = {"get", "post", "reply", "subscribe", "unsubscribe", "claim", "complete", "fail",
                "release", "renew", "topics", "queue", "edit", "delete", "hide", "send", "state",
                "status", "read", "peers", "threads", "tail", "wait"}
    assert everyday <= set(RUNNERS)
    assert {p for p in COMMANDS if p.startswith("topic ")} <= set(RUNNERS)
