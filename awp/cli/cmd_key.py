"""Our key and the peers' keys: ``awp key rotate``, ``awp key show``, ``awp verify``."""

from __future__ import annotations

import time

import typer

from ..localapi.daemonctl import client_if_running
from ..wire.keys import short_key
from ..wire.timefmt import format_ts
from .common import (
    CliError,
    app,
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

key_app = typer.Typer(
    name="key",
    no_args_is_help=True,
    rich_markup_mode=None,
    help="This home's key: show it, or rotate to the next one.",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
app.add_typer(key_app, name="key", short_help="Show or rotate this home's key")

RESTART_WAIT_S = 30.0  # how long `awp key rotate` waits for the daemon under its new key


@command("show", on=key_app, label="key show")
def key_show(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Show this home's key, the keys it rotated from, and which peers still wait
    for the newest rotation record.

    \b
    Example:
      awp key show
    """
    res = daemon(home_of(home)).get("/v1/key")
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"key {res['key']}")
    for old in reversed(res.get("former_keys") or []):
        out(f"  rotated from {old}")
    if res.get("seq"):
        owed = res.get("owed_to") or []
        out(f"rotation {res['seq']}: " + (f"{len(owed)} peers have not taken it yet"
                                          if owed else "every known peer has taken it"))
    out(f"next key committed: {res.get('next', '')}")
    plan = res.get("schedule") or {}
    if plan.get("every"):
        out(f"rotating unattended every {plan['every']:g}s; next at {format_ts(int(plan['due']))}")


@command("rotate", on=key_app, label="key rotate")
def key_rotate(
    every: str = typer.Option(None, "--every", metavar="DURATION",
                              help="rotate unattended this often (e.g. 30d; 0 or off: stop)"),
    home: str = home_opt(), as_json: bool = json_opt(),
) -> None:
    """Move this home to a new key, keeping every peer, thread and grant.

    The new key is the one the last rotation (or, before any, the first
    handshake) committed to; a fresh next key is committed now. Both keys
    sign a rotation record, which every known peer is given as it connects,
    offline ones included; they keep you as the same peer. The daemon
    restarts in place under the new key. The old key's secret is not kept.

    With --every, nothing rotates now: the running daemon rotates by itself
    each time that long has passed since the last rotation (kept across
    restarts, so service units keep working).

    \b
    Examples:
      awp key rotate
      awp key rotate --every 30d
    """
    h = home_of(home)
    if every is not None:
        secs = 0.0 if every.strip().lower() in ("0", "off", "never") else parse_seconds(
            every, "--every")
        plan = daemon(h).post("/v1/key/rotate", {"every": secs})
        assert isinstance(plan, dict)
        if as_json:
            out_json(plan)
        elif plan.get("every"):
            out(f"rotating every {every.strip()}; next at {format_ts(int(plan['due']))}")
        else:
            out("unattended rotation is off")
        return
    res = daemon(h).post("/v1/key/rotate", {})
    assert isinstance(res, dict)
    deadline = time.monotonic() + RESTART_WAIT_S
    while True:  # the daemon restarts in its own process: wait for it under the new key
        client = client_if_running(h, 5.0)
        status = client.get("/v1/status") if client is not None else None
        if isinstance(status, dict) and status.get("key") == res["new"]:
            break
        if time.monotonic() > deadline:
            raise CliError(f"rotated to {res['new']}, but the daemon did not come back under it"
                           f" within {RESTART_WAIT_S:.0f}s: see daemon.log")
        time.sleep(0.05)
    if as_json:
        out_json(res)
        return
    out(f"rotated {res['old']} -> {res['new']} (record {res['seq']})")
    note(f"the record goes to {res['peers']} known peers as each connects")


@command("verify", short_help="Show a peer's safety number; --mark once you compared it")
def verify_cmd(
    peer: str = typer.Argument(..., metavar="PEER", help="the peer: name, alias, key prefix or key"),
    mark: bool = typer.Option(False, "--mark", help="record that you compared the number"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Show the safety number of you and a peer: the same on both sides.

    Compare it with the peer's user over a channel you trust (a call, in
    person); the short form is its first four groups. Once they match, run
    it again with --mark: awp peers then shows the peer as verified, and
    warns loudly if its key seems to change other than by a valid rotation.

    \b
    Examples:
      awp verify builder
      awp verify builder --mark
    """
    res = daemon(home_of(home)).post("/v1/verify", {"peer": peer, "mark": mark})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"safety number with {res['name'] or short_key(res['key'])} ({res['key']}):")
    number = res["safety"].split()
    out("  " + " ".join(number[:6]))
    out("  " + " ".join(number[6:]))
    out(f"short form: {res['short']}")
    if res.get("marked"):
        out("marked as verified")
    elif res.get("verified"):
        if res.get("verified_key_current"):
            out("verified earlier")
        else:
            out(f"verified earlier as {res['verified']} (the peer has rotated since)")


@command("link", on=key_app, label="key link")
def key_link(
    keys: list[str] = typer.Argument(None, metavar="[KEY]...",
                                     help="keys to link with this home's key (you start)"),
    statement: str = typer.Option(None, "--statement", metavar="JSON|-",
                                  help="a statement another key started: co-sign and keep it"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Link this home's key with other keys of yours: peers show them as one identity.

    Every key signs the statement. Start it here with the other keys, carry
    the printed line to each of their homes, and run awp key link
    --statement LINE there; the last signature makes it whole, and from then
    on every one of those daemons shows it to peers in its handshake.

    \b
    Examples:
      awp key link ed25519:Kay64UG8yv...            # prints a line to carry
      awp key link --statement '{"keys":...}'       # on the other key's home
      awp key link --statement - < line.json
    """
    import json
    import sys

    if bool(keys) == bool(statement):
        raise CliError("give the keys to link, or --statement (not both)")
    body: dict
    if statement:
        text = sys.stdin.read() if statement == "-" else statement
        try:
            st = json.loads(text)
        except ValueError as e:
            raise CliError(f"--statement is not JSON: {e}") from None
        body = {"statement": st}
    else:
        body = {"with": keys}
    res = daemon(home_of(home)).post("/v1/key/link", body)
    if as_json:
        out_json(res)
        return
    line = json.dumps(res["statement"], separators=(",", ":"), sort_keys=True)
    if res["missing"]:
        out(line)
        note("still to sign it: " + ", ".join(res["missing"])
             + " (run awp key link --statement LINE in each of their homes)")
    else:
        note("linked: " + ", ".join(res["statement"]["keys"]) + "; peers will see one identity")
        out(line)
