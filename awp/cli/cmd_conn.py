"""Getting connected: up, listen, connect, address, status, down, peers, alias, bye."""

from __future__ import annotations

import time

import typer

from ..localapi.client import LocalClient, wait_for_address
from .common import (
    CliError,
    command,
    compact,
    daemon,
    home_of,
    home_opt,
    json_opt,
    note,
    out,
    out_json,
    parse_seconds,
)
from .daemonctl import client_if_running, ensure_daemon, status_if_running, stop_daemon
from .render import budget_line, clip, peer_budget_cell, render_record, table

UP_WAIT = 45.0


def _short(key: str) -> str:
    return key.split(":", 1)[-1][:10] if key else ""


def _peer_name(p: dict) -> str:
    name = p.get("name") or _short(p.get("key", ""))
    aliases = p.get("aliases") or []
    return f"{name} ({', '.join(aliases)})" if aliases else name


def _no_address_reason(st: dict) -> str:
    if st.get("tailcat_error"):
        return f"tailcat: {st['tailcat_error']}"
    errors = st.get("listen_errors") or {}
    if errors:
        k, v = next(iter(errors.items()))
        return f"{k}: {v}"
    return "nothing to listen on: set listen in config.json or AWP_LISTEN"


# -- up ------------------------------------------------------------------------------

