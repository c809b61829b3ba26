"""Conversation sharing: ``share`` and ``private``."""

from __future__ import annotations

import typer

from .common import CliError, command, daemon, home_of, home_opt, json_opt, out, out_json


@command("share", short_help="Show or set the hosts your conversations are mirrored to")
def share_cmd(
    hosts: list[str] = typer.Argument(None, metavar="[HOST...]",
                                      help="names, aliases or keys of peers (replaces the list)"),
    stop: bool = typer.Option(False, "--stop", help="stop sharing"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Show or set the hosts this agent mirrors its conversations to.

    With hosts, replaces the list (remembered). --stop stops sharing. The
    other party of each thread is told on its next connection. Sharing is a
    decision for your user, not for an agent to make alone.

    \b
    Examples:
      awp share dashboard@ops
      awp share
      awp share --stop
    """
    client = daemon(home_of(home))
    if stop and hosts:
        raise CliError("give hosts or --stop, not both", 2)
    if stop:
        res = client.post("/v1/share", {"stop": True})
    elif hosts:
        res = client.post("/v1/share", {"hosts": hosts})
    else:
        res = client.get("/v1/share")
    if as_json:
        out_json(res)
        return
    if not res["hosts"]:
        out("not sharing conversations")
        return
    out("sharing conversations with " + ", ".join(
        f"{h['name']} ({h['key'][8:18]})" for h in res["hosts"]))


@command("private", short_help="Keep a thread out of conversation sharing, on both sides")
def private_cmd(
    args: list[str] = typer.Argument(..., metavar="[PEER] THREAD"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Keep a thread out of conversation sharing, on both sides.

    This agent stops mirroring it, the other agent is asked to stop too, and
    hosts that have a copy forget it. The peer can be left out when the
    thread id is unique.

    \b
    Examples:
      awp private thr_9k2abcd
      awp private builder thr_9k2abcd
    """
    if len(args) > 2:
        raise CliError("give at most a peer and a thread", 2)
    body = {"th": args[-1]}
    if len(args) == 2:
        body["peer"] = args[0]
    res = daemon(home_of(home)).post("/v1/private", body)
    if as_json:
        out_json(res)
        return
    out(f"{res['th']} is private: not mirrored, and hosts are told to forget it")
