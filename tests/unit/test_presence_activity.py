"""Activity is not news to rush: when a changed presence document is signed."""

from __future__ import annotations

from awp.node.presence import (
    ACTIVITY_S,
    HEARTBEAT,
    activity_digest,
    content_digest,
    publish_reason,
)

DOC = {"origin": "ed25519:x", "name": "a", "seq": 1, "ts": "t", "sig": "s",
       "active": "2026-12-01T10:00:00Z", "waiting": False, "peers": [{"key": "k", "rtt": 3}]}


def test_activity_alone_does_not_change_what_a_document_says():
    busy = dict(DOC, active="2026-12-01T10:00:30Z", waiting=True, seq=2, ts="u")
    assert content_digest(busy) == content_digest(DOC)
    assert activity_digest(busy) != activity_digest(DOC)
    renamed = dict(DOC, name="b")
    assert content_digest(renamed) != content_digest(DOC)
    assert activity_digest(renamed) == activity_digest(DOC)


def test_a_real_change_goes_at_once_whatever_was_sent_lately():
    assert publish_reason(True, False, 0.1) == "changed"
    assert publish_reason(True, True, 0.0) == "changed"


def test_activity_is_signed_at_most_once_per_interval():
    assert publish_reason(False, True, 0.5) == ""
    assert publish_reason(False, True, ACTIVITY_S - 1.5) == ""
    assert publish_reason(False, True, ACTIVITY_S) == "activity"
    assert publish_reason(False, True, float("inf")) == "activity"


def test_activity_costs_no_document_beyond_the_heartbeats():
    assert ACTIVITY_S >= HEARTBEAT
    assert publish_reason(False, False, HEARTBEAT - 1.5) == ""
    assert publish_reason(False, False, HEARTBEAT) == "heartbeat"
