"""Noticing a line lost in the middle of a live connection.

TCP does not lose bytes, but a broken middlebox (or a peer that drops a line)
can, and nothing else would notice: pings still flow, and the lost line is
only replayed after a reconnect, which may never come.  Reconnecting is not
even a cure within a thread, because ``resume.seen`` is a per-thread high
mark: once a later line of the thread is stored, the lost one counts as seen.

A receiver acks content lines in the order they arrived, so an ack for a line
we sent after one still unacked is a sign of a gap.  Not proof: acks of a
burst may trail their commits, and another implementation may commit in
parallel.  So the older line gets ``gap_timeout`` from that moment to be
acked; after that it is sent again on the same connection (receivers drop
duplicates by id and ack again).  A line already sent again is not sent a
third time on this connection: a peer that never acks it (one that ignores
the line type, say) costs one duplicate per connection, and the line stays
queued for the next resume.  A line sent again gets ``gap_timeout`` of its
own to be acked: without that clock, a resend lost too was given up only
when some later line's ack overtook it, so on a connection with nothing
more to send it waited for good with no word in the log.

Pure bookkeeping, no I/O and no clock of its own: the connection passes the
time in and does the sending.
"""

from __future__ import annotations

from collections import OrderedDict


class AckGaps:
    """Lines written on one connection and awaiting their ack, in send order."""

    def __init__(self, timeout: float, cap: int = 16384) -> None:
        self.timeout = timeout
        self.cap = cap  # the oldest are forgotten past this (they stay queued for resume)
        self._sent: OrderedDict[str, tuple[int, bool]] = OrderedDict()  # id -> (n, resent)
        self._n = 0  # send number of the last line written
        self._acked_n = 0  # highest send number acked so far
        self._since: float | None = None  # when an ack first overtook an older line
        self._cut = 0  # lines numbered below this were overtaken at ``_since``
        self._resent_by: dict[str, float] = {}  # a line sent again -> its ack's deadline

    def __len__(self) -> int:
        return len(self._sent)

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def sent(self, ident: str | None, resent: bool = False) -> None:
        """``ident`` is being written now (again, if already tracked)."""
        if not ident or not self.enabled:
            return
        self._sent.pop(ident, None)
        self._n += 1
        self._sent[ident] = (self._n, resent)
        if len(self._sent) > self.cap:
            self._sent.popitem(last=False)

    def answered(self, ident: str, now: float) -> bool:
        """The peer acked (or refused) ``ident``; True when that newly shows a gap."""
        sent = self._sent
        if sent and next(iter(sent)) == ident:  # the oldest, as acks mostly come
            if self._resent_by:
                self._resent_by.pop(ident, None)
            n = sent.popitem(last=False)[1][0]
            if n > self._acked_n:
                self._acked_n = n
            return False
        self._resent_by.pop(ident, None)
        entry = sent.pop(ident, None)
        if entry is None:
            return False
        self._acked_n = max(self._acked_n, entry[0])
        if self._since is not None:
            return False
        self._since, self._cut = now, entry[0]
        return True

    def forget(self, idents: list[str]) -> None:
        """These need no ack any more (the peer's resume says it has them)."""
        for i in idents:
            self._sent.pop(i, None)
            self._resent_by.pop(i, None)

    def due(self) -> float | None:
        """When the overtaken lines are to be sent again, or a line sent again
        is to be given up, if any are."""
        due = None if self._since is None else self._since + self.timeout
        if self._resent_by:
            first = min(self._resent_by.values())
            due = first if due is None else min(due, first)
        return due

    def take_overdue(self, now: float) -> tuple[list[str], list[str]]:
        """At :meth:`due`: ``(to send again, given up)``, both dropped from tracking.

        Lines overtaken after the gap was first seen get their own full
        timeout from now.
        """
        again: list[str] = []
        given_up: list[str] = []
        if self._since is not None and now >= self._since + self.timeout:
            for ident, (n, resent) in self._sent.items():
                if n >= self._cut:
                    break
                (given_up if resent else again).append(ident)
            for i in again + given_up:
                del self._sent[i]
            self._since = None
            first = next(iter(self._sent.values()), None)
            if first is not None and first[0] < self._acked_n:
                self._since, self._cut = now, self._acked_n
        for ident in given_up:
            self._resent_by.pop(ident, None)
        for ident, by in list(self._resent_by.items()):
            if by <= now:  # sent again a timeout ago, still not acked
                del self._resent_by[ident]
                if self._sent.pop(ident, None) is not None:
                    given_up.append(ident)
        for ident in again:  # to be sent again now: their own clock starts
            self._resent_by[ident] = now + self.timeout
        return again, given_up


def line_id(text: str) -> str | None:
    """The id of one of our own wire lines (``t`` then ``id`` come first)."""
    i = text.find('"id":"', 0, 48)
    if i < 0:
        return None
    j = text.find('"', i + 6)
    return text[i + 6:j] if j > 0 else None
