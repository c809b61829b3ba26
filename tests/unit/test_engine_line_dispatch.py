"""Engine.on_other_line hands a line to the extensions that take lines, in their order,
and sees extensions added later (the list is looked at again when it changes)."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from awp.node.engine import Engine
from awp.node.extension import Extension


class Taker(Extension):
    def __init__(self, prefix: str, seen: list[str]) -> None:
        self.prefix, self.seen = prefix, seen

    async def on_line(self, conn: object, line: dict, raw: bytes) -> bool:
        self.seen.append(f"{self.prefix}:{line['t']}")
        return line["t"].startswith(self.prefix)


class Quiet(Extension):
    """Takes no lines (the default on_line)."""


def _engine(exts: list) -> SimpleNamespace:
    eng = SimpleNamespace(extensions=exts, _takers=[], _takers_n=-1)
    eng._line_takers = lambda: Engine._line_takers(eng)  # type: ignore[arg-type]
    return eng


def test_lines_reach_the_takers_in_order_and_later_ones_too() -> None:
    seen: list[str] = []
    eng = _engine([Quiet(), Taker("presence", seen), Quiet(), Taker("board-", seen)])

    async def main() -> None:
        await Engine.on_other_line(eng, None, {"t": "board-posts"}, b"")  # type: ignore[arg-type]
        await Engine.on_other_line(eng, None, {"t": "presence"}, b"")  # type: ignore[arg-type]
        assert seen == ["presence:board-posts", "board-:board-posts", "presence:presence"]
        seen.clear()
        eng.extensions.append(Taker("queue-", seen))  # added after the first lines
        await Engine.on_other_line(eng, None, {"t": "queue-x"}, b"")  # type: ignore[arg-type]
        assert seen == ["presence:queue-x", "board-:queue-x", "queue-:queue-x"]
        assert [type(e) for e in eng._takers] == [Taker, Taker, Taker]  # no Quiet

    trio.run(main)
