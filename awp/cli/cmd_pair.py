"""Live byte streams with a peer: ``pair``."""

from __future__ import annotations

import sys

import typer

from .common import CliError, CliExit, command, daemon, home_of, home_opt, note


@command("pair", short_help="Stream bytes live to and from a peer's command")
def pair_cmd(
    words: list[str] = typer.Argument(None, metavar="[PEER] [-- CMD...]",
                                      help="the peer to pair with (not with --accept), then"
                                           " the command to wire to the stream"),
    thread: str = typer.Option(None, "-t", "--thread", metavar="T",
                               help="the thread that records the stream (default: a new one)"),
    accept: bool = typer.Option(False, "--accept", help="wait for a peer's pair request"),
    from_: str = typer.Option(None, "--from", metavar="PEER",
                              help="with --accept: only this peer's requests"),
    keep: bool = typer.Option(False, "--keep",
                              help="with --accept: one CMD per incoming stream, until"
                                   " interrupted"),
    home: str = home_opt(),
) -> None:
    """Stream bytes live between a command here and one at a peer.

    The daemons open a side connection for the stream; CMD's stdout goes to
    the peer and the peer's bytes come to CMD's stdin.  Without CMD this
    command's own stdin and stdout are the stream.  CMD's stdout closing
    half-closes the stream (the peer's command sees its stdin end); the
    stream is over when both sides closed or either command exited.  The exit
    status is CMD's; a stream refused, unreachable or broken exits non-zero.

    The peer takes the stream with awp pair --accept.  Without a waiting
    acceptor a request is refused, unless the peer granted you the pair
    capability (awp grant YOU pair): then it is held for limits.pair_wait
    and its agent is told.  Every stream is recorded in its thread.

    \b
    Examples:
      awp pair --accept --from alice -- cat
      awp pair bob -- ./build-log-tail
      echo hi | awp pair bob
      awp pair bob --thread thr_ABCD1234 -- python3 repl.py
      awp pair --accept --keep -- sh -c 'wc -c'
    """
    words = list(words or [])
    if accept:
        if thread:
            raise CliError("--thread is for the side that asks, not --accept", 2)
        cmd = words
    else:
        if from_ or keep:
            raise CliError("--from and --keep go with --accept", 2)
        if not words:
            raise CliError("name a peer to pair with (or --accept)", 2)
        cmd = words[1:]
    client = daemon(home_of(home))
    if not accept:
        raise CliExit(_session(client, "/v1/pair", {"peer": words[0], "th": thread or ""}, cmd))
    body = {"from": from_ or ""}
    if not keep:
        raise CliExit(_session(client, "/v1/pair/accept", body, cmd))
    if not cmd:
        raise CliError("--keep needs a CMD to run for each stream", 2)
    import threading

    from ..localapi.client import LocalClient

    try:
        while True:
            sock, headers, rest = _open(client, "/v1/pair/accept", body)
            own = LocalClient(client.sock_path, 30)  # a client is not shared between threads
            threading.Thread(target=_run, args=(own, sock, headers, rest, cmd),
                             daemon=True).start()
    except KeyboardInterrupt:
        raise CliExit(130) from None


def _open(client, path: str, body: dict):
    from . import pair_relay

    try:
        return pair_relay.upgrade(client.sock_path, path, body)
    except pair_relay.UpgradeRefused as e:
        raise CliError(e.message) from None


def _session(client, path: str, body: dict, cmd: list[str]) -> int:
    try:
        sock, headers, rest = _open(client, path, body)
    except KeyboardInterrupt:
        return 130
    return _run(client, sock, headers, rest, cmd)


def _run(client, sock, headers: dict, rest: bytes, cmd: list[str]) -> int:
    from . import pair_relay

    peer = headers.get("awp-pair-peer", "")[:18]
    if cmd:
        note(f"pair stream {headers.get('awp-pair-id', '')} with {peer}: running {cmd[0]}")
        try:
            rc = pair_relay.run_command(sock, rest, cmd)
        except OSError as e:
            sock.close()
            raise CliError(f"cannot run {cmd[0]}: {e.strerror or e}") from None
    else:
        rc = pair_relay.run_stdio(sock, rest)
    session = headers.get("awp-pair-session", "")
    try:
        res = client.get(f"/v1/pair/{session}", wait=10)
    except Exception:  # the daemon went away: nothing more to say than the stream ended
        res = {}
    err = res.get("error") if isinstance(res, dict) else ""
    if err:
        print(f"awp pair: {err}", file=sys.stderr)
        return rc or 1
    return rc
