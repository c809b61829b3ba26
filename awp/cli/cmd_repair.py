"""``awp repair``: check the store, and move a damaged one aside keeping what reads.

The daemon refuses to start on a damaged store (see :mod:`awp.store.check`)
and names this command; it never moves files by itself, because starting
over on an empty store would lose the messages silently.
"""

from __future__ import annotations

import os

import typer

from .common import CliError, command, home_of, home_opt, out


@command("repair", short_help="Check the store; move a damaged one aside, keeping what reads")
def repair(
    home: str = home_opt(),
    check_only: bool = typer.Option(False, "--check", help="only check (exit 1 if damaged)"),
) -> None:
    """Check awp.db and its write-ahead log; if damaged, move them aside and rebuild.

    The damaged files are renamed to awp.db.damaged-<time> (with -wal and
    -shm) and kept; every row that can still be read goes into a new awp.db.
    The daemon must be stopped (it refuses to start on a damaged store anyway).

    \b
    Example:
      awp repair --check
      awp repair
    """
    from ..daemon.home import HomeError, HomeLock
    from ..store import check, salvage
    from ..store.db import StoreError

    h = home_of(home)
    db = os.path.join(h, "awp.db")
    if not os.path.exists(db):
        raise CliError(f"no store in {h}")
    lock = HomeLock(h)
    try:
        lock.acquire()
    except HomeError as e:
        raise CliError(f"{e}: stop it first (awp down)") from None
    try:
        try:
            check.verify(db)
        except check.StoreDamaged as e:
            damage = str(e)
        except StoreError as e:
            raise CliError(str(e)) from None
        else:
            out("awp.db is sound (quick_check ok, write-ahead log intact): nothing to do")
            return
        if check_only:
            raise CliError(damage)
        out(f"damaged: {damage}")
        result = salvage.repair(db)
    finally:
        lock.release()
    for path in result.moved:
        out(f"kept aside: {path}")
    total = sum(result.kept.values())
    per = ", ".join(f"{t} {n}" for t, n in result.kept.items() if n)
    out(f"new awp.db: {total} rows kept ({per or 'none'})")
    for table, n in result.unreadable.items():
        out(f"  {table}: {n} unreadable stretch{'es' if n != 1 else ''} skipped")
    if "*" in result.lost_tables:
        out("  nothing could be read from the damaged file")
    elif result.lost_tables:
        out(f"  unreadable: {', '.join(result.lost_tables)}")
    if result.wal is not None and result.wal.damaged:
        out(f"  the write-ahead log held {result.wal.lost_commits} committed transaction(s)"
            " after its damaged frame: they are in the kept -wal file, not in the new store")
    if result.wal is not None and result.wal.cut >= 0:
        out(f"  the write-ahead log was cut short inside frame {result.wal.cut + 1}: what was"
            " committed before the cut is kept; what came after it is gone")
    out("start the daemon again with awp up")
