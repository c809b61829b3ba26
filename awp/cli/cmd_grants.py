"""Files and permissions: ``blobs``, ``grant``, ``grants``, ``revoke``, ``introduce``."""

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

CAPS_HELP = "capabilities: exec, fs:read, fs:write, introduce, admin, pair"


@command("blobs", short_help="List files sent and received, with local paths")
def blobs_cmd(
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    verify: bool = typer.Option(False, "--verify",
                                help="recheck received bulk files; bad pieces are refetched"),
    watch: bool = typer.Option(False, "--watch", help="redraw until no bulk transfer is running"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """List files sent and received, with their local paths.

    A sent file is queued until the peer acks the message carrying it, then
    sent; a received one is pending, received, complete or refused.  A bulk
    file (one sent on a side connection) is fetching until every piece is
    verified, and shows its percent, rate and ETA.

    \b
    Examples:
      awp blobs
      awp blobs --peer builder
      awp blobs --verify
      awp blobs --watch
    """
    import sys
    import time

    from ..present import progress

    client = daemon(home_of(home))
    query = {"peer": peer} if peer else {}
    if verify:
        res = client.post("/v1/blobs/verify", query)
        if as_json:
            out_json(res)
            return
        for r in res or []:
            bad = r.get("bad") or []
            out(f"{r['ref']}: {r.get('pieces', 0)} pieces, " + (
                f"{len(bad)} damaged ({', '.join(map(str, bad))}), fetching them again"
                if bad else r.get("error") or "all verified"))
        if not res:
            note("no bulk files to verify")
        return
    tty = sys.stdout.isatty()
    shown = 0
    while True:
        rows = client.get("/v1/blobs", **query)
        if as_json:
            out_json(rows)
            return
        if not rows:
            note("no files yet")
            return
        table = [[("sent to " if b["dir"] == "out" else "from ") + b.get("peer_name", ""),
                  b["name"] or b["ref"], b["size"] if b["size"] >= 0 else "?", b["status"],
                  progress.cell(b, tty), b["path"] if b["dir"] == "in" else b.get("th", "")]
                 for b in rows]
        text = render.table(["PEER", "NAME", "BYTES", "STATUS", "PROGRESS", "PATH / THREAD"],
                            table)
        if shown and tty:
            sys.stdout.write(f"\x1b[{shown}F\x1b[J")
        out(text)
        shown = text.count("\n") + 1
        running = any(b.get("bulk") and b["dir"] == "in" and b["status"] == "fetching"
                      for b in rows)
        if not watch or not running:
            return
        time.sleep(0.5)


@command("grant", short_help="Grant a peer capabilities (exec and fs:write are RCE)")
def grant_cmd(
    args: list[str] = typer.Argument(..., metavar="PEER CAP...", help=f"the peer, then {CAPS_HELP}"),
    ttl: str = typer.Option("1h", "--ttl", metavar="DURATION", help="how long it is valid"),
    audience: str = typer.Option(
        None, "--audience", metavar="KEY",
        help="where it counts: a host, or an operator key (every device it certifies);"
             " default anywhere that honors you"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Grant a peer capabilities, signed by your key, until the ttl runs out.

    exec and fs:write are remote code execution: grant them only when your
    user has explicitly agreed, and keep the ttl short.

    \b
    Examples:
      awp grant builder fs:read --ttl 2h
      awp grant builder exec --ttl 30m
      awp grant builder fs:read --audience ed25519:OpK...   (every device of a team)
    """
    if len(args) < 2:
        raise CliError("give a peer and at least one capability", 2)
    seconds = parse_seconds(ttl, "--ttl")
    body: dict = {"peer": args[0], "caps": args[1:], "ttl": seconds}
    if audience:
        body["aud"] = audience
    res = daemon(home_of(home)).post("/v1/grant", body)
    if as_json:
        out_json(res)
        return
    if res.get("warning"):
        note("warning: " + res["warning"])
    how = "delivered" if res.get("delivered") else "it gets it on the next connection"
    out(f"granted {', '.join(args[1:])} to {res['peer_name']} until {res['grant']['exp']}"
        f" ({how}); hash {res['hash']}")


@command("grants", short_help="List grants: issued, held and presented")
def grants_cmd(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """List grants: issued (by you), held (granted to you) and presented
    (shown to you by peers about themselves), with names beside key prefixes.

    \b
    Example:
      awp grants
    """
    rows = daemon(home_of(home)).get("/v1/grants")
    if as_json:
        from . import shapes

        out_json(shapes.grants(rows if isinstance(rows, list) else []))
        return
    if not rows:
        note("no grants")
        return

    def who(g: dict, f: str) -> str:
        k = g.get(f) or ""
        return f"{g.get(f + '_name') or '?'} ({k[8:18]})" if k else ""

    table = [[g["hash"][:12], g["kind"], who(g, "iss"), who(g, "sub"), ",".join(g["caps"]) or "-",
              "expired" if g["expired"] else _left(g["exp"]), who(g, "aud")] for g in rows]
    out(render.table(["HASH", "KIND", "ISSUER", "SUBJECT", "CAPS", "EXPIRES", "AUDIENCE"], table))


def _left(exp_ms: int) -> str:
    from ..base.durations import format_duration

    return "in " + format_duration((exp_ms - render.now_ms()) / 1000)


@command("revoke", short_help="Stop honoring a grant, by its hash")
def revoke_cmd(
    hash_: str = typer.Argument(..., metavar="HASH", help="the hash awp grants shows (a prefix)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Stop honoring a grant, by the hash awp grants shows.

    The peer may still hold its signed copy and present it again until it
    expires; that is why short ttls matter.

    \b
    Example:
      awp revoke 3f9a1c
    """
    res = daemon(home_of(home)).post("/v1/revoke", {"hash": hash_})
    if as_json:
        out_json(res)
        return
    out(f"revoked {res['revoked']}")


@command("introduce", short_help="Hand a peer another peer's key and address, with a grant")
def introduce_cmd(
    args: list[str] = typer.Argument(..., metavar="TO PEER [CAP...]",
                                     help="who to tell, whom to introduce, capabilities"),
    thread: str = typer.Option(None, "-t", "--thread", metavar="THREAD",
                               help="send it in this thread"),
    ttl: str = typer.Option("1h", "--ttl", metavar="DURATION", help="how long the grant lasts"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Send TO the key and address of PEER, with a grant PEER will honor if it
    trusts you with introduce. The grant is bound to PEER and gives TO nothing
    on you. Queued if TO is not connected.

    \b
    Example:
      awp introduce C A fs:read --ttl 1h
    """
    if len(args) < 2:
        raise CliError("give the peer to tell and the peer to introduce", 2)
    body: dict = {"to": args[0], "peer": args[1], "caps": args[2:],
                  "ttl": parse_seconds(ttl, "--ttl")}
    if thread is not None:
        body["th"] = thread
    res = daemon(home_of(home)).post("/v1/introduce", body)
    if as_json:
        out_json(res)
        return
    name = res["peer"].get("name") or res["peer"]["key"]
    out(f"introduced {name} to {args[0]} in {res['th']} ({res['status']})")
