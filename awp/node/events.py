"""A small fan-out of change notifications to local API streams.

Subscribers (``awp wait``, ``tail``, ``listen``, the MCP server) re-read the
store when told something changed, so a notification carries only a hint.
A subscriber that falls behind loses hints, never data.
"""

from __future__ import annotations

from contextlib import contextmanager

import trio


class Broadcaster:
    def __init__(self) -> None:
        self._subs: set[trio.MemorySendChannel] = set()

    def publish(self, event: dict) -> None:
        for send in list(self._subs):
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                pass  # slow reader: it will re-read the store anyway
            except trio.BrokenResourceError:
                self._subs.discard(send)

    @contextmanager
    def subscribe(self, buffer: int = 256):
        send, recv = trio.open_memory_channel(buffer)
        self._subs.add(send)
        try:
            yield recv
        finally:
            self._subs.discard(send)
            send.close()