@command("up", short_help="Start the daemon if needed; print the key and the address to share")
def up(
    name: str = typer.Option(None, "--name", metavar="NAME", help="name to present to peers (remembered)"),
    about: str = typer.Option(None, "--about", metavar="TEXT", help="what you are working on (remembered)"),
    harness: str = typer.Option(
        None, "--harness", metavar="ID", help="claude, opencode, codex, cursor, gemini, copilot, grok or pi"),
    presence: bool = typer.Option(
        False, "--presence", help="publish signed presence for dashboards on connected hosts"),
    share_with: str = typer.Option(
        None, "--share-with", metavar="HOST,...",
        help="hosts to mirror your conversations to (remembered)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Start the daemon if needed and print the identity and the address to share.

    Waits up to 45s for the address. Hand the address to the other agent; it
    runs 'awp connect ADDRESS'. --name and --about are remembered, so pass
    them once. If the daemon is already running, these flags take effect from
    its next start (awp down, then awp up again).

    \b
    Example:
      awp up --name worker@sprite --about "Test runner for acme/api"
    """
    h = home_of(home)
    flags: list[str] = []
    given: list[str] = []
    for flag, value in (("--name", name), ("--about", about), ("--harness", harness),
                        ("--share-with", share_with)):
        if value is not None:
            flags += [flag, value]
            given.append(flag)
    if presence:
        flags.append("--presence")
        given.append("--presence")
    client = client_if_running(h)
    if client is None:
        client = ensure_daemon(h, flags_args=flags)
    elif given:
        note(f"awp up: the daemon is already running; {', '.join(given)} take effect from its"
             " next start: run awp down, then awp up with them again")
    st = wait_for_address(client, UP_WAIT)
    if as_json:
        out_json({k: st.get(k) for k in ("name", "key", "address", "addresses", "tailcat_error",
                                          "listen_errors", "pid", "home")})
        return
    addr = st.get("address") or ""
    out(f"awp is up as {st.get('name')}")
    out(f"  key      {st.get('key')}")
    if addr:
        out(f"  address  {addr}  ← hand this to the other agent")
        out()
        out("share the address with the other agent; they run:")
        out(f"  awp connect {addr}")
    else:
        out(f"  address  none yet ({_no_address_reason(st)})")


# -- listen --------------------------------------------------------------------------

@command("listen", short_help="Print the address, then stream inbound messages as NDJSON")
def listen(
    mark: bool = typer.Option(False, "--mark", help="mark streamed messages as read"),
    text: bool = typer.Option(False, "--text", help="human-readable output instead of NDJSON"),
    home: str = home_opt(),
) -> None:
    """Print the address, then every inbound message as one JSON object per line.

    The first line is {"event":"listening",...} with the key, name and
    address. Runs until killed; the daemon keeps running afterwards.

    \b
    Example:
      awp listen | while read -r line; do echo "$line"; done
    """
    client = daemon(home_of(home))
    st = client.get("/v1/status")
    assert isinstance(st, dict)
    if text:
        where = st.get("address") or f"no address yet ({_no_address_reason(st)})"
        out(f"listening as {st.get('name')} ({st.get('key')}) on {where}")
    else:
        out(compact({"event": "listening", "key": st.get("key"), "name": st.get("name"),
                     "address": st.get("address") or ""}))
    query: dict[str, object] = {"from": "now"}
    if mark:
        query["mark"] = "1"
    _follow(client, query, text)


def _follow(client: LocalClient, query: dict, text: bool) -> None:
    """Copy the daemon's event stream to stdout until interrupted."""
    try:
        with client.stream("GET", "/v1/events", query=query) as events:
            for rec in events:
                if text and isinstance(rec, dict):
                    out(render_record(rec))
                else:
                    out(compact(rec))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    raise CliError("the awp daemon ended the stream (did it stop?)")


# -- connect / address ---------------------------------------------------------------

@command("connect", short_help="Connect to a peer by address or name")
def connect(
    target: str = typer.Argument(..., metavar="ADDRESS_OR_PEER",
                                 help="an address (tc..., tcp:HOST:PORT, unix:/path) or a known peer"),
    timeout: str = typer.Option("1m", "--timeout", metavar="DURATION", help="give up after this long"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Connect to a peer by the address its 'awp up' printed, or by name.

    The daemon keeps the connection and reconnects while there is unfinished
    business. Connecting to a peer that is already connected does nothing.

    \b
    Example:
      awp connect tcp:10.0.0.5:7000
      awp connect worker@sprite
    """
    secs = parse_seconds(timeout, "--timeout")
    client = daemon(home_of(home), timeout=secs + 15)
    res = client.post("/v1/connect", {"target": target, "timeout": secs})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    name = res.get("name") or _short(res.get("key", ""))
    if res.get("already"):
        out(f"already connected to {name}")
    else:
        out(f"connected to {name} (ed25519:{_short(res.get('key', ''))}...)")


@command("address", short_help="Print the address to share")
def address(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Print the address to share with another agent (the tailcat one when available).

    \b
    Example:
      awp address
    """
    st = daemon(home_of(home)).get("/v1/status")
    assert isinstance(st, dict)
    addr = st.get("address") or ""
    if as_json:
        out_json({"address": addr, "addresses": st.get("addresses") or [],
                  "tailcat_error": st.get("tailcat_error") or ""})
        if not addr:
            raise typer.Exit(1)
        return
    if not addr:
        raise CliError(f"no address yet ({_no_address_reason(st)})")
    out(addr)


# -- status / down -------------------------------------------------------------------

@command("status", short_help="Show identity, addresses, counts and peers (exit 3 if not running)")
def status(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Show this agent's identity, addresses, counts and peers. Never starts the daemon.

    Exits 3 when the daemon is not running.

    \b
    Example:
      awp status
    """
    found = status_if_running(home_of(home))
    if found is None:
        raise CliError("daemon not running (start it with awp up)", code=3)
    st = found[1]
    if as_json:
        out_json(st)
        return
    lines = [f"{st.get('name')} ({st.get('key')})"]
    up_for = ""
    if st.get("started"):
        from ..durations import format_duration

        up_for = f", up {format_duration(time.time() - st['started'] / 1000)}"
    lines.append(f"  daemon   pid {st.get('pid')}{up_for}, awp {st.get('version')}")
    lines.append(f"  address  {st.get('address') or 'none yet (' + _no_address_reason(st) + ')'}")
    addrs = st.get("addresses") or []
    if addrs:
        lines.append(f"  listen   {', '.join(addrs)}")
    if st.get("tailcat_error"):
        lines.append(f"  tailcat  {st['tailcat_error']}")
    for k, v in (st.get("listen_errors") or {}).items():
        if k.strip().lower() != "tailcat":
            lines.append(f"  cannot listen on {k}: {v}")
    lines.append(f"  unread {st.get('unread', 0)}, {st.get('notices', 0)} notices,"
                 f" queued {st.get('queued', 0)}")
    if st.get("budgets"):
        lines.append(f"  budgets  {budget_line(st['budgets'])}")
    out("\n".join(lines))
    peers = st.get("peers") or []
    out()
    if not peers:
        out("no peers yet: awp connect ADDRESS")
        return
    rows = [[_peer_name(p), _short(p.get("key", "")), p.get("state", ""), p.get("queued", 0),
             p.get("unread", 0)] for p in peers]
    out(table(["NAME", "KEY", "STATE", "QUEUED", "UNREAD"], rows))


@command("down", short_help="Stop the daemon (queued messages stay on disk)")
def down(home: str = home_opt()) -> None:
    """Stop the daemon. Queued messages stay on disk and go out after the next start.

    \b
    Example:
      awp down
    """
    h = home_of(home)
    if not stop_daemon(h, client_if_running(h, 5.0)):
        out("awp is not running")
        return
    out("awp stopped")


# -- peers / alias / bye -------------------------------------------------------------

@command("peers", short_help="List known peers and their connection state")
def peers(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """List known peers: connection state, queued messages, open threads, unread.

    STATE is connected (out) / connected (in), reconnecting, offline or said bye.

    \b
    Example:
      awp peers
    """
    rows = daemon(home_of(home)).get("/v1/peers")
    assert isinstance(rows, list)
    if as_json:
        out_json(rows)
        return
    if not rows:
        out("no peers yet: awp connect ADDRESS")
        return
    out(table(
        ["NAME", "KEY", "STATE", "QUEUED", "OPEN", "UNREAD", "GRANTED", "STORED"],
        [[clip(_peer_name(p), 40), p.get("short") or _short(p.get("key", "")),
          p.get("state", ""), p.get("queued", 0), p.get("open_threads", 0), p.get("unread", 0),
          ",".join(p.get("granted") or []) or "-", peer_budget_cell(p.get("budget"))]
         for p in rows]))


@command("alias", short_help="Give a peer a local nickname")
def alias(
    peer: str = typer.Argument(..., metavar="PEER", help="the peer: name, alias, key prefix or key"),
    name: str = typer.Argument(..., metavar="ALIAS", help="the nickname, one word"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Give a peer a local nickname, usable anywhere a peer is expected.

    \b
    Example:
      awp alias worker@sprite w
    """
    client = daemon(home_of(home))
    who = client.post("/v1/resolve", {"peer": peer})
    res = client.post("/v1/alias", {"peer": peer, "alias": name})
    assert isinstance(res, dict) and isinstance(who, dict)
    if as_json:
        out_json(res)
        return
    out(f"{res.get('alias')} now names {who.get('name')} (ed25519:{_short(res.get('key', ''))}...)")


@command("bye", short_help="Close the connection to a peer gracefully")
def bye(
    peer: str = typer.Argument(..., metavar="PEER", help="the peer: name, alias, key prefix or key"),
    reason: str = typer.Option("", "--reason", metavar="TEXT", help="why, told to the peer"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Close the connection to a peer gracefully.

    The peer is not reconnected to until you send it something new.

    \b
    Example:
      awp bye builder --reason "all done"
    """
    client = daemon(home_of(home))
    who = client.post("/v1/resolve", {"peer": peer})
    res = client.post("/v1/bye", {"peer": peer, "reason": reason})
    assert isinstance(res, dict) and isinstance(who, dict)
    if as_json:
        out_json({**res, "name": who.get("name")})
        return
    name = who.get("name") or _short(res.get("key", ""))
    if res.get("connected"):
        out(f"said bye to {name}")
    else:
        out(f"{name} parked (not connected)")
