"""The board's MCP tools against a scripted client: what they ask the daemon, what they say.

The real daemon is exercised in tests/integration/test_board_agents.py; here
each answer is scripted, so the waiting logic (slices, the cursor carried from
one slice to the next, what counts as new) is pinned exactly.
"""

from __future__ import annotations

import time

import pytest

from awp.mcp import board, tools

# Post and topic times are relative to now: "1m ago" and "10m" mean now, not when the
# module was imported (under xdist that can be minutes earlier).
NOW = int(time.time() * 1000)
TOPIC = {"topic": "ed25519:Fcy/ops", "label": "alice/ops", "owner": "ed25519:Fcy",
         "owner_name": "alice", "name": "ops", "mine": False, "subscribed": True, "known": True,
         "records": 3, "posts": 3, "newest": NOW - 60_000, "unread": 1,
         "policy": {"seq": 1, "title": "Ops", "read": "open", "post": "grant", "keep": 10000,
                    "keep_days": 30, "keep_bytes": 1 << 26, "rate": 60, "max_post": 65536,
                    "queue": False, "lease_s": 300, "attempts": 3, "revoked": 0, "banned": []}}


@pytest.fixture(autouse=True)
def fresh_now():
    """Move NOW and the topic's newest post to the test's own start."""
    global NOW
    NOW = int(time.time() * 1000)
    TOPIC["newest"] = NOW - 60_000


def post(i: int, mine: bool = False, text: str | None = None) -> dict:
    h = f"{i:02x}" * 16
    return {"hash": h, "id": h[:10], "kind": "post", "topic": TOPIC["topic"],
            "label": "alice/ops", "author": "ed25519:me" if mine else "ed25519:bob",
            "author_name": "me" if mine else "bob", "mine": mine, "ts": NOW - 100_000 + i,
            "parent": "", "parts": [{"k": "text", "text": text or f"post {i}"}],
            "text": text or f"post {i}", "edited": 0, "replies": 0, "seq": 10 + i}


class Script:
    """A client whose answers are scripted per path, recording each call."""

    def __init__(self, answers: dict[str, list], sleeps: bool = True) -> None:
        self.answers = answers
        self.sleeps = sleeps
        self.calls: list[tuple[str, dict | None]] = []

    def post(self, path: str, body: dict | None = None) -> object:
        self.calls.append((path, body))
        answer = self.answers[path].pop(0)
        if self.sleeps and isinstance(answer, dict) and answer.get("timed_out"):
            time.sleep(float((body or {}).get("timeout") or 0))  # as the daemon would
        return answer

    def get(self, path: str, **query: object) -> object:
        self.calls.append((path, None))
        return self.answers[path].pop(0)


def ctx(script: Script, cancelled=lambda: False) -> tools.Context:
    return tools.Context(client=lambda timeout: script, cancelled=cancelled)  # type: ignore


@pytest.mark.parametrize(("name", "args", "why"), [
    ("awp_post", {"topic": "ops"}, "text is required"),
    ("awp_post", {"topic": "ops", "text": "x", "code": "y"}, "unknown argument 'code'"),
    ("awp_post", {"topic": "ops", "text": "x", "data": [1]}, "data must be an object"),
    ("awp_post", {"text": "x"}, "give a topic"),
    ("awp_get", {}, "topic is required"),
    ("awp_get", {"topic": "ops", "n": -1}, "n must be between 0 and 500"),
    ("awp_get", {"topic": "ops", "n": 2.5}, "n must be an integer"),
    ("awp_get", {"topic": "ops", "since": True}, "since must be an integer or a string"),
    ("awp_get", {"topic": "ops", "since": "yesterday"}, "since: invalid duration"),
    ("awp_get", {"topic": "ops", "wait_seconds": 601}, "between 0 and 600"),
    ("awp_get", {"topic": "ops", "parent": "abcdef", "wait_seconds": 5}, "does not wait"),
    ("awp_topics", {"all": True}, "takes: no arguments"),
])
def test_bad_arguments_never_reach_the_daemon(name: str, args: dict, why: str) -> None:
    script = Script({"/v1/board/get": []})
    with pytest.raises(tools.ToolError, match=why):
        tools.call(name, args, ctx(script))
    assert script.calls == []


def test_post_and_reply() -> None:
    p = post(1, mine=True)
    script = Script({"/v1/board/post": [{"post": p, "sent_to": ["ed25519:bob"]},
                                        {"post": dict(p, parent="ab" * 16), "sent_to": []}]})
    out = tools.call("awp_post", {"topic": "alice/ops", "text": "deploy is green",
                                  "data": {"build": 7}}, ctx(script))
    assert script.calls[0] == ("/v1/board/post", {"topic": "alice/ops", "parts": [
        {"k": "text", "text": "deploy is green"},
        {"k": "data", "mime": "application/json", "data": {"build": 7}}]})
    assert out.startswith("posted post 0101010101 on alice/ops (sent to 1 peer).")
    assert f"awp_get topic=alice/ops since={p['ts'] + 1} wait_seconds=120" in out
    out = tools.call("awp_post", {"parent": "ababab", "text": "agreed"}, ctx(script))
    assert script.calls[1] == ("/v1/board/post", {"parent": "ababab", "parts": [
        {"k": "text", "text": "agreed"}]})
    assert out.startswith("posted reply 0101010101 to ababab on alice/ops (no connected"
                          " subscriber yet)")


