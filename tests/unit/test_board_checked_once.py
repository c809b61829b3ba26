"""A relayed record costs its parse and signature check once a host (issue 37).

A record reaches a host once a path; the copies after the first must cost a
look-up, never a second parse or signature check, and a record parsed but
not yet verified must still be verified when asked.
"""

from __future__ import annotations

import json

import pytest

from awp.node.session import Session
from awp.node.session import actions as A
from awp.wire import board as wb
from awp.wire.canonical import compact_json
from awp.wire.keys import Identity
from awp.wire.messages import dump

T0 = 1_790_000_000_000
OWNER = Identity(b"\x05" * 32)


def _post(text: str, ts: int = T0 + 1) -> wb.Record:
    return wb.make_post(OWNER, f"{OWNER.key}/ops", [{"k": "text", "text": text}], ts)


@pytest.fixture
def verifies(monkeypatch):
    """Counts the signature checks made (the real check still answers)."""
    calls: list[str] = []
    real = wb.verify

    def counted(key, message, sig):
        calls.append(sig)
        return real(key, message, sig)

    monkeypatch.setattr(wb, "verify", counted)
    return calls


def test_the_same_record_again_is_not_verified_again_but_still_meets_before_sig(verifies):
    p = _post("once")
    first = wb.check_record(p.raw)
    seen: list[str] = []
    again = wb.check_record(p.raw, lambda kind, topic, author, ts, h: seen.append(h))
    assert again.hash == first.hash == p.hash
    assert len(verifies) == 1  # the second copy was a look-up
    assert seen == [p.hash]  # a host still learns it holds it (and turns it away)

    class Held(wb.BoardError):
        pass

    def held(*_a):
        raise Held("already held")

    with pytest.raises(Held):
        wb.check_record(p.raw, held)
    assert wb.verify_record(first) and len(verifies) == 1  # verified by hash before


def test_a_record_parsed_unverified_is_verified_when_asked_and_a_forgery_never_passes(verifies):
    p = _post("parsed first")
    doc = json.loads(p.raw)
    doc["parts"][0]["text"] = "changed in transit"
    forged = compact_json(doc)
    rec = wb.parse_unverified(forged)  # named, not verified
    assert verifies == []
    for _ in range(2):  # a failed check is not remembered as a pass
        with pytest.raises(wb.BoardError, match="signature"):
            wb.check_record(forged)
        assert not wb.verify_record(rec)
    assert len(verifies) == 4
    good = wb.parse_unverified(p.raw)
    assert wb.verify_record(good) and wb.check_record(p.raw).hash == p.hash
    assert len(verifies) == 5  # the good one: checked once


def test_what_a_host_remembers_of_checked_records_is_bounded():
    raws = [_post(f"flood {i}", T0 + 10 + i).raw for i in range(wb.MAX_CHECKED + 10)]
    for raw in raws:
        wb.check_record(raw)
    assert len(wb._CHECKED) <= wb.MAX_CHECKED
    assert len(wb._VERIFIED) <= wb.MAX_VERIFIED
    assert raws[-1] in wb._CHECKED  # the newest stay, the oldest went first
    assert raws[0] not in wb._CHECKED


def _line(t: str, n: int, **kw) -> bytes:
    return dump({"t": t, "id": f"01PEER{n:020d}", "ts": "2026-01-01T00:00:00.000Z",
                 **kw})[:-1]


def test_board_posts_lines_of_one_read_are_handed_over_together_in_their_turn():
    class Ids:
        def next(self) -> str:
            return "01OURS00000000000000000001"

        def next_run(self, n: int) -> list[str]:
            return [self.next() for _ in range(n)]

    s = Session(Ids(), now=100.0, clock_ms=lambda: 1_700_000_000_000, resume_wait=1000.0)
    s.start(100.0)
    posts = [_line("board-posts", i, topic="x", hops=0, recs=[]) for i in range(3)]
    sub = _line("board-sub", 9, topics=[])
    s.receive([posts[0], posts[1], sub, posts[2]], 100.0)
    first = s.next_action(100.0)
    assert first[0] == A.OTHER and first[2] == posts[0]
    more = s.more_of("board-posts", 64)
    assert [raw for _line, raw in more] == [posts[1]]  # another type stops it: order kept
    assert s.more_of("board-posts", 64) == []
    nxt = s.next_action(100.0)
    assert nxt[0] == A.OTHER and nxt[1]["t"] == "board-sub"
    last = s.next_action(100.0)
    assert last[2] == posts[2] and s.more_of("board-posts", 64) == []
    s.receive(posts, 100.0)
    s.next_action(100.0)
    assert len(s.more_of("board-posts", 1)) == 1  # at most the limit
