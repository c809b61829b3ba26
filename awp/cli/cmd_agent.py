"""Agent integration: ``hook``, ``mcp``, ``bootstrap`` and ``model``.

``awp hook`` normally never gets here: ``awp.cli.entry`` dispatches it before
typer is imported. This definition serves ``awp hook --help`` and keeps the
command listed in ``awp --help``.
"""

from __future__ import annotations

import os
import sys

import typer

from .common import CliError, command, home_of, home_opt, json_opt, note, out, out_json


@command("hook", short_help="Harness hook helper: print new messages for the model")
def hook_cmd(
    event: str = typer.Argument(
        None, metavar="EVENT", help="session-start, inbox or stop (default: from the input)"),
    fmt: str = typer.Option(
        "claude", "--format", metavar="FORMAT", help="claude, codex, gemini, cursor or text"),
    home: str = home_opt(),
) -> None:
    """Read the harness's hook input on stdin and print new awp messages for the model.

    session-start prints the identity, the address to share, connected peers
    and unread messages; inbox prints new unread messages; stop keeps the
    agent going once while unread messages wait. Messages shown are marked
    read; at most the latest 20 are rendered. Prints nothing, and exits 0,
    when the daemon is not running (a hook never starts it) or nothing is new.

    \b
    Examples:
      awp hook inbox --format text
      awp hook stop --format cursor
    """
    from ..hooks.run import main

    args = [event] if event else []
    args += ["--format", fmt]
    if home:
        args += ["--home", home]
    raise typer.Exit(main(args))


@command("mcp", short_help="Serve awp as an MCP server on stdin/stdout")
def mcp_cmd(
    channel: bool = typer.Option(
        False, "--channel", help="push inbound messages as Claude Code channel notifications"),
    harness: str = typer.Option(
        None, "--harness", metavar="ID", help="harness this server runs in (for a daemon it starts)"),
    home: str = home_opt(),
) -> None:
    """Serve awp as an MCP server (JSON-RPC 2.0, one message per line) on stdin/stdout.

    Tools: awp_listen, awp_connect, awp_send, awp_read, awp_state, awp_grant,
    awp_status. Starts the daemon on demand. With --channel (or AWP_CHANNEL=1)
    inbound messages are pushed as notifications/claude/channel events and
    count as read.

    \b
    Example:
      awp mcp --harness cursor
    """
    from ..harness.identity import explicit
    from ..mcp.server import serve

    try:
        chosen = explicit(harness)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    env_channel = os.environ.get("AWP_CHANNEL", "").strip().lower() in ("1", "true", "yes", "on")
    raise typer.Exit(serve(home_of(home), channel=channel or env_channel, harness=chosen))


@command("bootstrap", short_help="Install awp into the agent harnesses on this machine")
def bootstrap_cmd(
    all_: bool = typer.Option(False, "--all", help="set up every detected harness without asking"),
    harness: str = typer.Option(None, "--harness", metavar="LIST", help="harnesses to set up"),
    list_: bool = typer.Option(
        False, "--list", help="show detected harnesses and what is installed, then exit"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the changes, change nothing"),
    uninstall: bool = typer.Option(False, "--uninstall", help="remove awp from the chosen harnesses"),
    bin_: str = typer.Option(None, "--bin", metavar="PATH", help="awp binary to wire in"),
    yes: bool = typer.Option(
        False, "-y", "--yes", help="do not ask (with no --harness, the same as --all)"),
    home: str = typer.Option(
        None, "--home", metavar="DIR",
        help="awp home the harnesses should use (default: theirs, $AWP_HOME, else ~/.awp)"),
    as_json: bool = json_opt(),
) -> None:
    """Install awp into the agent harnesses on this machine: a skill, the MCP server
    and hooks (or a plugin), as each harness supports.

    Edits only awp's own entries, keeps key order, and keeps a one-time
    .awp-backup of every config file it changes. Safe to run again. Restart
    harness sessions afterwards.

    \b
    Examples:
      awp bootstrap --list
      awp bootstrap --harness claude,codex
      awp bootstrap --dry-run --all
      awp bootstrap --uninstall --all
    """
    from ..harness import bootstrap as bs

    try:
        names = bs.parse_list(harness) if harness else None
    except ValueError as e:
        raise CliError(str(e), 2) from None
    boot = bs.Bootstrap(bin_path=bin_, awp_home=home)
    if bin_ and not (os.path.isfile(boot.argv[0]) and os.access(boot.argv[0], os.X_OK)):
        note(f"awp bootstrap: warning: --bin {boot.argv[0]} is not an executable file;"
             " the harnesses will fail to run it until it is")
    if list_:
        rows = boot.listing()
        if as_json:
            out_json(rows)
        else:
            out(bs.format_listing(rows))
        return
    if names is None:
        detected = [r["harness"] for r in boot.listing() if r["detected"]]
        if uninstall:
            pool = [r["harness"] for r in boot.listing() if r["installed"]]
        else:
            pool = detected
        if not pool:
            what = "with awp installed" if uninstall else "detected"
            out(f"no harnesses {what} (see awp bootstrap --list; name them with --harness)")
            return
        if all_ or yes or dry_run or not sys.stdin.isatty():
            names = pool
        else:
            names = _ask(pool, uninstall)
    report = boot.run(names, uninstall=uninstall, dry_run=dry_run)
    if as_json:
        out_json(report)
    else:
        out(bs.format_report(report, dry_run=dry_run, uninstall=uninstall))
    if any(step.get("status") == "error" for r in report for step in r["steps"]):
        raise typer.Exit(1)


def _ask(pool: list[str], uninstall: bool) -> list[str]:
    from ..harness.identity import TITLES

    verb = "Remove awp from" if uninstall else "Set up"
    chosen = []
    for h in pool:
        ans = typer.prompt(f"{verb} {TITLES.get(h, h)}? [Y/n]", default="y",
                           show_default=False).strip().lower()
        if ans in ("", "y", "yes"):
            chosen.append(h)
    return chosen


@command("model", short_help="Show or set the model this agent runs on")
def model_cmd(
    model: str = typer.Argument(None, metavar="ID", help="the model, e.g. gpt-5.5"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Show or set the model this agent runs on (shown on dashboards).

    Takes effect at once; run it again after switching models. Claude Code,
    Cursor and opencode report the model through awp's hooks and plugin.
    Never starts the daemon: it fails when the daemon is not running.

    \b
    Examples:
      awp model gpt-5.5
      awp model
    """
    from ..localapi.daemonctl import client_if_running

    client = client_if_running(home_of(home), timeout=10.0)
    if client is None:
        raise CliError("the awp daemon is not running (start it with awp up)")
    if model is not None:
        if not model.strip():
            raise CliError("the model is empty", 2)
        res = client.post("/v1/model", {"model": model})
    else:
        res = client.get("/v1/model")
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
    elif model is not None:
        out(f"model set to {res.get('model')}")
    else:
        out(res.get("model") or "no model reported yet (set it with awp model ID)")