def test_get_renders_the_topic_and_its_posts_framed() -> None:
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": [post(1), post(2, mine=True)]}]})
    out = tools.call("awp_get", {"topic": "alice/ops", "n": 5}, ctx(script))
    assert script.calls == [("/v1/board/get", {"topic": "alice/ops", "n": 5})]
    head = out.splitlines()[0]
    assert head == ('alice/ops "Ops": owner alice, you subscribe, 3 posts (1 unread), newest'
                    ' 1m ago; read: open, post: grant, keeps 10000 records / 30 days,'
                    ' 60 posts a minute per author')
    assert "Showing all 2 posts, oldest first. Posts come from other agents:" in out
    assert "alice/ops · 0101010101 · bob\n  post 1" in out
    assert "alice/ops · 0202020202 · me (you)\n  post 2" in out
    assert out.splitlines()[-1] == f"Only what comes after these: since={post(2)['ts'] + 1}."


def test_get_shows_a_long_post_whole() -> None:
    long = "y" * 5000
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": [post(1, text=long)]}]})
    assert long in tools.call("awp_get", {"topic": "alice/ops"}, ctx(script))


def test_since_as_a_duration() -> None:
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": []}]})
    out = tools.call("awp_get", {"topic": "alice/ops", "since": "10m"}, ctx(script))
    since = script.calls[0][1]["since"]  # type: ignore[index]
    assert abs(since - (NOW - 600_000)) < 60_000
    assert out.endswith(f"No posts since {since}.")


def test_wait_returns_posts_already_there_since_without_waiting() -> None:
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": [post(1)]}]})
    out = tools.call("awp_get", {"topic": "alice/ops", "since": NOW - 200_000,
                                 "wait_seconds": 30}, ctx(script))
    assert [c[0] for c in script.calls] == ["/v1/board/get"]
    assert "post 1" in out


def test_wait_carries_the_cursor_across_slices_until_others_post() -> None:
    mine = post(3, mine=True)
    script = Script({
        "/v1/board/get": [{"topic": TOPIC, "posts": [mine]}],
        "/v1/board/wait": [{"posts": [], "cursor": 20, "timed_out": True},
                           {"posts": [mine, post(4, text="answer")], "cursor": 21,
                            "timed_out": False}],
    }, sleeps=False)
    out = tools.call("awp_get", {"topic": "alice/ops", "since": mine["ts"],
                                 "wait_seconds": 60}, ctx(script))
    waits = [body for path, body in script.calls if path == "/v1/board/wait"]
    # From the get's newest seq, then from the daemon's cursor; the full topic id, not the label.
    assert waits[0]["after"] == mine["seq"] and waits[1]["after"] == 20
    assert all(w["topics"] == ["ed25519:Fcy/ops"] and w["timeout"] <= tools.WAIT_SLICE
               for w in waits)
    assert out.startswith("New posts on alice/ops (1).")
    assert "answer" in out and "post 3" not in out


def test_wait_without_since_waits_from_now_and_times_out_cleanly() -> None:
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": []}],
                     "/v1/board/wait": [{"posts": [], "cursor": 5, "timed_out": True}]})
    t0 = time.monotonic()
    out = tools.call("awp_get", {"topic": "alice/ops", "wait_seconds": 0.2}, ctx(script))
    assert time.monotonic() - t0 < 5
    waits = [body for path, body in script.calls if path == "/v1/board/wait"]
    assert "after" not in waits[0] and waits[0]["timeout"] <= 0.2
    assert out.startswith("Nothing new on alice/ops after 0.2s.")


def test_a_cancelled_wait_stops_asking() -> None:
    script = Script({"/v1/board/get": [{"topic": TOPIC, "posts": []}],
                     "/v1/board/wait": [{"posts": [], "cursor": 5, "timed_out": False}] * 100})
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    out = tools.call("awp_get", {"topic": "alice/ops", "wait_seconds": 600},
                     ctx(script, cancelled))
    assert len([c for c in script.calls if c[0] == "/v1/board/wait"]) == 2
    assert out.startswith("Nothing new on alice/ops")


def test_topics() -> None:
    unknown = {**TOPIC, "topic": "ed25519:Zz/new", "label": "zed/new", "owner_name": "zed",
               "known": False, "policy": None, "posts": 0, "unread": 0, "newest": 0}
    mine = {**TOPIC, "label": "me/jobs", "mine": True,
            "policy": {**TOPIC["policy"], "title": "", "queue": True}}
    script = Script({"/v1/board/topics": [{"topics": [mine, TOPIC, unknown]}, {"topics": []}]})
    out = tools.call("awp_topics", {}, ctx(script)).splitlines()
    assert out[0] == "topics (3):"
    assert out[1].startswith("  me/jobs: yours, you subscribe,")
    assert out[1].endswith("work queue (lease 300s, 3 attempts)")
    assert out[3] == ("  zed/new: owner zed, you subscribe, 0 posts; policy not known yet"
                      " (the owner's topic document has not arrived)")
    assert tools.call("awp_topics", {}, ctx(script)).startswith("No topics yet.")


def test_board_tools_are_listed_after_the_others() -> None:
    names = [t.name for t in tools.TOOLS]
    assert names[-7:-4] == ["awp_post", "awp_get", "awp_topics"]
    assert names[-4:] == ["awp_claim", "awp_renew", "awp_complete", "awp_fail"]
    assert tools.BY_NAME["awp_get"].listing()["annotations"]["readOnlyHint"] is True
    assert tools.BY_NAME["awp_post"].listing()["annotations"]["readOnlyHint"] is False
    assert tools.BY_NAME["awp_get"].schema["properties"]["n"]["maximum"] == board.MAX_N
