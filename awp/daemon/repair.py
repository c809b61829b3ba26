"""``awp repair`` as the daemon's own offline step: lock the home, check, salvage.

The command runs while the daemon is stopped (a damaged store keeps it from
starting), so it cannot go through the local API; it goes through here, the
daemon's side, so the CLI never reaches into the store itself.  The CLI only
renders what this returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..base.home import HomeError, HomeLock
from ..node import intake
from ..store import check, salvage
from ..store.db import StoreError, open_store

intake_lines = intake.describe  # the lost lines, one per line, for the CLI


class RepairError(Exception):
    """Repair cannot run (no store, the daemon holds the home, an unreadable file)."""


@dataclass
class Outcome:
    """What repair found: ``damage`` is ``None`` for a sound store; ``salvage``
    is set once a damaged store was moved aside and rebuilt."""

    damage: str | None = None
    salvage: salvage.Salvage | None = None
    journal: intake.JournalRepair | None = None  # the intake journal had lost acked lines


def repair_home(home: str, *, check_only: bool = False) -> Outcome:
    """Check ``home``'s store; unless ``check_only``, rebuild a damaged one."""
    db = os.path.join(home, "awp.db")
    if not os.path.exists(db) and not salvage.interrupted(db):
        raise RepairError(f"no store in {home}")
    lock = HomeLock(home)
    try:
        lock.acquire()
    except HomeError as e:
        raise RepairError(f"{e}: stop it first (awp down)") from None
    try:
        stopped = salvage.interrupted(db)
        if stopped:  # a killed repair: finish it before anything else
            found = Outcome(check.interrupted_message(db, stopped, home))
            if not check_only:
                found.salvage = _salvage(db)
            return found
        try:
            check.verify(db, everything=True)
        except check.StoreDamaged as e:
            damage: str | None = str(e)
        except StoreError as e:
            raise RepairError(str(e)) from None
        else:
            damage = None
        try:
            intake.check(home)
        except StoreError as e:
            lost: str | None = str(e)
        else:
            lost = None
        if check_only or (damage is None and lost is None):
            return Outcome(damage or lost)
        found = Outcome(damage or lost, _salvage(db) if damage else None)
        if lost:
            found.journal = _repair_journal(home, db)
        return found
    finally:
        lock.release()


def _salvage(db: str) -> salvage.Salvage:
    try:
        return salvage.repair(db)
    except (OSError, StoreError) as e:
        raise RepairError(f"repair stopped: {e}; run it again once that is fixed") from None


def _repair_journal(home: str, db: str) -> intake.JournalRepair | None:
    """Store what the journal still holds into the (sound or rebuilt) store."""
    try:
        conn = open_store(db)
    except StoreError as e:
        raise RepairError(f"cannot open the store to keep the journal's lines: {e}") from None
    try:
        return intake.repair(home, conn)
    except OSError as e:
        raise RepairError(f"cannot repair the intake journal: {e}") from None
    finally:
        conn.close()
