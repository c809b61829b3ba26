"""``awp service install|uninstall|status``: run the daemon as a systemd user unit."""

from __future__ import annotations

import typer

from .common import CliError, command, home_of, home_opt, json_opt, out, out_json


@command("service", short_help="Install, remove or inspect the systemd user service")
def service_cmd(
    action: str = typer.Argument(..., help="install, uninstall or status"),
    home: str = home_opt(),
    no_start: bool = typer.Option(False, "--no-start", help="install: enable but do not start"),
    work: str = typer.Option(None, "--work", metavar='"TOPIC [OPTIONS] -- COMMAND"',
                             help="install/uninstall a unit running awp work with these"
                                  " arguments (beside the daemon's unit)"),
    as_json: bool = json_opt(),
) -> None:
    """Run the daemon for this home as a systemd user service (Type=notify).

    install writes ~/.config/systemd/user/awp.service (awp-<hash>.service for
    other homes), reloads systemd, then enables and starts it. uninstall stops,
    disables and removes it; status shows what systemd says.

    \b
    Examples:
      awp service install
      awp service status --json
      awp --home ~/.awp-b service uninstall
      awp service install --work "alice/jobs --concurrency 4 -- ./run-job.sh"
    """
    from ..daemon import service

    h = home_of(home)
    if work is not None:
        from ..daemon import work_service

        try:
            words = work_service.parse_work(work)
        except ValueError as e:
            raise CliError(str(e), 2) from None
        if action == "install":
            res = work_service.install_worker(h, words, start=not no_start)
        elif action == "uninstall":
            res = work_service.uninstall_worker(h, words)
        else:
            raise CliError("--work goes with install or uninstall", 2)
    elif action == "install":
        res = service.install(h, service.awp_command(), start=not no_start)
    elif action == "uninstall":
        res = service.uninstall(h)
    elif action == "status":
        res = service.status(h, awp_argv=service.awp_command())
    else:
        raise CliError("action must be install, uninstall or status", 2)
    # install with nothing enabled (no user systemd, or it refused) did not do the job
    failed = action == "install" and not res.get("enabled")
    if as_json:
        out_json(res)
        if failed:
            raise typer.Exit(1)
        return
    out(f"unit     {res['unit']}")
    out(f"file     {res['unit_path']}")
    if action == "status":
        out(f"installed {'yes' if res.get('installed') else 'no'}; "
            f"active {res.get('active') or 'unknown'}; enabled {res.get('enabled') or 'unknown'}")
    for cmd in res.get("commands_run", []):
        out("ran      " + " ".join(cmd))
    for w in res.get("warnings", []):
        out("warning  " + w)
    for n in res.get("notes", []):
        out("note     " + n)
    if failed:
        raise CliError(f"the unit file is written ({res['unit_path']}) but systemd did not"
                       " enable it; the warnings above say how to finish once it can")
