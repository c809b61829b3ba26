"""Keeping one lease held from the claim to the completion, on a thread of its own.

The lease has to stay held not only while the command runs but while its
result is read, posted (a reply over the topic's rate waits for room) and
completed: a lease that ran out in between hands the item to someone else
after a "done" reply.  So one thread renews from the claim until the job
says it is finished, half way through what is left of the lease each time
(the other half is the margin for an owner or a daemon that is
restarting), and says when the lease is lost.
"""

from __future__ import annotations

import threading
import time

from .api import ApiFailure, Daemon, Gone, Stopped

RENEW_RETRY_S = 1.0
OWNER_WAIT_S = 3.0  # how long the daemon waits for the owner's answer to a lease operation


class Renewal:
    def __init__(self, home: str, topic: str, lease: str, until_ms: int) -> None:
        self.home, self.topic, self.lease = home, topic, lease
        self.until_ms = until_ms
        self.lost = threading.Event()
        self.down = threading.Event()  # the user stopped the daemon (awp down)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="awp-work-renew", daemon=True)

    def start(self) -> Renewal:
        self._thread.start()
        return self

    def finish(self) -> None:
        """Stop renewing (the lease was completed, failed or released, or is lost)."""
        self._done.set()

    def _due_in(self) -> float:
        left = max(0.0, self.until_ms / 1000 - time.time())
        return max(0.5, left / 2)

    def _run(self) -> None:
        api = Daemon(self.home)
        try:
            wait = self._due_in()
            while not self._done.wait(wait):
                try:
                    state = self.renew(api)
                except Stopped:
                    self.down.set()
                    return
                if state == "lost":
                    self.lost.set()
                    return
                wait = self._due_in() if state == "renewed" else RENEW_RETRY_S
        finally:
            api.close()

    def renew(self, api: Daemon) -> str:
        """renewed; retry (the owner or our daemon is away for now); lost.  Raises
        :class:`Stopped` when the user stopped the daemon."""
        try:
            res = api.call("POST", "/v1/board/lease",
                           {"topic": self.topic, "lease": self.lease, "op": "renew",
                            "timeout": OWNER_WAIT_S}, wait=OWNER_WAIT_S, within=2.0)
        except Stopped:
            raise
        except Gone:
            return "retry" if time.time() * 1000 < self.until_ms else "lost"
        except ApiFailure as e:
            if e.code == "refused" or time.time() * 1000 >= self.until_ms:
                return "lost"
            return "retry"
        self.until_ms = int(res.get("until") or self.until_ms)
        return "renewed"
