"""When to redial a peer that failed: fast while it looks like it is waking.

Sandbox platforms (Fly Machines, Sprites, E2B, Codespaces, Modal) pause an
idle sandbox and wake it when a request arrives on its URL.  The dial is the
wake signal, and while the sandbox wakes the platform refuses: it answers
502/503/504 to an HTTP upgrade (the ws binding raises ``WakeRefused``),
resets the connection, or accepts and drops it before the daemon's hello.
The sandbox is usually up within a second or two, so the ordinary backoff
(1 s doubling to 60 s) would make the caller wait out a 16 or 32 s sleep for
a peer that has long been up.

So a failure streak (consecutive failed rounds of dialing since the last
connection, or since new lines for the peer were queued) that looks like waking is retried on a short schedule: about
0.5, 1, 2, 2, 2 ... s, jittered by up to 10 % either way, for the first
:data:`FAST_WINDOW` seconds of the streak.  After the window, or for a
failure that does not look like waking (a timeout, a key mismatch, a
refusal in the handshake), the ordinary exponential backoff applies,
starting from wherever it stood: fast retries never raise it, so when the
window ends it begins at its base, not at a minute.  A dead peer that
refuses at once therefore costs at most ~17 dials in the window before the
ordinary backoff (docs/threat-model.md, "Redialing").

This module is pure (no trio, no I/O): the redial loop hands it the time and
a random number, and a test hands it a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass

FAST_WINDOW = 30.0  # seconds of a streak retried on the fast schedule
FAST_STEPS = (0.5, 1.0, 2.0)  # the fast waits; the last repeats
FAST_JITTER = 0.1  # each fast wait is moved by up to this fraction either way

# What a refusal by a waking platform looks like once a transport has put it
# into words (awp.transport.streams words errno; the connection says how a
# handshake ended).  Matched in lower case.
_WAKING_WORDS = ("connection refused", "connection reset", "peer closed during handshake",
                 "broken pipe")
_WAKING_TYPES = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError)
WAKE_REFUSED = "WakeRefused"  # the ws binding's exception for 502/503/504 or a dropped upgrade


def looks_waking(exc: BaseException | None) -> bool:
    """Whether a failed dial looks like a peer (or its platform) still waking.

    ``exc`` and everything it was raised from or during are looked at: an
    exception class named ``WakeRefused`` (matched by name, so this works
    with and without the ws binding in the build, and node imports no
    transport), a refused or reset connection, or the handshake ending
    before the peer's hello.  Timeouts are not waking: a platform answers a
    waking sandbox's dial at once, and a black hole must back off.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(t.__name__ == WAKE_REFUSED for t in type(exc).__mro__):
            return True
        if isinstance(exc, _WAKING_TYPES):
            return True
        if looks_waking_text(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def looks_waking_text(reason: str) -> bool:
    """The same judgement on a failure already put into words."""
    low = reason.lower()
    return any(w in low for w in _WAKING_WORDS)


def fast_wait(elapsed: float, rnd: float) -> float:
    """The fast wait after a failure ``elapsed`` seconds into its streak.

    The step is chosen by the time the streak has run, not by counting
    failures, so dials a kick added (new lines queued) do not hurry it to
    the 2 s step: the ``n``-th step begins once the waits before it have
    passed, measured at their shortest jitter.  ``rnd`` in ``[0, 1)`` jitters
    the wait.
    """
    step, begins = FAST_STEPS[0], 0.0
    for i, wait in enumerate(FAST_STEPS[:-1]):
        begins += wait * (1 - FAST_JITTER)
        if elapsed >= begins:
            step = FAST_STEPS[i + 1]
    return step * (1 - FAST_JITTER + 2 * FAST_JITTER * rnd)


@dataclass
class Streak:
    """One peer's run of failed dialing rounds since its last connection or kick."""

    started: float | None = None  # when the first failure of the streak was seen
    fast: int = 0  # fast retries given so far in this streak

    def failed(self, now: float, waking: bool, rnd: float) -> float | None:
        """A round of dialing failed at ``now``: the fast wait before the next
        one, or None for the ordinary backoff (which the caller then raises;
        a fast retry leaves it where it stands)."""
        if self.started is None:
            self.started = now
        elapsed = now - self.started
        if waking and elapsed < FAST_WINDOW:
            self.fast += 1
            return fast_wait(elapsed, rnd)
        return None

    def reset(self) -> None:
        """A connection came up, or new lines were queued (a kick): the next
        failure starts a new streak, from the short end of the schedule."""
        self.started = None
        self.fast = 0
