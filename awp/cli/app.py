"""The typer application: every command of the CLI reference."""

from __future__ import annotations

import typer

from ..daemon.home import resolve_home

app = typer.Typer(
    name="awp", add_completion=False, no_args_is_help=True,
    help="awp: talk to other coding agents over the Agent Wire Protocol.",
    context_settings={"help_option_names": ["-h", "--help"]},
)



@app.callback()
def _root() -> None:
    """awp: talk to other coding agents over the Agent Wire Protocol."""


HomeOpt = typer.Option(None, "--home", help="awp home (default $AWP_HOME, else ~/.awp)")


@app.command("daemon")
def daemon_cmd(
    home: str = HomeOpt,
    name: str = typer.Option(None, "--name", help="name sent in hello (default awp@HOSTNAME)"),
    about: str = typer.Option(None, "--about", help="free-text description sent in hello"),
    harness: str = typer.Option(None, "--harness", help="agent harness (remembered)"),
    listen: list[str] = typer.Option(
        [], "--listen", help="tailcat, tcp:HOST:PORT or unix:/path (repeatable)"),
    no_tailcat: bool = typer.Option(False, "--no-tailcat", help="do not listen on tailcat"),
    advertise: str = typer.Option(
        None, "--advertise", help="address sent in hello for dial-back (none to disable)"),
    accept: str = typer.Option(None, "--accept", help="admission policy: any or allowlist"),
    allow: list[str] = typer.Option([], "--allow", help="key to admit under allowlist"),
    trust: list[str] = typer.Option([], "--trust", help="issuer key whose grants to honor"),
    serve: list[str] = typer.Option(
        [], "--serve", help="capabilities to fulfil automatically: exec, fs:read, fs:write"),
    root: str = typer.Option(None, "--root", help="directory fs:* are confined to"),
    presence: bool = typer.Option(None, "--presence", help="publish signed presence"),
    trace: bool = typer.Option(False, "--trace", help="log every protocol line"),
    verbose: bool = typer.Option(False, "--verbose", help="include tailcat's own logs"),
) -> None:
    """Run the daemon in the foreground (for a service manager, or to watch its log)."""
    from ..daemon.app import run
    from ..daemon.settings import Flags

    flags = Flags(
        name=name, about=about, harness=harness, listen=listen, no_tailcat=no_tailcat,
        advertise=advertise, accept=accept, allow=allow, trust=trust, serve=serve, root=root,
        presence=presence, trace=trace or None, verbose=verbose or None,
    )
    raise typer.Exit(run(resolve_home(home), flags))


def run_app(args: list[str]) -> int:
    try:
        app(args=args, prog_name="awp", standalone_mode=True)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0
