"""What a peer's stored lines cost its budget: the line and its rows."""

from __future__ import annotations

from awp.store import ops, usage
from awp.store.db import open_store

P = "ed25519:" + "P" * 43


def _store_line(c, ident: str, th: str) -> None:
    line = {"t": "msg", "id": ident, "ts": "2026-01-01T00:00:00.000Z", "th": th,
            "parts": [{"k": "text", "text": "x"}]}
    ops.store_inbound(c, P, line, '{"t":"msg"}', 1)


def test_a_store_counted_in_line_bytes_is_settled_once_at_start(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    usage.settle(c)  # a new store: nothing to charge
    assert usage.load(c) == {}
    # As an older awp left it: three lines in two threads, counted by their bytes.
    c.execute("DELETE FROM meta WHERE k = 'usage_row_costs'")
    for i, th in enumerate(["thr_a", "thr_a", "thr_b"]):
        _store_line(c, f"id{i}", th)
    usage.add(c, P, log=300)
    usage.settle(c)
    want = 300 + 3 * usage.LOG_ROW + 2 * usage.THREAD_ROW
    assert usage.load(c) == {P: (want, 0)}
    usage.settle(c)  # once only
    assert usage.load(c) == {P: (want, 0)}
    c.close()


def test_a_line_costs_its_bytes_and_its_rows():
    assert usage.line_cost(100) == 100 + usage.LOG_ROW
    assert usage.line_cost(100, new_thread=True) == 100 + usage.LOG_ROW + usage.THREAD_ROW
