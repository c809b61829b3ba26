"""Which of our queued lines go next, in outbox order, across resume and live pushes.

Everything we send a peer sits in the outbox with a ``seq``.  Lines queued
while the peer was away are found by scanning the outbox (replay); lines
committed while connected are pushed to the session in commit order, which
saves a query per message.  The two overlap after a resume, so the rule is
simple: a line goes only if its ``seq`` is above the last one sent, and the
peer's resume restarts the scan from the start (it said what it has; acks
and the store's seen marks drop the rest).  Nothing is sent before the
peer's resume arrives (or ``resume_wait`` passes, the session's timer), and
nothing at all after our bye.

No I/O: the driver fetches the rows it is told to and writes what
:meth:`Replay.take` returns.
"""

from __future__ import annotations

from ...wire.messages import ACKED_TYPES
from ..gaps import AckGaps, line_id

SEND_BATCH = 256  # lines per write
SEND_BATCH_BYTES = 1 << 20  # and at most this much per write, so others get the lock


class Replay:
    """The sending side of one connection: where in the outbox we are."""

    def __init__(self, gaps: AckGaps) -> None:
        self.gaps = gaps
        self.last_sent_seq = 0
        self.rescan_due = True  # the outbox must be read from ``last_sent_seq`` on
        self.pushed: list[tuple[int, str, str]] = []
        self.resumed_by_peer = False
        self.may_send = False  # the peer's resume came, or we stopped waiting for it
        self.bye_sent = False

    def resumed(self) -> None:
        """The peer's resume is applied: scan the outbox from the start.

        Lines already pushed stay queued: one handed over before its commit
        may not be visible to the scan yet, and whatever the scan does send
        is skipped by ``seq`` when they go.
        """
        self.last_sent_seq = 0
        self.rescan_due = True
        self.resumed_by_peer = True
        self.may_send = True

    def push(self, seq: int, t: str, text: str) -> None:
        """A line for this peer was just committed (called in commit order)."""
        self.pushed.append((seq, t, text))

    def rescan(self) -> None:
        """Lines were queued out of commit order: read the outbox again."""
        self.rescan_due = True

    def sent_first(self, seq: int) -> None:
        """A line written before its commit got outbox position ``seq``."""
        if seq > self.last_sent_seq:
            self.last_sent_seq = seq

    def next_step(self) -> tuple[str, object] | None:
        """``("fetch", after_seq)`` to scan the outbox, ``("rows", rows)`` for
        pushed lines, or None when there is nothing to send."""
        if self.bye_sent or not self.may_send:
            return None
        if self.rescan_due:
            return ("fetch", self.last_sent_seq)
        if self.pushed:
            rows, self.pushed = self.pushed, []
            return ("rows", rows)
        return None

    def fetched(self, rows: list) -> None:
        """The scan found ``rows`` (none: the scan is finished)."""
        if not rows:
            self.rescan_due = False

    def take(self, rows: list[tuple[int, str, str]]) -> list[bytes | str]:
        """What to write for ``rows``, in order: byte batches of whole lines, and
        chunk templates (``str``) whose data the driver reads as it writes them.
        Rows at or below the last seq sent are skipped (sent already)."""
        out: list[bytes | str] = []
        batch: list[str] = []
        size = 0
        sent = self.gaps.sent if self.gaps.enabled else None
        for seq, t, text in rows:
            if seq <= self.last_sent_seq:  # a rescan overtook a push
                continue
            self.last_sent_seq = seq
            if t == "chunk":
                if batch:
                    out.append("".join(batch).encode("utf-8"))
                    batch, size = [], 0
                out.append(text)
                continue
            if sent is not None and t in ACKED_TYPES:
                sent(line_id(text))
            batch.append(text + "\n")
            size += len(text)
            if len(batch) >= SEND_BATCH or size >= SEND_BATCH_BYTES:
                out.append("".join(batch).encode("utf-8"))
                batch, size = [], 0
        if batch:
            out.append("".join(batch).encode("utf-8"))
        return out
