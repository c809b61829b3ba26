"""The MCP server marks read only what it has written: batching and the write-then-confirm order."""

from __future__ import annotations

import io
import threading

import pytest

from awp.mcp import server as srv
from awp.mcp.seen import SeenBatcher, unread_seqs
from awp.present.text import measure


def test_flush_sends_chunks_in_order_and_empties() -> None:
    b = SeenBatcher(chunk=3)
    b.add([5, 6, 7, 8])
    b.add([6, 9])  # a seq already waiting is sent once
    sent: list[list[int]] = []
    assert b.flush(sent.append) is True
    assert sent == [[5, 6, 7], [8, 9]]
    assert b.pending() == []
    assert b.flush(sent.append) is True and len(sent) == 2  # nothing waits: no request


def test_a_chunk_the_daemon_did_not_take_waits_for_the_next_flush() -> None:
    b = SeenBatcher(chunk=2)
    b.add([1, 2, 3])
    calls: list[list[int]] = []

    def down(chunk: list[int]) -> None:
        calls.append(chunk)
        raise ConnectionError("daemon away")

    assert b.flush(down) is False
    assert b.pending() == [1, 2, 3] and calls == [[1, 2]]
    taken: list[list[int]] = []

    def second_fails(chunk: list[int]) -> None:
        if taken:
            raise TimeoutError
        taken.append(chunk)

    assert b.flush(second_fails) is False
    assert b.pending() == [3]  # the first chunk went, the second still waits
    assert b.flush(taken.append) is True and taken == [[1, 2], [3]]


def test_pending_is_bounded_dropping_the_oldest() -> None:
    b = SeenBatcher(chunk=10, most=4)
    b.add(range(1, 7))
    assert b.pending() == [3, 4, 5, 6]  # 1 and 2 stay unread: shown again later, not lost


def test_two_threads_never_send_the_same_seq_twice() -> None:
    b = SeenBatcher(chunk=1)
    b.add(range(200))
    sent: list[int] = []
    lock = threading.Lock()

    def post(chunk: list[int]) -> None:
        with lock:
            sent.extend(chunk)

    threads = [threading.Thread(target=b.flush, args=(post,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(sent) == list(range(200))


def test_unread_seqs_skips_read_outbound_and_bad_seqs() -> None:
    recs = [{"seq": 1, "dir": "in"}, {"seq": 2, "dir": "out"}, {"seq": 3, "dir": "in", "read": True},
            {"seq": 4, "dir": "notice"}, {"seq": True, "dir": "in"}, {"seq": "5"}, "junk"]
    assert unread_seqs(recs) == [1, 4]  # type: ignore[arg-type]


class _Broken(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError


def _server(out: io.BytesIO, confirmed: list[list[int]]) -> srv.Server:
    s = srv.Server("/nonexistent", stdin=io.BytesIO(), stdout=out)
    s.confirm = lambda: s.seen.flush(confirmed.append)  # type: ignore[method-assign]
    return s


def test_send_confirms_only_after_the_write_and_never_writes_the_seqs() -> None:
    out = io.BytesIO()
    confirmed: list[list[int]] = []
    s = _server(out, confirmed)
    assert s.send({"jsonrpc": "2.0", "method": "x", srv.SEEN_KEY: [7, 8]}) is True
    assert confirmed == [[7, 8]]
    assert srv.SEEN_KEY.encode() not in out.getvalue()
    # a batch: each answer's seqs, once the one line is out
    assert s.send([{"id": 1, srv.SEEN_KEY: [9]}, {"id": 2}, {"id": 3, srv.SEEN_KEY: [10]}])
    assert confirmed[-1] == [9, 10]


def test_a_failed_write_marks_nothing() -> None:
    confirmed: list[list[int]] = []
    s = _server(_Broken(), confirmed)
    assert s.send({"jsonrpc": "2.0", "method": "x", srv.SEEN_KEY: [7]}) is False
    assert confirmed == [] and s.seen.pending() == []
    assert s.closed.is_set()


def _rec(seq: int, text: str, th: str = "thr_a") -> dict:
    return {"seq": seq, "dir": "in", "t": "msg", "id": f"id{seq}", "th": th, "peer": "ed25519:k",
            "peer_name": "bob", "ts": 0, "read": False,
            "line": {"t": "msg", "th": th, "parts": [{"k": "text", "text": text}]}}


def test_a_push_is_bounded_and_marks_only_what_it_shows() -> None:
    recs = [_rec(i, f"[m{i}] " + "z" * 900) for i in range(1, 31)]
    note = srv.channel_notification(recs)
    assert note is not None
    content = note["params"]["content"]
    assert measure(content) <= srv.PUSH_BYTES
    shown = note[srv.SEEN_KEY]
    assert shown and shown == sorted(shown) and shown[-1] == 30  # the newest
    assert len(shown) < 30 and "[m30]" in content and "[m1]" not in content
    left = 30 - len(shown)
    assert f"{left} older ones are not shown here and stay unread (read them with awp_read)" \
        in content
    # count is what the content shows, more what it leaves out of the burst (issue 39.2)
    assert note["params"]["meta"]["count"] == str(len(shown))
    assert note["params"]["meta"]["more"] == str(left)


def test_a_push_to_a_client_that_did_not_declare_channels_marks_nothing() -> None:
    note = srv.channel_notification([_rec(1, "hello")], confirm=False)
    assert note is not None and srv.SEEN_KEY not in note
    assert note["params"]["meta"]["count"] == "1"


@pytest.mark.parametrize("n", [1, 3])
def test_a_small_push_shows_and_marks_everything(n: int) -> None:
    recs = [_rec(i, f"hello {i}") for i in range(1, n + 1)]
    note = srv.channel_notification(recs)
    assert note is not None and note[srv.SEEN_KEY] == list(range(1, n + 1))
    assert "stay unread" not in note["params"]["content"]
