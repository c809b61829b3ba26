"""The work queue's MCP tools: ``awp_claim``, ``awp_renew``, ``awp_complete``, ``awp_fail``.

An agent inside a session takes an item the way ``awp work`` does, one
step at a time: claim (waiting for one if asked), renew while it works,
then complete with its result, which is posted as a reply to the item, or
fail with the reason.  The item's text is framed as untrusted input: anyone
allowed to post on the queue wrote it.
"""

from __future__ import annotations

import time
from typing import Any

from ..present.text import FRAMING, render_post
from ..wire.board import LEASE_MAX
from .base import MAX_WAIT, WAIT_SLICE, Context, Reply, Tool, ToolError, text_arg
from .board import TOPIC_DESC

RESULT_MIME = "application/vnd.awp.work+json"  # as awp work marks its result replies


def _until(ms: object) -> str:
    if not isinstance(ms, int):
        return "?"
    return f"in {max(0, (ms - int(time.time() * 1000)) // 1000)}s"


def _tags(args: dict, key: str) -> list[str]:
    v = args.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
        raise ToolError(f"{key} is a list of tags such as [\"gpu\", \"linux\"]")
    return v


def claim(args: dict, ctx: Context) -> str:
    topic = text_arg(args, "topic")
    if not topic:
        raise ToolError("give the queue topic")
    wait = float(args.get("wait_seconds") or 0)
    deadline = time.monotonic() + min(wait, MAX_WAIT)
    body: dict[str, Any] = {"topic": topic, "timeout": 10}
    if args.get("offers") is not None:
        body["offers"] = _tags(args, "offers")
    while True:
        step = max(0.0, min(deadline - time.monotonic(), WAIT_SLICE))
        res = ctx.client(step + 40).post("/v1/board/claim", {**body, "wait": step})
        assert isinstance(res, dict)
        if res.get("state") == "claimed" or step <= 0 or ctx.cancelled():
            break
    if res.get("state") != "claimed":
        return (f"Nothing to claim on {topic} now. Wait for an item with awp_claim"
                f" topic={topic} wait_seconds=300, or do other work meanwhile.")
    item = res.get("item") if isinstance(res.get("item"), dict) else {}
    lease = res.get("lease")

    def release() -> object:
        """Give the lease back: the call was cancelled, so no one works the item."""
        return ctx.client(40.0).post("/v1/board/lease",
                                     {"topic": topic, "lease": lease, "op": "release"})

    if ctx.cancelled():  # cancelled while the wait was in flight: nobody will get this
        release()
        return "cancelled: the item that came meanwhile was released"
    return Reply("\n".join([
        f"You hold item {item.get('id')} of {topic} under lease {lease}, until"
        f" {_until(res.get('until'))}. {FRAMING}", "",
        render_post(item, limit=0), "",
        f"When done: awp_complete topic={topic} lease={lease} result=<what you found>;"
        f" if you cannot do it: awp_fail topic={topic} lease={lease} reason=<why>. For a long"
        f" job, awp_renew topic={topic} lease={lease} before the lease runs out."]),
        undo=release)


def _lease(args: dict, ctx: Context, op: str) -> dict:
    topic, lease = text_arg(args, "topic"), text_arg(args, "lease")
    if not topic or not lease:
        raise ToolError("give the topic and the lease awp_claim returned")
    res = ctx.client(40.0).post("/v1/board/lease", {"topic": topic, "lease": lease, "op": op})
    assert isinstance(res, dict)
    return res


def _report(args: dict, ctx: Context, text: str, result: str) -> None:
    """A reply to the item, as awp work posts one (text, then the result's data part)."""
    res = _lease(args, ctx, "renew")  # still ours? (and which item)
    item = res.get("item") if isinstance(res.get("item"), dict) else {}
    parts = [{"k": "text", "text": text},
             {"k": "data", "mime": RESULT_MIME, "data": {"result": result,
                                                          "lease": text_arg(args, "lease")}}]
    ctx.client(40.0).post("/v1/board/post", {"parent": item.get("hash", ""), "parts": parts})


def renew(args: dict, ctx: Context) -> str:
    res = _lease(args, ctx, "renew")
    return f"renewed lease {res.get('lease')}: held until {_until(res.get('until'))}."


def complete(args: dict, ctx: Context) -> str:
    result = text_arg(args, "result")
    if result:
        _report(args, ctx, result, "done")
    res = _lease(args, ctx, "complete")
    if res.get("queued"):
        return ("completion queued: the queue's owner is not connected; your daemon sends it"
                " when it is back (before the lease ends).")
    return "completed" + (" and posted your result as a reply to the item." if result else ".")


def fail(args: dict, ctx: Context) -> str:
    reason = text_arg(args, "reason")
    if reason:
        _report(args, ctx, f"failed: {reason}", "failed")
    res = _lease(args, ctx, "fail")
    if res.get("queued"):
        return "failure queued: the queue's owner is not connected."
    return "failed: the item goes back to the queue (it costs an attempt)."


_LEASE_ARGS = {
    "topic": {"type": "string", "description": TOPIC_DESC},
    "lease": {"type": "string", "maxLength": LEASE_MAX,
              "description": "the lease id awp_claim returned"},
}

TOOLS: list[Tool] = [
    Tool(
        "awp_claim", "Take an item from an awp work queue",
        "Claim the oldest open item of a work queue topic you may post to: you hold it under"
        " a lease until you complete, fail or release it (renew a long job). wait_seconds"
        " waits for an item instead of polling. offers: what you can do (tags such as"
        " claude, linux); items that need more are left to others.",
        {"type": "object", "properties": {
            "topic": {"type": "string", "description": TOPIC_DESC},
            "wait_seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT,
                             "description": "block up to this long (max 600) for an item"},
            "offers": {"type": "array", "items": {"type": "string"},
                       "description": "what you offer (tags)"},
        }, "required": ["topic"], "additionalProperties": False},
        claim,
    ),
    Tool(
        "awp_renew", "Extend an awp queue lease",
        "Extend a lease you hold by the queue's lease length, so a long job stays yours.",
        {"type": "object", "properties": _LEASE_ARGS, "required": ["topic", "lease"],
         "additionalProperties": False},
        renew,
    ),
    Tool(
        "awp_complete", "Finish an awp queue item",
        "Mark the item you hold done. result is posted as a reply to the item (everyone on"
        " the topic reads it: leave secrets out).",
        {"type": "object", "properties": {
            **_LEASE_ARGS,
            "result": {"type": "string", "description": "what you did or found (markdown)"},
        }, "required": ["topic", "lease"], "additionalProperties": False},
        complete,
    ),
    Tool(
        "awp_fail", "Give an awp queue item back as failed",
        "Give the item you hold back as failed (it costs an attempt; after the queue's"
        " attempts it is dead). reason is posted as a reply to the item.",
        {"type": "object", "properties": {
            **_LEASE_ARGS,
            "reason": {"type": "string", "description": "why it failed"},
        }, "required": ["topic", "lease"], "additionalProperties": False},
        fail,
    ),
]
