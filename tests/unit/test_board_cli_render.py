"""Rendering of board posts, topics and queues for the CLI."""

from __future__ import annotations

from awp.present import render_board as rb

NOW = 1_790_000_000_000
ALICE = "ed25519:" + "A" * 43
BOB = "ed25519:" + "B" * 43


def post(h: str, text: str, *, parent: str = "", ago_s: int = 60, mine: bool = False,
         name: str = "bob", edited: int = 0, parts: list | None = None) -> dict:
    return {"hash": h * 32, "id": h * 10, "kind": "post", "topic": ALICE + "/ops",
            "label": "alice/ops", "author": ALICE if mine else BOB, "author_name": name,
            "mine": mine, "ts": NOW - ago_s * 1000, "parent": parent * 32 if parent else "",
            "parts": parts or [{"k": "text", "text": text}], "text": text, "edited": edited,
            "replies": 0, "seq": 1}


def test_replies_sit_under_their_parent_oldest_first():
    posts = [post("a", "deploy is green", ago_s=300),
             post("b", "unrelated", ago_s=200, name="carol"),
             post("c", "thanks", parent="a", ago_s=120, mine=True, name="alice"),
             post("d", "nested", parent="c", ago_s=60, edited=NOW - 1000)]
    assert rb.render_posts(posts, NOW).split("\n") == [
        "aaaaaaaaaa  bob  5m ago",
        "  deploy is green",
        "  cccccccccc  alice (you)  2m ago",
        "    thanks",
        "    dddddddddd  bob  1m ago  edited",
        "      nested",
        "bbbbbbbbbb  carol  3m ago",
        "  unrelated",
    ]


def test_a_reply_whose_parent_is_not_shown_names_it():
    text = rb.render_posts([post("c", "late reply", parent="a")], NOW)
    assert text.split("\n")[0] == "cccccccccc  bob  1m ago  re aaaaaaaaaa"


def test_parts_code_data_and_files_with_saved_paths():
    p = post("a", "", parts=[
        {"k": "code", "lang": "diff", "text": "-a\n+b"},
        {"k": "data", "mime": "application/json", "data": {"ok": True}},
        {"k": "file", "name": "r.txt", "mime": "text/plain", "size": 2048, "data": "..."},
        {"k": "file", "name": "n.bin", "size": 3, "data": "..."},
    ])
    text = rb.render_posts([p], NOW, saved={"a" * 32: {"r.txt": "/tmp/in/r.txt"}})
    assert text.split("\n")[1:] == [
        "  ```diff", "  -a", "  +b", "  ```",
        '  data application/json: {"ok":true}',
        "  file r.txt (2.0 KiB, text/plain): /tmp/in/r.txt",
        "  file n.bin (3 B)",
    ]


def test_stream_blocks_carry_the_topic():
    assert rb.post_block(post("a", "hi"), NOW, label=True) == [
        "alice/ops  aaaaaaaaaa  bob  1m ago", "  hi"]


def test_topics_table_shows_policy_and_unknown_documents():
    topics = [
        {"topic": ALICE + "/ops", "label": "me/ops", "mine": True, "subscribed": True,
         "known": True, "posts": 9, "unread": 0,
         "policy": {"title": "Ops", "read": "grant", "post": "grant", "queue": False}},
        {"topic": BOB + "/jobs", "label": "bob/jobs", "mine": False, "subscribed": True,
         "known": True, "posts": 2, "unread": 1,
         "policy": {"title": "", "read": "open", "post": "grant", "queue": True}},
        {"topic": BOB + "/new", "label": "bob/new", "mine": False, "subscribed": True,
         "known": False, "posts": 0, "unread": 0, "policy": None},
    ]
    rows = [r.split() for r in rb.topics_table(topics).split("\n")]
    assert rows[0] == ["TOPIC", "SUBSCRIBED", "POSTS", "UNREAD", "READ", "POST", "QUEUE",
                       "TITLE"]
    assert rows[1] == ["me/ops", "owner", "9", "0", "grant", "grant", "-", "Ops"]
    assert rows[2] == ["bob/jobs", "yes", "2", "1", "open", "grant", "yes"]
    assert rows[3][:7] == ["bob/new", "yes", "0", "0", "?", "?", "?"]
    assert "no topic document yet" in rb.topics_table(topics).split("\n")[3]


def test_topic_details_lists_the_policy():
    t = {"topic": ALICE + "/jobs", "label": "alice/jobs", "owner": ALICE, "owner_name": "alice",
         "mine": False, "subscribed": True, "known": True, "records": 5, "posts": 3,
         "newest": 0, "unread": 1,
         "policy": {"seq": 2, "title": "Jobs", "read": "grant", "post": "grant", "keep": 10000,
                    "keep_days": 30, "keep_bytes": 67108864, "rate": 60, "max_post": 65536,
                    "queue": True, "lease_s": 300, "attempts": 3, "revoked": 1,
                    "banned": [BOB]}}
    text = rb.topic_details(t, {BOB: "mallory"})
    assert "  queue      yes: leases of 300s, 3 attempts an item" in text
    assert "  banned     mallory" in text and "  revoked    1 grant(s)" in text
    assert "64.0 MiB" in text and "64.0 KiB a post" in text
    t["policy"] = None
    assert "not known yet" in rb.topic_details(t)


def test_queue_table_names_holders():
    items = [
        {"item": post("a", "build 1"), "status": "claimed", "holder": BOB, "lease": "x.1",
         "until": NOW + 240_000, "attempts": 1},
        {"item": post("b", "build 2"), "status": "open", "holder": "", "attempts": 0},
        {"item": post("c", "build 3"), "status": "claimed", "holder": ALICE,
         "until": NOW - 1, "attempts": 2},
    ]
    rows = rb.queue_table(rb.queue_rows(items), {BOB: "bob"}, ALICE, NOW).split("\n")
    assert rows[0].split() == ["ITEM", "STATUS", "HOLDER", "UNTIL", "ATTEMPTS", "TEXT"]
    assert rows[1].split()[:3] == ["aaaaaaaaaa", "claimed", "bob"] and "(in 4m)" in rows[1]
    assert rows[2].split() == ["bbbbbbbbbb", "open", "-", "-", "0", "build", "2"]
    assert rows[3].split()[2] == "you" and "(ended)" in rows[3]


def test_who_and_until():
    assert rb.who("", {}) == "-"
    assert rb.who(BOB, {}) == "B" * 10
    assert rb.until_text(None) == "-"
    assert rb.until_text(NOW + 90_000, NOW).endswith("(in 1m)")
