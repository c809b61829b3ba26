"""``awp work``: a loop that claims a queue's items and runs a command on each.

Each of ``--concurrency`` slots is a thread that claims an item and works
it (:mod:`awp.work.job`), then claims the next.  A slot that finds nothing
waits with a long poll: the daemon answers when an item was handed out or
after :data:`LONG_POLL_S`, and asks the owner again only when the topic may
have work (see :mod:`awp.node.claim_wait`); one slot waits at a time, so an
idle worker costs one waiting request.

Stopping (SIGTERM, SIGINT): no new claims; running commands get
``--grace`` seconds to finish (their result is then reported as usual),
after which they are stopped and their items released (which costs no
attempt).  A daemon that goes away meanwhile is waited for (and started
again on demand): the worker outlives a daemon restart, and what it could
not report while the owner was away its daemon keeps and sends later.
Except when the user stopped it (``awp down``): then the worker stops its
commands at once and exits with status 3, and does not start the daemon
again behind the user's back.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .api import ApiFailure, Daemon, Gone, Stopped
from .job import Job, Options, Outcome, Ran

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
        self.lock = threading.Lock()
        self.poll = threading.Lock()  # one slot at a time waits in the daemon for work
        self.outcomes: list[Outcome] = []
        self.started = 0
        self.nothing = False  # --once found the queue empty
        self.down = False  # the user stopped the daemon (awp down)
        self.reporting: list[threading.Thread] = []  # results being posted

    # -- signals -----------------------------------------------------------------------

    def request_stop(self, *_a: object) -> None:
        if not self.stop.is_set():
            self.grace_until.append(time.monotonic() + self.s.grace)
            self.stop.set()

    def daemon_down(self) -> None:
        """The user stopped the daemon: stop now, no grace (nothing could be reported)."""
        with self.lock:
            if self.down:
                return
            self.down = True
        print("awp work: the daemon was stopped (awp down): stopping; run awp up and"
              " awp work again to go on", file=sys.stderr, flush=True)
        self.grace_until.insert(0, time.monotonic())
        self.stop.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or ``--max-items``/``--once`` are used up); the exit status."""
        n = 1 if self.s.once else max(1, self.s.concurrency)
        slots = [threading.Thread(target=self._slot, name=f"slot-{i}", daemon=True)
                 for i in range(n)]
        for t in slots:
            t.start()
        for t in slots:
            while t.is_alive():
                t.join(0.2)  # short joins: signal handlers run in this thread
        while True:
            with self.lock:
                reporting = [t for t in self.reporting if t.is_alive()]
            if not reporting:
                break
            reporting[0].join(0.2)
        if self.down:
            return 3
        return 2 if self.s.once and self.nothing else 0

    def _reserve(self) -> bool:
        """Count an item about to be claimed against ``--max-items`` (False: none left)."""
        limit = 1 if self.s.once else self.s.max_items
        with self.lock:
            if limit and self.started >= limit:
                return False
            self.started += 1
            return True

    def _unreserve(self) -> None:
        with self.lock:
            self.started -= 1

    def _slot(self) -> None:
        """One of ``--concurrency`` loops: claim, work, repeat.

        A slot asks first without waiting, so slots freed together claim
        together; only when that finds nothing does it wait in the daemon,
        and then one slot at a time (the others queue behind it), so an idle
        worker has one request waiting, not one a slot.
        """
        api = Daemon(self.s.home)
        try:
            while not self.stop.is_set() and self._reserve():
                got = self._claim(api, 0.0)
                if got is None and not self.s.once:
                    with self.poll:
                        if not self.stop.is_set():
                            got = self._claim(api, LONG_POLL_S)
                if got is None:
                    self._unreserve()
                    if self.s.once:
                        self.nothing = True
                        return
                    continue
                if self.stop.is_set():  # handed out while stopping: give it straight back
                    Job(got, self.s.job, self.s.home, self.stop)._op(api, "release")
                    return
                self._work(Job(got, self.s.job, self.s.home, self.stop, self.grace_until))
        finally:
            api.close()

    def _claim(self, api: Daemon, wait: float) -> dict | None:
        """One claim (a long poll of ``wait`` seconds); None when nothing came."""
        body: dict = {"topic": self.s.topic, "wait": wait, "req": uuid.uuid4().hex,
                      "timeout": 10.0}
        if self.s.offers:
            body["offers"] = list(self.s.offers)
        if self.s.bid:
            body["bid"] = self.s.bid
        try:
            res = api.call("POST", "/v1/board/claim", body, wait=wait + 10.0,
                           within=float("inf"))
        except Stopped:
            self.daemon_down()
            return None
        except ApiFailure as e:
            if e.code in ("no_owner", "timeout"):
                if not self.s.once:
                    self.stop.wait(NO_OWNER_S)
                return None
            raise
        except Gone:
            return None
        return res if res.get("state") == "claimed" else None

    def _work(self, job: Job) -> None:
        """Run the item's command in this slot; report its result beside the next one.

        Posting the result and completing take a few round trips to the
        owner; the slot need not wait for them to take its next item.
        """
        item = job.item
        self.s.say(f"claimed {item.get('hash', '')[:10]} (lease {job.lease})")
        try:
            ran = job.execute()
        except OSError as e:
            self._ended(Outcome(item.get("hash", ""), "failed", None, 0.0, str(e)))
            print(f"awp work: {e}", file=sys.stderr, flush=True)
            return
        if ran.ended == "down":
            self.daemon_down()
        t = threading.Thread(target=self._report, args=(job, ran), daemon=True)
        with self.lock:
            self.reporting = [r for r in self.reporting if r.is_alive()] + [t]
        t.start()

    def _report(self, job: Job, ran: Ran) -> None:
        try:
            o = job.report(ran)
        except (ApiFailure, Gone, OSError) as e:
            o = Outcome(job.item.get("hash", ""), "failed", None, ran.secs, str(e))
            print(f"awp work: {e}", file=sys.stderr, flush=True)
        self._ended(o)

    def _ended(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)
        ended = f"{o.state} {o.item[:10]} in {o.secs:.1f}s"
        if o.exit is not None:
            ended += f" (exit {o.exit})"
        if o.why:
            ended += f": {o.why}"
        self.s.say(ended)
