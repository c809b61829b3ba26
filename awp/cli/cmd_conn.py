"""Getting connected: up, listen, connect, address, status, down, peers, alias, bye."""

from __future__ import annotations

import typer

from ..localapi.client import wait_for_address
from ..localapi.daemonctl import client_if_running, ensure_daemon, stop_daemon
from . import verbs
from .base import invoked_as
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

UP_WAIT = 45.0


def read_ca_file(path: str) -> str:
    """The PEM text of ``--ca FILE`` (the daemon checks it holds certificates)."""
    from ..transport.wsconfig import MAX_CA_BYTES as MAX_CA_FILE

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CA_FILE + 1)
    except OSError as e:
        raise CliError(f"--ca {path}: {e.strerror or e}", 2) from None
    if len(data) > MAX_CA_FILE:
        raise CliError(f"--ca {path}: over {MAX_CA_FILE // 1024} KiB, not a CA file", 2)
    return data.decode("ascii", "replace")








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
    listen: list[str] = typer.Option(
        [], "--listen", metavar="ADDR",
        help="tailcat, tcp:HOST:PORT, unix:/path or ws:HOST:PORT[=PUBLIC_URL]"
             " (repeatable; remembered)"),
    no_tailcat: bool = typer.Option(False, "--no-tailcat", help="do not listen on tailcat"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Start the daemon if needed and print the identity and the address to share.

    Waits up to 45s for the address, and exits 1 when nothing listens (tailcat
    cannot reach its relay, a port is taken, a listen address is wrong). Hand
    the address to the other agent; it runs 'awp connect ADDRESS'. --name,
    --about and --listen are remembered, so pass them once. If the daemon is
    already running, these flags take effect from its next start (awp down,
    then awp up again).

    \b
    Example:
      awp up --name worker@sprite --about "Test runner for acme/api"
      awp up --listen tcp:127.0.0.1:7000 --no-tailcat
      awp up --listen ws:0.0.0.0:8080=wss://box.example.dev/ --no-tailcat
    """
    h = home_of(home)
    flags: list[str] = []
    given: list[str] = []
    for flag, value in (("--name", name), ("--about", about), ("--harness", harness),
                        ("--share-with", share_with)):
        if value is not None:
            flags += [flag, value]
            given.append(flag)
    for item in listen:
        _check_listen(item)
        flags += ["--listen", item]
    if listen:
        given.append("--listen")
    for flag, on in (("--presence", presence), ("--no-tailcat", no_tailcat)):
        if on:
            flags.append(flag)
            given.append(flag)
    me = invoked_as()
    client = client_if_running(h)  # another user's daemon: permission denied, here
    started = client is None
    if client is None:
        _check_config(h)
        client = ensure_daemon(h, flags_args=flags, create=True)
    elif given:
        note(f"awp up: the daemon is already running; {', '.join(given)} take"
             f"{'s' if len(given) == 1 else ''} effect from its next start:"
             f" run {me} down, then {me} up with them again")
    st = wait_for_address(client, UP_WAIT)
    addr = st.get("address") or ""
    if not addr:
        after = _no_address_after(h, client, st, started, me)
    if as_json:
        out_json({k: st.get(k) for k in ("name", "key", "address", "addresses", "reachable",
                                          "multi_address", "listen", "tailcat_error",
                                          "listen_errors", "pid", "home")})
        if not addr:
            note(after.strip())
            raise typer.Exit(1)
        return
    if not addr:  # one thing said, and the way out: not "up" first, then "stopped"
        raise CliError(f"nothing listens: {verbs.no_address_reason(st)}"
                       f"{_listen_hint(st, me, running='still runs' in after)}{after}")
    out(f"awp is up as {st.get('name')}")
    out(f"  key      {st.get('key')}")
    out(f"  address  {addr}  ← hand this to the other agent")
    others = [a for a in st.get("reachable") or [] if a != addr]
    if others:
        out(f"  also     {', '.join(others)}")
    if st.get("multi_address"):
        out(f"  all      {st['multi_address']}  ← or this: the key and every endpoint")
    for k, v in (st.get("listen_errors") or {}).items():
        out(f"  cannot listen on {k}: {v}")
    out()
    out("share the address with the other agent; they run:")
    out(f"  awp connect {addr}")


def _check_config(home: str) -> None:
    """One clear line for a config.json the daemon would refuse, before starting it."""
    from ..base.home import HomeError
    from ..daemon.configfile import load_config_file

    try:
        load_config_file(home)
    except HomeError as e:
        raise CliError(str(e)) from None


def _check_listen(item: str) -> None:
    from ..wire.address import AddressError, parse_listen

    try:
        parse_listen(item)
    except AddressError as e:
        raise CliError(f"--listen {item}: {e} (use tailcat, tcp:HOST:PORT, unix:/path or"
                       " ws:HOST:PORT[=PUBLIC_URL])", code=2) from None


def _tailcat_pending(st: dict) -> bool:
    """tailcat is configured and has neither come up nor failed: it may still."""
    return not st.get("tailcat_error") and any(
        k.strip().lower() == "tailcat" for k in (st.get("listen") or {}).get("configured", []))


def _listen_hint(st: dict, me: str = "awp", running: bool = True) -> str:
    """How to get going when the listener failed (``me``: how awp was run): a port
    taken by another program, or tailcat without its relay."""
    down = f"{me} down && " if running else ""
    for where, why in (st.get("listen_errors") or {}).items():
        if "in use" in str(why).lower():
            host = where.rsplit(":", 1)[0] if where.count(":") >= 2 else "tcp:127.0.0.1"
            return (f"\nanother program holds that port: pick another, or port 0 for any"
                    f" free one:\n  {down}{me} up --listen {host}:0")
    if _tailcat_pending(st):
        return f" (tailcat has not come up yet; {me} status shows when it does)"
    if st.get("tailcat_error"):
        return ("\nwithout a tailcat relay, listen on TCP or a Unix socket instead:\n"
                f"  {down}{me} up --listen tcp:127.0.0.1:7000 --no-tailcat\n"
                "  (or --listen unix:/tmp/awp.sock; peers then run awp connect with that address)")
    return ""


def _no_address_after(home: str, client, st: dict, started: bool, me: str) -> str:
    """What became of the daemon when nothing listens: said on the lines after the error.

    One this command started is stopped again, unless tailcat may still come
    up; one that was running before is left as it was.  Either way the user is
    told, with the command as they ran it.
    """
    pid = st.get("pid")
    if started and not _tailcat_pending(st):
        try:
            stop_daemon(home, client)
        except TimeoutError:
            return f"\nthe daemon this started (pid {pid}) did not stop: {me} down stops it"
        return "\nthe daemon this started is stopped again"
    if started:
        return (f"\nthe daemon still runs (pid {pid}): tailcat may still come up, and local"
                f" commands work meanwhile; {me} down stops it")
    return (f"\nthe daemon was running before this and still runs (pid {pid});"
            f" {me} down stops it")


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
        where = st.get("address") or f"no address yet ({verbs.no_address_reason(st)})"
        out(f"listening as {st.get('name')} ({st.get('key')}) on {where}")
    else:
        out(compact({"event": "listening", "key": st.get("key"), "name": st.get("name"),
                     "address": st.get("address") or ""}))
    verbs.follow(client, {"from": "now"}, text, mark=mark)




# -- connect / address ---------------------------------------------------------------

@command("connect", short_help="Connect to a peer by address or name")
def connect(
    target: str = typer.Argument(
        ..., metavar="ADDRESS_OR_PEER",
        help="an address (tc..., tcp:HOST:PORT, unix:/path, ws://..., wss://..., awp:...),"
             " an invite (awpinv:...)"
             " or a known peer"),
    timeout: str = typer.Option(
        "1m", "--timeout", metavar="DURATION",
        help="give up after this long (a peer that accepts but never answers our hello is"
             " given up on after 30s)"),
    ca: str = typer.Option(
        "", "--ca", metavar="FILE",
        help="trust the CA certificates in this PEM file for wss:// from now on (kept in the"
             " home), beside the system's"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Connect to a peer by the address its 'awp up' printed, an invite, or by name.

    An awp:... address names the peer's key and several endpoints: they are
    tried at once, and only the named key is accepted. An invite (awpinv:...,
    from 'awp invite') is redeemed: it proves its secret without sending it,
    and a spent, expired or revoked invite is refused with the reason. The
    daemon keeps the connection and reconnects while there is unfinished
    business. Connecting to a peer that is already connected does nothing.

    \b
    Example:
      awp connect tcp:10.0.0.5:7000
      awp connect wss://box.example.dev/
      awp connect awpinv:eyJrIjoi...
      awp connect worker@sprite
    """
    secs = parse_seconds(timeout, "--timeout")
    body: dict = {"target": target, "timeout": secs}
    if ca:
        body["ca"] = read_ca_file(ca)
    client = daemon(home_of(home), timeout=secs + 15)
    res = client.post("/v1/connect", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    name = res.get("name") or verbs.short(res.get("key", ""))
    if res.get("already"):
        out(f"already connected to {name}")
    else:
        via = f" via {res['via']}" if res.get("via") else ""
        out(f"connected to {name} (ed25519:{verbs.short(res.get('key', ''))}...){via}")
    for addr, why in (res.get("unreached") or {}).items():
        note(f"  not through {addr}: {why}")


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
        raise CliError(f"no address yet ({verbs.no_address_reason(st)})")
    out(addr)


_LISTEN_SOURCES = {
    "--listen": "from --listen, remembered", "AWP_LISTEN": "from AWP_LISTEN, remembered",
    "config.json": "from config.json", "remembered": "remembered from an earlier awp up",
    "default": "the default",
}


# -- status / down -------------------------------------------------------------------

@command("status", short_help="Show identity, addresses, counts and peers (exit 3 if not running)")
def status(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Show this agent's identity, addresses, counts and peers. Never starts the daemon.

    Exits 3 when the daemon is not running.

    \b
    Example:
      awp status
    """
    verbs.status(home=home, as_json=as_json)


@command("down", short_help="Stop the daemon (queued messages stay on disk)")
def down(home: str = home_opt()) -> None:
    """Stop the daemon. Queued messages stay on disk and go out after the next start.

    Workers of this home (awp work) do not start it again: they stop their
    commands at once and exit with status 3; the items they held go back
    to their queues when the leases end. Any other awp command, or awp up,
    starts the daemon again.

    \b
    Example:
      awp down
    """
    from ..base.home import mark_down

    h = home_of(home)
    mark_down(h)  # before the stop: a worker that loses its daemon must find it
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
    verbs.peers(home=home, as_json=as_json)


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
    out(f"{res.get('alias')} now names {who.get('name')} (ed25519:{verbs.short(res.get('key', ''))}...)")


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
    name = who.get("name") or verbs.short(res.get("key", ""))
    if res.get("said_bye", res.get("connected")):  # "connected": a daemon before said_bye
        out(f"said bye to {name}")
    else:
        out(f"{name} parked (not connected)")
