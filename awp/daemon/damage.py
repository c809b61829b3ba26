"""A store found damaged while the daemon runs: a clear answer, not a 500.

The start checks (:mod:`awp.store.check`) catch damage that is there when
the daemon starts.  A page can still go bad later (a disk error, another
program writing the file); SQLite then fails the read that meets it with
``SQLITE_CORRUPT``.  Every local API handler is wrapped so that such a
failure reaches the caller as a 500 with code ``store_damaged`` and a
message saying what to do, and the daemon log gets one line, not a
traceback.
"""

from __future__ import annotations

import functools
import logging

from ..localapi.server import ApiError, Handler, Request, Router
from ..store import check

log = logging.getLogger("awp.daemon")


def damaged_error(home: str, e: BaseException) -> ApiError:
    return ApiError(500, f"the store is damaged ({check.describe(e)}); stop the daemon (awp down) and run"
                         f" 'awp repair --home {home}'", "store_damaged")


def guard(router: Router, home: str) -> None:
    """Map store damage raised by any handler of ``router`` to ``store_damaged``."""
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)  # keeps what other wrappers marked on the handler
        async def guarded(req: Request):
            try:
                return await handler(req)
            except Exception as e:
                found = check.damage_in(e)
                if found is None:
                    raise
                log.error("store damaged, %s %s failed: %s", req.method, req.path,
                          check.describe(found))
                raise damaged_error(home, found) from None
        return guarded

    router.wrap(wrap)
