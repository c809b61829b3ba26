"""``awp invite``: a one-string invite to hand over, and the invites already issued."""

from __future__ import annotations

import typer

from ..present import render
from .common import (
    CliError,
    command,
    daemon,
    home_of,
    home_opt,
    json_opt,
    note,
    out,
    out_json,
    parse_seconds,
)


@command("invite", short_help="Print an invite (key, endpoints, a secret) to hand over")
def invite_cmd(
    uses: int = typer.Option(1, "--uses", metavar="N", help="how many keys may redeem it"),
    ttl: str = typer.Option("24h", "--ttl", metavar="DURATION",
                            help="how long it can be redeemed"),
    grant: list[str] = typer.Option(
        [], "--grant", metavar="CAP",
        help="a capability the redeemer gets on its first connection (repeatable:"
             " exec, fs:read, fs:write, introduce, admin)"),
    topic: str = typer.Option(None, "--topic", metavar="NAME",
                              help="one of your topics the redeemer may read or post to"),
    can: str = typer.Option("post", "--can", metavar="read|post",
                            help="what --topic allows (default post)"),
    grant_ttl: str = typer.Option(
        None, "--grant-ttl", metavar="DURATION",
        help="how long what it grants lasts from redemption (default 1h for --grant,"
             " 30d for --topic)"),
    list_: bool = typer.Option(False, "--list", help="list the invites issued (no secrets)"),
    revoke: str = typer.Option(None, "--revoke", metavar="ID", help="revoke an invite"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Print one string to hand to another agent instead of your address.

    It names your key and every endpoint you listen on, and carries a fresh
    secret; the other side runs 'awp connect INVITE'. The secret never
    crosses the wire (the redeemer proves it knows it), and this daemon keeps
    only a hash of it. With 'accept: invite-only' in the policy, only holders
    of a live invite and peers already met get in.

    \b
    Examples:
      awp invite
      awp invite --uses 3 --ttl 2h --topic ops --can post
      awp invite --grant fs:read
      awp invite --list
      awp invite --revoke inv_abcdefghjk23
    """
    client = daemon(home_of(home))
    if list_ or revoke:
        if list_ and revoke:
            raise CliError("give --list or --revoke, not both", 2)
        if revoke:
            res = client.post("/v1/invite/revoke", {"id": revoke})
            if as_json:
                out_json(res)
            else:
                out(f"revoked {res['revoked']}")
            return
        rows = client.get("/v1/invites")
        assert isinstance(rows, list)
        if as_json:
            out_json(rows)
            return
        if not rows:
            note("no invites: awp invite makes one")
            return
        out(render.table(["ID", "STATE", "USES LEFT", "EXPIRES", "GRANTS"],
                         [[r["id"], r["state"], f"{r['uses_left']}/{r['uses']}",
                           _when(r["expires"]), _grants(r) or "-"] for r in rows]))
        return
    body: dict = {"uses": uses, "ttl": parse_seconds(ttl, "--ttl"),
                  "caps": [c.strip() for g in grant for c in g.split(",") if c.strip()]}
    if topic is not None:
        body.update(topic=topic, can=can)
    elif can != "post":
        raise CliError("--can goes with --topic", 2)
    if grant_ttl is not None:
        body["grant_ttl"] = parse_seconds(grant_ttl, "--grant-ttl")
    res = client.post("/v1/invite", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    if res.get("warning"):
        note("warning: " + res["warning"])
    out(res["invite"])
    what = _grants(res)
    note(f"invite {res['id']}: {res['uses']} use{'s' if res['uses'] != 1 else ''},"
         f" redeemable until {_when(res['expires'])}" + (f", grants {what}" if what else ""))
    note("hand it to the other agent (it holds a secret: share it privately); they run:")
    note("  awp connect <the invite>")


def _grants(r: dict) -> str:
    parts = list(r.get("caps") or [])
    parts += [f"{t['can']} {t['topic'].split('/', 1)[-1]}" for t in r.get("topics") or []]
    return ", ".join(parts)


def _when(ms: int) -> str:
    from ..base.durations import format_duration
    from ..wire.timefmt import format_ts_seconds

    left = (ms - render.now_ms()) / 1000
    return format_ts_seconds(ms) + (f" (in {format_duration(left)})" if left > 0 else "")
