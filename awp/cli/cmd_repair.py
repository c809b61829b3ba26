"""``awp repair``: check the store, and move a damaged one aside keeping what reads.

The daemon refuses to start on a damaged store (see :mod:`awp.store.check`)
and names this command; it never moves files by itself, because starting
over on an empty store would lose the messages silently.
"""

from __future__ import annotations

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
    Safe to interrupt: until a repair has finished the daemon will not start,
    and running awp repair again finishes it.

    \b
    Example:
      awp repair --check
      awp repair
    """
    from ..daemon.repair import RepairError, intake_lines, repair_home

    h = home_of(home)
    try:
        found = repair_home(h, check_only=check_only)
    except RepairError as e:
        raise CliError(str(e)) from None
    if found.damage is None:
        out("awp.db is sound (integrity_check ok, every index matches its table, every row"
            " reads, write-ahead log intact):"
            " nothing to do")
        return
    if found.salvage is None and found.journal is None:
        raise CliError(found.damage)  # --check, or nothing repair can do
    out(f"damaged: {found.damage}")
    if found.journal is not None:
        j = found.journal
        out(f"intake.journal: {j.read} line(s) read, {j.stored} stored; kept aside: {j.kept}")
        for line in intake_lines(j.lost):
            out(f"  acked line lost: {line}")
    result = found.salvage
    if result is None:
        out("start the daemon again with awp up")
        return
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
    if result.wal is not None and result.wal.lost_commits:
        out(f"  the write-ahead log held {result.wal.lost_commits} committed transaction(s)"
            " after its damaged frame: they are in the kept -wal file, not in the new store")
    if result.wal is not None and result.wal.cut >= 0:
        out(f"  the write-ahead log was cut short inside frame {result.wal.cut + 1}: what was"
            " committed before the cut is kept; what came after it is gone")
    out("start the daemon again with awp up")
