"""A small fan-out of change notifications to local API streams.

Subscribers (``awp wait``, ``tail``, ``listen``, the MCP server) re-read the
store when told something changed, so a notification carries only a hint.
A subscriber that falls behind loses hints, never data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager

import trio


class Broadcaster:
    """Hands each hint to every subscriber that wants its kind.

    A subscriber may name the kinds it wants (``kinds``) or those it never
    wants (``ignore``): a hint it would only drop then costs it no task
    wake-up, which on a relay is once per record for every such watcher.
    """

    def __init__(self) -> None:
        # channel (or call) -> (kinds wanted, or None for all; kinds never wanted)
        self._subs: dict[trio.MemorySendChannel | _Call, tuple[frozenset | None, frozenset]] = {}

    def publish(self, event: dict) -> None:
        kind = event.get("kind")
        for send, (kinds, ignore) in list(self._subs.items()):
            if (kinds is not None and kind not in kinds) or kind in ignore:
                continue
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                pass  # slow reader: it will re-read the store anyway
            except trio.BrokenResourceError:
                self._subs.pop(send, None)

    @contextmanager
    def subscribe(self, buffer: int = 256, *, kinds: Iterable[str] | None = None,
                  ignore: Iterable[str] = ()):
        send, recv = trio.open_memory_channel(buffer)
        self._subs[send] = (frozenset(kinds) if kinds is not None else None, frozenset(ignore))
        try:
            yield recv
        finally:
            self._subs.pop(send, None)
            send.close()

    @contextmanager
    def calling(self, fn: Callable[[dict], None], *, kinds: Iterable[str]):
        """Call ``fn(hint)`` as each hint of these kinds is published, in the publisher's
        task: for a watcher shared by many waiters, which notes that something
        changed and wakes them once, rather than a task of its own woken per hint."""
        call = _Call(fn)
        self._subs[call] = (frozenset(kinds), frozenset())
        try:
            yield
        finally:
            self._subs.pop(call, None)


class _Call:
    """A subscriber that is a function: ``publish`` calls it where it would queue."""

    def __init__(self, fn: Callable[[dict], None]) -> None:
        self.send_nowait = fn
