"""--json carries the reference implementation's field names beside ours."""

from awp.cli import shapes


def test_peers_connected_is_a_bool_and_outbox_counts_queued():
    rows = shapes.peers([
        {"key": "k1", "state": "connected (out)", "queued": 2, "aliases": ["w"]},
        {"key": "k2", "state": "reconnecting", "queued": 0, "aliases": []},
    ])
    assert [r["connected"] for r in rows] == [True, False]
    assert rows[0]["outbound"] is True and rows[0]["outbox"] == 2 and rows[0]["alias"] == "w"
    assert rows[1]["alias"] == "" and rows[1]["state"] == "reconnecting"  # ours kept


def test_threads_have_my_state_and_their_state():
    (t,) = shapes.threads([{"th": "thr_x", "mine": "working", "theirs": "done"}])
    assert (t["my_state"], t["their_state"], t["mine"]) == ("working", "done", "working")


def test_grants_have_role_and_audience():
    (g,) = shapes.grants([{"hash": "ab", "kind": "held", "aud": "ed25519:x"}])
    assert g["role"] == "held" and g["audience"] == "ed25519:x" and g["kind"] == "held"


def test_read_has_events_with_type_and_msg():
    line = {"t": "msg", "id": "01", "parts": [{"k": "text", "text": "hi"}]}
    res = shapes.with_events({"records": [{"seq": 7, "t": "msg", "line": line}], "marked": 1})
    assert res["cursor"] == 7 and res["marked"] == 1
    (e,) = res["events"]
    assert e["type"] == "msg" and e["msg"] == line and e["seq"] == 7
    assert res["records"][0]["line"] == line
    assert shapes.with_events({"records": [], "timed_out": True}) == {
        "events": [], "cursor": 0, "records": [], "timed_out": True}
