"""``awp web``: serve the dashboard for this host's daemon."""

from __future__ import annotations

import sys

import typer

from ..localapi.daemonctl import client_if_running
from .common import CliError, command, home_of, home_opt

WARNING = ("awp web: warning: listening on {host}, not a loopback address. The token is the"
           " only login, and it travels in plain HTTP: anyone who can read your traffic can"
           " take it and see your agents and your conversations. Put a TLS reverse proxy in"
           " front of it.")


@command("web", short_help="Serve the web dashboard (reads the daemon, never starts one)")
def web_cmd(
    listen: str = typer.Option("127.0.0.1:7788", "--listen", metavar="HOST:PORT",
                               help="address to serve on"),
    allow_host: list[str] = typer.Option(
        [], "--allow-host", metavar="NAME",
        help="also accept requests for this host name, behind a proxy (repeatable)"),
    home: str = home_opt(),
) -> None:
    """Serve the web dashboard: every agent, link, thread and state, live.

    It reads this host's daemon through the local API and does not start one:
    run awp up first, or the page waits until the daemon is running. Open the
    URL it prints: it carries the home's token (kept in <home>/web.token),
    which the page trades for a cookie; requests without it are refused. On a
    loopback address only requests for localhost or a loopback IP (or an
    --allow-host name) are answered; on any other address every host name is,
    and a warning is printed.

    \b
    Examples:
      awp web
      awp web --listen 127.0.0.1:8080
      awp web --allow-host awp.example.internal
    """
    import logging

    import trio

    from ..base.home import ensure_home
    from ..web.daemon import DaemonLink
    from ..web.hub import Hub
    from ..web.server import is_loopback_host, parse_listen, serve
    from ..web.token import load_or_create

    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise CliError(f"--listen: {e}", 2) from None
    h = home_of(home)
    # Another user's daemon is not ours to show: say so now (DaemonForbidden)
    # rather than wait for it forever. One that is simply not running yet is waited for.
    running = client_if_running(h, 5.0)
    if running is not None:
        running.close()
    ensure_home(h)
    token = load_or_create(h)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not is_loopback_host(host):
        print(WARNING.format(host=host), file=sys.stderr, flush=True)

    async def main() -> None:
        hub = Hub(DaemonLink(h))
        async with trio.open_nursery() as nursery:
            bound_host, bound_port, _loop = await nursery.start(
                lambda task_status=trio.TASK_STATUS_IGNORED: serve(
                    hub, host, port, allow_hosts=allow_host, token=token,
                    task_status=task_status))
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            if shown in ("0.0.0.0", "[::]"):
                shown = "127.0.0.1"
            print(f"awp web: serving http://{shown}:{bound_port}/?token={token} for {h}",
                  flush=True)
            with trio.move_on_after(3):
                await hub.ready.wait()
            if hub.state is None:
                print(f"awp web: waiting for the daemon ({hub.error}); start it with awp up",
                      file=sys.stderr, flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return
    except Exception as e:
        err = _os_error(e)
        if err is None:
            raise
        raise CliError(f"cannot listen on {listen}: {err.strerror or err}") from None


def _os_error(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None
