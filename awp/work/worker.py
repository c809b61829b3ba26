"""``awp work``: a loop that claims a queue's items and runs a command on each.

One claimer thread asks the daemon for an item whenever a slot is free
(``--concurrency``), with a long poll: the daemon answers when an item was
handed out or after :data:`LONG_POLL_S`, and asks the owner again only when
the topic may have work (see :mod:`awp.node.claim_wait`), so an idle worker
costs nothing but one waiting request.  Each item runs in a thread of its
own (:mod:`awp.work.job`).

Stopping (SIGTERM, SIGINT): no new claims; running commands get
``--grace`` seconds to finish (their result is then reported as usual),
after which they are stopped and their items released (which costs no
attempt).  A daemon that goes away meanwhile is waited for (and started
again on demand): the worker outlives a daemon restart, and what it could
not report while the owner was away its daemon keeps and sends later.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .api import ApiFailure, Daemon, Gone
from .job import Job, Options, Outcome

LONG_POLL_S = 10.0  # one claim request's wait; also how long a stop may wait for the claimer
NO_OWNER_S = 2.0  # between claims while the queue's owner is not connected


@dataclass
class Settings:
    topic: str
    home: str
    job: Options
    concurrency: int = 1
    max_items: int = 0  # 0: no limit
    once: bool = False  # one item at most, and none means exit 2 at once
    grace: float = 0.0
    offers: tuple[str, ...] = ()
    bid: dict = field(default_factory=dict)  # {"price": int, "ms": int}
    say: Callable[[str], None] = print


class Worker:
    def __init__(self, s: Settings) -> None:
        self.s = s
        self.stop = threading.Event()
        self.grace_until: list[float] = []
        self.slots = threading.Semaphore(max(1, s.concurrency))
        self.lock = threading.Lock()
        self.running: dict[str, threading.Thread] = {}
        self.outcomes: list[Outcome] = []
        self.started = 0
        self.nothing = False  # --once found the queue empty

    # -- signals -----------------------------------------------------------------------

    def request_stop(self, *_a: object) -> None:
        if not self.stop.is_set():
            self.grace_until.append(time.monotonic() + self.s.grace)
            self.stop.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or ``--max-items``/``--once`` are used up); the exit status."""
        claimer = threading.Thread(target=self._claim_loop, name="claimer", daemon=True)
        claimer.start()
        while claimer.is_alive():
            claimer.join(0.2)  # short joins: signal handlers run in this thread
        while True:
            with self.lock:
                threads = list(self.running.values())
            if not threads:
                break
            threads[0].join(0.2)
        if self.s.once and self.nothing:
            return 2
        return 0

    def _limit_reached(self) -> bool:
        limit = 1 if self.s.once else self.s.max_items
        return bool(limit) and self.started >= limit

    def _claim_loop(self) -> None:
        api = Daemon(self.s.home)
        try:
            while not self.stop.is_set() and not self._limit_reached():
                if not self.slots.acquire(timeout=0.5):
                    continue
                try:
                    got = self._claim(api)
                except Exception:
                    self.slots.release()
                    raise
                if got is None:
                    self.slots.release()
                    if self.s.once:
                        self.nothing = True
                        return
                    continue
                if self.stop.is_set():  # asked while stopping: give it straight back
                    Job(got, self.s.job, self.s.home, self.stop)._op(api, "release")
                    self.slots.release()
                    return
                self._start(got)
        finally:
            api.close()

    def _claim(self, api: Daemon) -> dict | None:
        """One long poll for an item; None when nothing came (or the owner is away)."""
        wait = 0.0 if self.s.once else LONG_POLL_S
        body: dict = {"topic": self.s.topic, "wait": wait, "req": uuid.uuid4().hex,
                      "timeout": 10.0}
        if self.s.offers:
            body["offers"] = list(self.s.offers)
        if self.s.bid:
            body["bid"] = self.s.bid
        try:
            res = api.call("POST", "/v1/board/claim", body, wait=wait + 10.0,
                           within=float("inf"))
        except ApiFailure as e:
            if e.code in ("no_owner", "timeout"):
                if not self.s.once:
                    self.stop.wait(NO_OWNER_S)
                return None
            raise
        except Gone:
            return None
        return res if res.get("state") == "claimed" else None

    def _start(self, claim: dict) -> None:
        self.started += 1
        job = Job(claim, self.s.job, self.s.home, self.stop, self.grace_until)
        t = threading.Thread(target=self._work, args=(job,), daemon=True)
        with self.lock:
            self.running[claim["lease"]] = t
        t.start()

    def _work(self, job: Job) -> None:
        try:
            item = job.item
            self.s.say(f"claimed {item.get('hash', '')[:10]} (lease {job.lease})")
            try:
                o = job.run()
            except (ApiFailure, Gone, OSError) as e:
                o = Outcome(item.get("hash", ""), "failed", None, 0.0, str(e))
                print(f"awp work: {e}", file=sys.stderr)
            with self.lock:
                self.outcomes.append(o)
            ended = f"{o.state} {o.item[:10]} in {o.secs:.1f}s"
            if o.exit is not None:
                ended += f" (exit {o.exit})"
            if o.why and o.state != "done":
                ended += f": {o.why}"
            self.s.say(ended)
        finally:
            with self.lock:
                self.running.pop(job.lease, None)
            self.slots.release()
