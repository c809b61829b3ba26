"""``awp daemon``'s body, without typer: the daemon runs for days, idle most of it.

The typer command (``app.py``) and the fast path (:mod:`awp.cli.fastpath`)
both call :func:`daemon`, so a daemon started the usual way (``awp daemon
...`` with the options ``clitable`` knows) never imports typer, click or
the CLI's other commands: about 3 MB of resident memory it would hold for
its whole life, which issue 21's idle figure counts.
"""

from __future__ import annotations

import os

from .base import home_of


def daemon(home: str | None, name: str | None, about: str | None, harness: str | None,
           listen: list[str], no_tailcat: bool, advertise: str | None, accept: str | None,
           allow: list[str], trust: list[str], serve: list[str], root: str | None,
           presence: bool | None, share_with: str | None, trace: bool, verbose: bool,
           start_dir: str | None) -> None:
    """Run the daemon in the foreground; exits with its status.

    By ``SystemExit``, which passes the fast path's handlers: the daemon ends
    the ordinary way (its threads joined, its files closed), not with the
    ``os._exit`` a fast-path command ends with (:func:`awp.cli.entry.program`).
    """
    from ..daemon.app import run
    from ..daemon.settings import Flags, Harnesses
    from ..harness.identity import HARNESSES, detect, normalize

    shares = None
    if share_with is not None:
        shares = [x.strip() for x in share_with.split(",") if x.strip()]
    flags = Flags(
        name=name, about=about, harness=harness, listen=listen, no_tailcat=no_tailcat,
        advertise=advertise, accept=accept, allow=allow, trust=trust, serve=serve, root=root,
        presence=presence, share_with=shares, trace=trace or None, verbose=verbose or None,
        start_dir=start_dir,
        harnesses=Harnesses(HARNESSES, normalize, detect(dict(os.environ))),
    )
    raise SystemExit(run(home_of(home), flags))
