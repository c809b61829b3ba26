"""What awp web shows of the board: topics and posts from the daemon's answers (pure)."""

from __future__ import annotations

from awp.web import board

POLICY = {"seq": 2, "title": "Ops", "read": "grant", "post": "open", "keep": 10000,
          "keep_days": 30, "keep_bytes": 1 << 26, "rate": 60, "max_post": 65536,
          "queue": True, "lease_s": 300, "attempts": 3, "revoked": 1, "banned": ["ed25519:x"]}
TOPIC = {"topic": "ed25519:Fcy/ops", "label": "alice/ops", "owner": "ed25519:Fcy",
         "owner_name": "alice", "name": "ops", "mine": False, "subscribed": True, "known": True,
         "records": 12, "posts": 9, "newest": 1790000000001, "unread": 3, "policy": POLICY}


def test_policy_text() -> None:
    assert board.policy_text(POLICY) == ("read grant · post open · keeps 10000 records, 30 days"
                                         " · 60 a minute each · work queue, 300 s leases"
                                         " · 1 revoked · 1 banned")
    assert board.policy_text(None) == "policy not known yet"
    assert board.policy_text({"read": "open", "post": "open"}) == "read open · post open"


def test_topic_shape() -> None:
    t = board.topic(TOPIC)
    assert t["title"] == "Ops" and t["queue"] is True and t["unread"] == 3
    assert t["newest"] == "2026-09-21T14:13:20.001Z"
    unknown = board.topic({**TOPIC, "policy": None, "known": False, "newest": 0,
                           "posts": "9", "mine": "yes"})
    assert unknown["title"] == "" and unknown["newest"] is None and unknown["policy"] is None
    assert unknown["posts"] == 0 and unknown["mine"] is False  # wrong types are not passed on


def test_posts_keep_their_text_exactly_and_name_files() -> None:
    hostile = "<script>alert(1)</script>"
    p = {"hash": "ab" * 16, "id": "ababababab", "author": "ed25519:bob", "author_name": "bob",
         "mine": False, "ts": 1790000000001, "parent": "", "edited": 0, "replies": 2, "seq": 7,
         "parts": [{"k": "text", "text": hostile}, {"k": "code", "lang": "sh", "text": "ls"},
                   {"k": "data", "mime": "application/json", "data": {"a": 1}},
                   {"k": "file", "name": "x.html", "mime": "text/html", "size": 9,
                    "data": "PGI+PC9iPg=="},
                   {"k": "weird", "text": "dropped"}]}
    got = board.post(p)
    assert got["parts"][0] == {"type": "text", "text": hostile}
    assert got["parts"][1] == {"type": "code", "text": "ls", "lang": "sh"}
    assert got["parts"][2] == {"type": "data", "mime": "application/json", "data": {"a": 1}}
    f = got["parts"][3]
    assert f["type"] == "blob" and f["name"] == "x.html" and "url" not in f and "data" not in f
    assert len(got["parts"]) == 4
    assert got["at"] == "2026-09-21T14:13:20.001Z" and got["edited"] is None
    view = board.topic_view({"topic": TOPIC, "posts": [p, "junk"]})
    assert [x["hash"] for x in view["posts"]] == ["ab" * 16]
    assert board.board({"topics": [TOPIC, None]})["topics"][0]["label"] == "alice/ops"


def test_queue_view_rows_counts_and_columns():
    from awp.web.board import QUEUE_COLUMNS, queue_view

    def item(h: str, text: str) -> dict:
        return {"hash": h * 8, "id": h * 5, "parts": [{"k": "text", "text": text}]}

    q = {"arbiter": True, "items": [
        {"item": item("a", "job 1"), "status": "claimed", "holder": "ed25519:bob",
         "lease": "x.1", "until": 1_800_000_000_000, "attempts": 1},
        {"item": item("b", "job 2"), "status": "done", "holder": "ed25519:bob", "until": 5,
         "attempts": 1},
        {"item": item("c", "job 3"), "status": "dead", "attempts": 3},
        {"item": item("d", "job 4"), "status": "<script>", "attempts": "x"},
    ]}
    v = queue_view(q)
    assert v is not None and v["arbiter"] is True
    assert [c["key"] for c in v["columns"]] == [c["key"] for c in QUEUE_COLUMNS]
    assert [r["status"] for r in v["rows"]] == ["claimed", "done", "dead", "open"]
    assert v["rows"][0]["holder"] == "ed25519:bob" and v["rows"][0]["until"].startswith("2027")
    assert v["rows"][1]["holder"] == "" and v["rows"][1]["until"] == ""  # only a claim has one
    assert v["rows"][3]["attempts"] == 0 and v["rows"][0]["text"] == "job 1"
    assert v["counts"] == {"open": 1, "claimed": 1, "done": 1, "dead": 1}
    assert queue_view(None) is None


def test_queue_view_shows_what_a_worker_holds_since_when_and_what_items_need():
    from awp.web.board import queue_view

    q = {"items": [
        {"item": {"hash": "a" * 32, "id": "a" * 10, "parts": []}, "status": "claimed",
         "holder": "ed25519:bob", "until": 1_800_000_060_000, "since": 1_800_000_000_000,
         "renewals": 4, "attempts": 0, "needs": ["gpu", 7, "linux"]},
        {"item": {"hash": "b" * 32, "id": "b" * 10, "parts": []}, "status": "open",
         "since": 5, "renewals": 9, "needs": []},
    ]}
    rows = queue_view(q)["rows"]
    assert rows[0]["since"].startswith("2027") and rows[0]["renewals"] == 4
    assert rows[0]["needs"] == "gpu,linux"  # what is not a tag is left out
    assert rows[1]["since"] == "" and rows[1]["renewals"] == 0  # only a held item has them


def test_queue_view_says_who_did_each_item_and_sums_up_the_workers():
    """The page shows what `awp queue` prints: who completed a done item, and one row per
    worker with what it holds and how its leases ended (strikes from the arbiter only)."""
    from awp.web.board import queue_view

    q = {"arbiter": False, "items": [
        {"item": {"hash": "a" * 32, "id": "a" * 10, "parts": []}, "status": "done",
         "holder": "", "done_by": "ed25519:carol"},
        {"item": {"hash": "b" * 32, "id": "b" * 10, "parts": []}, "status": "open",
         "done_by": "ed25519:stale"},
    ], "workers": [
        {"holder": "ed25519:carol", "holds": ["c" * 32], "since": 1_800_000_000_000,
         "renewals": 2, "done": 1, "failed": 0, "expired": 1},
    ]}
    v = queue_view(q)
    assert [r["done_by"] for r in v["rows"]] == ["ed25519:carol", ""]  # only a done item
    assert "done_by" in [c["key"] for c in v["columns"]]
    assert v["workers"] == [{"holder": "ed25519:carol", "holds": 1,
                             "since": v["workers"][0]["since"], "renewals": 2, "done": 1,
                             "failed": 0, "expired": 1}]
    assert v["workers"][0]["since"].startswith("2027")
    assert "strikes" not in [c["key"] for c in v["worker_columns"]]
    q["workers"][0]["strikes"] = 3
    v = queue_view(q)
    assert v["workers"][0]["strikes"] == 3 and v["worker_columns"][-1]["key"] == "strikes"
