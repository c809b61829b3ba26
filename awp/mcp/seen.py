"""Marking read what the MCP server has written to its client, and nothing before.

The server takes records from the daemon without marking them (the channel
stream, ``awp_read``), writes them to stdout, flushes, and only then tells
the daemon what it wrote with ``POST /v1/seen``. So a server stopped,
killed or too slow to write loses nothing: the records stay unread and the
next session (or hook) shows them. A confirm that fails is kept and tried
again with the next one; one lost with the process gives a duplicate later,
never a loss.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ..present.text import unread_seqs

__all__ = ["MAX_PENDING", "SEEN_CHUNK", "SeenBatcher", "unread_seqs"]

#: Most seqs in one ``/v1/seen`` request (the daemon's ``MAX_SEEN``).
SEEN_CHUNK = 10_000
#: Most seqs kept waiting for a daemon that does not answer; past it the
#: oldest are dropped (they stay unread: a duplicate later, not a loss).
MAX_PENDING = 100_000


class SeenBatcher:
    """Seqs written to the client and not yet confirmed to the daemon.

    ``add`` after a write, ``flush`` to send what waits in chunks of at most
    ``chunk``; a chunk the daemon did not take stays for the next flush.
    Thread-safe: tool calls and the channel pusher share one batcher.
    """

    def __init__(self, chunk: int = SEEN_CHUNK, most: int = MAX_PENDING) -> None:
        self.chunk = chunk
        self.most = most
        self._pending: dict[int, None] = {}  # insertion-ordered set
        self._lock = threading.Lock()
        self._flushing = threading.Lock()

    def add(self, seqs: Iterable[int]) -> None:
        with self._lock:
            for s in seqs:
                self._pending[s] = None
            while len(self._pending) > self.most:
                del self._pending[next(iter(self._pending))]

    def pending(self) -> list[int]:
        with self._lock:
            return list(self._pending)

    def flush(self, post: Callable[[list[int]], object]) -> bool:
        """Send what waits, chunk by chunk, through ``post``; ``True`` when nothing waits after.

        ``post`` raises when the daemon did not take a chunk; that chunk and
        the rest stay pending. One flush at a time, so two threads never send
        the same seqs twice at once.
        """
        with self._flushing:
            while True:
                with self._lock:
                    chunk = list(self._pending)[: self.chunk]
                if not chunk:
                    return True
                try:
                    post(chunk)
                except Exception:  # noqa: BLE001 - kept for the next flush
                    return False
                with self._lock:
                    for s in chunk:
                        self._pending.pop(s, None)
