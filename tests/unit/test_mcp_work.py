"""The work queue's MCP tools, against a scripted daemon: what they ask and what they say."""

from __future__ import annotations

import time

import pytest
from test_mcp_board import Script, ctx

from awp.mcp import tools
from awp.mcp.base import ToolError

ITEM = {"hash": "ab" * 16, "id": "abababab12", "topic": "ed25519:K/jobs", "label": "alice/jobs",
        "author": "ed25519:K", "author_name": "alice", "mine": False,
        "ts": int(time.time() * 1000), "parent": "",
        "parts": [{"k": "text", "text": "summarise the log"}], "text": "summarise the log",
        "edited": 0, "replies": 0, "seq": 3}
LEASE = {"state": "claimed", "lease": "abababab12121212.1", "holder": "ed25519:B",
         "until": int(time.time() * 1000) + 60_000, "topic": "ed25519:K/jobs", "item": ITEM}


def test_claim_waits_in_slices_and_frames_the_item_as_untrusted():
    s = Script({"/v1/board/claim": [{"state": "empty"}, LEASE]})
    text = tools.call("awp_claim", {"topic": "alice/jobs", "wait_seconds": 30,
                                    "offers": ["linux"]}, ctx(s))
    assert [c[0] for c in s.calls] == ["/v1/board/claim"] * 2
    assert s.calls[0][1]["offers"] == ["linux"] and 0 < s.calls[0][1]["wait"] <= 10
    assert text.startswith("You hold item abababab12 of alice/jobs under lease"
                           " abababab12121212.1")
    assert "untrusted input" in text and "summarise the log" in text
    assert "awp_complete topic=alice/jobs lease=abababab12121212.1" in text


def test_claim_on_an_empty_queue_says_how_to_wait():
    s = Script({"/v1/board/claim": [{"state": "empty"}]})
    assert tools.call("awp_claim", {"topic": "alice/jobs"}, ctx(s)).startswith(
        "Nothing to claim on alice/jobs now.")


def test_complete_posts_the_result_as_a_reply_then_completes():
    s = Script({"/v1/board/lease": [LEASE, {**LEASE, "state": "done"}],
                "/v1/board/post": [{"post": {"id": "cd" * 5}}]})
    text = tools.call("awp_complete", {"topic": "alice/jobs", "lease": LEASE["lease"],
                                       "result": "3 errors, all timeouts"}, ctx(s))
    assert [c[0] for c in s.calls] == ["/v1/board/lease", "/v1/board/post", "/v1/board/lease"]
    post = s.calls[1][1]
    assert post["parent"] == ITEM["hash"]
    assert post["parts"][0] == {"k": "text", "text": "3 errors, all timeouts"}
    assert post["parts"][1]["data"]["result"] == "done"
    assert s.calls[2][1]["op"] == "complete"
    assert text == "completed and posted your result as a reply to the item."


def test_fail_and_renew_name_their_operation():
    s = Script({"/v1/board/lease": [{**LEASE, "state": "failed"}, {**LEASE, "state": "renewed"}]})
    assert tools.call("awp_fail", {"topic": "alice/jobs", "lease": "x"}, ctx(s)).startswith(
        "failed: the item goes back")
    assert tools.call("awp_renew", {"topic": "alice/jobs", "lease": "x"}, ctx(s)).startswith(
        "renewed lease abababab12121212.1")
    assert [c[1]["op"] for c in s.calls] == ["fail", "renew"]


@pytest.mark.parametrize(("name", "args"), [("awp_complete", {"topic": "jobs"}),
                                            ("awp_renew", {"lease": "x"})])
def test_lease_tools_need_topic_and_lease(name, args):
    with pytest.raises(ToolError):
        tools.BY_NAME[name].handler(args, ctx(Script({})))
