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
from ..store import check, salvage
from ..store.db import StoreError


class RepairError(Exception):
    """Repair cannot run (no store, the daemon holds the home, an unreadable file)."""


@dataclass
class Outcome:
    """What repair found: ``damage`` is ``None`` for a sound store; ``salvage``
    is set once a damaged store was moved aside and rebuilt."""

    damage: str | None = None
    salvage: salvage.Salvage | None = None


def repair_home(home: str, *, check_only: bool = False) -> Outcome:
    """Check ``home``'s store; unless ``check_only``, rebuild a damaged one."""
    db = os.path.join(home, "awp.db")
    if not os.path.exists(db):
        raise RepairError(f"no store in {home}")
    lock = HomeLock(home)
    try:
        lock.acquire()
    except HomeError as e:
        raise RepairError(f"{e}: stop it first (awp down)") from None
    try:
        try:
            check.verify(db)
        except check.StoreDamaged as e:
            damage = str(e)
        except StoreError as e:
            raise RepairError(str(e)) from None
        else:
            return Outcome()
        if check_only:
            return Outcome(damage)
        return Outcome(damage, salvage.repair(db))
    finally:
        lock.release()
