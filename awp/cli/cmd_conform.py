"""awp conform: check any AWP peer against the protocol's conformance scenarios."""

from __future__ import annotations

import typer

from ..base.durations import parse_duration
from .common import CliError, command, home_opt, out


@command("conform", short_help="Check an AWP peer against the conformance scenarios")
def conform(
    address: str = typer.Argument(None, metavar="ADDRESS",
                                  help="the peer to dial: tcp:HOST:PORT, unix:/path or a"
                                       " ws:// or wss:// URL"),
    listen: str = typer.Option(None, "--listen", metavar="ADDRESS",
                               help="listen here (tcp:HOST:PORT, port 0 allowed, or unix:/path)"
                                    " and let the peer dial in"),
    run: str = typer.Option(None, "--run", metavar="CMD",
                            help="with --listen: command that makes the peer dial {addr}"),
    scenario: list[str] = typer.Option([], "--scenario", metavar="NAME",
                                       help="run only this scenario (repeatable)"),
    timeout: str = typer.Option("15s", "--timeout", metavar="DURATION",
                                help="deadline of each scenario"),
    board_topic: str = typer.Option(
        None, "--board-topic", metavar="TOPIC",
        help="ed25519:<owner key>/<name>: a topic the peer holds and lets anyone read, for"
             " board-sync and board-relay (board-relay posts to it, then deletes the post,"
             " when it is open to post)"),
    owner_run: str = typer.Option(
        None, "--owner-run", metavar="CMD",
        help="a command that makes the peer subscribe to {topic}, a fresh topic the runner"
             " owns, for the board-owner-* scenarios (the runner plays a dishonest owner)"),
    ca: str = typer.Option(None, "--ca", metavar="FILE",
                           help="PEM certificates to trust for a wss:// peer, beside the"
                                " system store"),
    list_only: bool = typer.Option(False, "--list", help="list the scenarios and exit"),
    trace: bool = typer.Option(False, "--trace", help="print every line in and out on stderr"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    home: str = home_opt(),
) -> None:
    """Run the conformance scenarios against an AWP peer and report each one.

    Connect mode dials ADDRESS once per scenario. Listen mode (--listen with
    --run) listens, runs the command with {addr} replaced by the listening
    address, and runs on the one connection the peer dials the scenarios that
    can share it; the others are reported as skipped. A ws:// or wss://
    URL is dialed over the WebSocket binding: every scenario runs over it,
    and the binding's own (ws-*) run too, skipped for other targets. The runner has a fresh
    key of its own every run; --home is accepted and unused (no daemon is
    needed). Peers that list cap board also get the board's scenarios;
    board-sync and board-relay need --board-topic; board-owner-* need
    --owner-run (connect mode). Exit status: 0 when nothing
    failed, 1 when a scenario failed, 2 on usage errors.

    \b
    Examples:
      awp conform tcp:127.0.0.1:7000
      awp conform unix:/tmp/peer.sock --scenario handshake --scenario bye
      awp conform ws://127.0.0.1:8080/
      awp conform wss://box.example/awp --ca private-ca.pem
      awp conform --listen tcp:127.0.0.1:0 --run "awp connect {addr}"
      awp conform tcp:127.0.0.1:7000 --board-topic ed25519:Fcy_...DE4/ops
      awp conform tcp:127.0.0.1:7000 --owner-run "awp subscribe {topic} --once --timeout 1s"
    """
    from ..conform.runner import run_connect, run_listen, select_scenarios
    from ..conform.scenarios import SCENARIOS
    from ..wire.address import AddressError, parse_address, parse_listen

    if list_only:
        width = max(len(s.name) for s in SCENARIOS)
        for s in SCENARIOS:
            own = "  [own connection]" if s.own_connection else ""
            out(f"{s.name.ljust(width)}  {s.summary}{own}")
        return
    try:
        chosen = select_scenarios(scenario)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    try:
        secs = parse_duration(timeout)
    except ValueError as e:
        raise CliError(f"--timeout: {e}", 2) from None
    if secs <= 0:
        raise CliError("--timeout must be more than 0", 2)
    topic = ""
    if board_topic is not None:
        from ..wire.board import BoardError, parse_topic

        try:
            parse_topic(board_topic)
        except BoardError as e:
            raise CliError(f"--board-topic: {e} (the runner has no daemon to resolve"
                           " aliases: give the full topic, as `awp topics --json` shows it)",
                           2) from None
        topic = board_topic

    if listen is not None:
        if owner_run is not None:
            raise CliError("--owner-run goes with an ADDRESS to dial (the owner scenarios need"
                           " a second party)", 2)
        if ca is not None:
            raise CliError("--ca goes with a wss:// ADDRESS to dial", 2)
        if address:
            raise CliError("give either an ADDRESS to dial or --listen, not both", 2)
        if not run:
            raise CliError("--listen needs --run \"CMD {addr}\" to make the peer dial in", 2)
        try:
            la = parse_listen(listen)
        except AddressError as e:
            raise CliError(f"--listen: {e}", 2) from None
        if la.kind not in ("tcp", "unix"):
            raise CliError("--listen takes tcp:HOST:PORT or unix:/path", 2)
        if "{addr}" not in run:
            raise CliError("--run must contain {addr}, where the listening address goes", 2)
        try:
            report = run_listen(listen, run, chosen, timeout=secs, trace=trace,
                                board_topic=topic)
        except OSError as e:
            raise CliError(f"cannot listen on {listen}: {e.strerror or e}") from None
    else:
        if run:
            raise CliError("--run goes with --listen", 2)
        if not address:
            raise CliError("give the ADDRESS of the peer to check, or --listen with --run", 2)
        try:
            a = parse_address(address)
        except AddressError as e:
            raise CliError(str(e), 2) from None
        if a.kind not in ("tcp", "unix", "ws"):
            raise CliError("awp conform dials tcp:HOST:PORT, unix:/path, ws:// and wss://"
                           " addresses (for a tailcat peer, use --listen and tailcat on its"
                           " side)", 2)
        ca_file = _check_ca(ca) if ca is not None else ""
        if owner_run is not None and "{topic}" not in owner_run:
            raise CliError("--owner-run must contain {topic}, where our topic goes", 2)
        report = run_connect(address, chosen, timeout=secs, trace=trace, board_topic=topic,
                             ca_file=ca_file, owner_run=owner_run or "")

    out(report.json_text() if as_json else report.text())
    raise typer.Exit(report.exit_code)


def _check_ca(path: str) -> str:
    """``path`` when it holds certificates TLS can load; a usage error otherwise."""
    import ssl

    try:
        ssl.create_default_context().load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise CliError(f"--ca {path}: no PEM certificate TLS can load ({e})", 2) from None
    return path
