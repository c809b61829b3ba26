"""What the engine needs of the network: dial, listen, and say who a stream is.

The engine is handed an object with these three functions (the daemon hands
it :mod:`awp.transport.streams`) instead of importing the transports, so the
protocol layer never depends on the byte-stream layer above it and a test can
hand it loopback pairs or a fake.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..wire.address import Address


class Listening(Protocol):
    """A bound listener: its address, and a task that serves each stream."""

    bound: Address

    async def serve(self, handler: Callable[[Any], Awaitable[None]], *,
                    task_status: Any = ...) -> None: ...

    async def aclose(self) -> None: ...


class Network(Protocol):
    async def dial(self, addr: Address, *, timeout: float = ...,
                   allow_plaintext: bool = ...) -> Any: ...

    async def listen(self, addr: Address, *, allow_plaintext: bool = ...) -> Listening: ...

    def peer_description(self, stream: object) -> str: ...


class NoNetwork:
    """The network of an engine given none (unit tests of the store side)."""

    async def dial(self, addr: Address, *, timeout: float = 30.0,
                   allow_plaintext: bool = False) -> Any:
        raise OSError(f"this engine has no network to dial {addr}")

    async def listen(self, addr: Address, *, allow_plaintext: bool = False) -> Listening:
        raise OSError(f"this engine has no network to listen on {addr}")

    def peer_description(self, stream: object) -> str:
        return "stream"
