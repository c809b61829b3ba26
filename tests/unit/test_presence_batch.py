"""Presence per link: the schedule (sans-I/O) and the batch line format."""

from __future__ import annotations

import json

from awp.node.presence_sched import CHANGE_S, HOP_BUDGET_S, RATE_S, PresenceSchedule
from awp.wire.keys import Identity
from awp.wire.presence import line_entries, presence_line, raw_elements, sign_doc
from awp.wire.timefmt import format_ts, now_ms


def _doc(ident: Identity, seq: int) -> str:
    return sign_doc(ident, {"origin": ident.key, "name": "x", "seq": seq,
                            "ts": format_ts(now_ms()), "peers": [], "threads": []})


def test_a_change_leaves_within_the_change_window():
    s = PresenceSchedule()
    s.add("L", "o1", "{}", 0, now=100.0, age_s=0, changed=True)
    assert s.next_due() == 100.0 + CHANGE_S
    assert s.take_due(100.0) == []
    assert s.take_due(100.0 + CHANGE_S) == [("L", [("o1", "{}", 0)])]
    assert s.next_due() is None


def test_heartbeats_share_the_next_line_and_newer_replaces_older():
    s = PresenceSchedule()
    s.add("L", "o1", "a", 1, now=0.0, age_s=0, changed=True)
    assert [x[0] for x in s.take_due(CHANGE_S)] == ["L"]
    # unchanged documents wait for the rate limit (well inside their deadline)
    s.add("L", "o2", "b1", 1, now=1.0, age_s=0, changed=False)
    s.add("L", "o3", "c", 2, now=2.0, age_s=0, changed=False)
    s.add("L", "o2", "b2", 1, now=3.0, age_s=0, changed=False)
    assert s.next_due() == CHANGE_S + RATE_S
    assert s.take_due(CHANGE_S + RATE_S - 0.01) == []
    (link, items), = s.take_due(CHANGE_S + RATE_S)
    assert link == "L" and sorted(items) == [("o2", "b2", 1), ("o3", "c", 2)]


def test_a_far_travelled_heartbeat_leaves_by_its_deadline():
    s = PresenceSchedule()
    s.add("L", "o", "x", 0, now=0.0, age_s=0, changed=True)
    s.take_due(1.0)  # a line just went out: the rate limit would say t=21
    s.add("L", "far", "y", 5, now=2.0, age_s=60.0, changed=False)
    # deadline: ts + 11 s * 6 = 66 s after ts; it is 60 s old, so 6 s from now
    assert s.next_due() == 2.0 + HOP_BUDGET_S * 6 - 60.0
    overdue = PresenceSchedule()
    overdue.add("L", "late", "z", 7, now=5.0, age_s=500.0, changed=False)
    assert overdue.next_due() == 5.0


def test_links_are_independent_and_dropped_links_forgotten():
    s = PresenceSchedule()
    s.add("B", "o", "x", 0, now=0.0, age_s=0, changed=False)
    assert [x[0] for x in s.take_due(0.0)] == ["B"]  # a link's first line goes at once
    s.add("A", "o", "x", 0, now=1.0, age_s=0, changed=True)
    s.add("B", "o", "x", 0, now=1.0, age_s=0, changed=False)
    assert [x[0] for x in s.take_due(1.0 + CHANGE_S)] == ["A"]
    s.drop("B")
    assert s.next_due() is None


def test_batch_line_carries_every_document_byte_for_byte():
    a, b, c = Identity.generate(), Identity.generate(), Identity.generate()
    da, db, dc = _doc(a, 1), _doc(b, 2), _doc(c, 3)
    db_spaced = db.replace('","', '", "')  # bytes our own writer would not produce
    raw = presence_line("01ARZ3NDEKTSV4RRFFQ69G5FAV", format_ts(now_ms()), 0, da,
                        [(3, db_spaced), (7, dc)]).decode()
    line = json.loads(raw)
    got = line_entries(raw, line, 100)
    assert [(h, r) for h, r, _ in got] == [(0, da), (3, db_spaced), (7, dc)]
    assert [d["origin"] for _, _, d in got] == [a.key, b.key, c.key]


def test_single_line_has_no_more_member():
    a = Identity.generate()
    raw = presence_line("01ARZ3NDEKTSV4RRFFQ69G5FAV", "2026-01-01T00:00:00.000Z", 2, _doc(a, 1))
    assert b'"more"' not in raw
    assert len(line_entries(raw.decode(), json.loads(raw), 10)) == 1


def test_malformed_batches_keep_what_is_well_formed():
    a = Identity.generate()
    da = _doc(a, 1)
    base = '{"t":"presence","id":"x","ts":"2026-01-01T00:00:00.000Z","hops":0,"doc":' + da
    for more, want in (
        (',"more":"nope"}', 1),                       # not an array
        (',"more":[{"hops":"one","doc":' + da + '}]}', 1),  # bad hops
        (',"more":[{"hops":1}]}', 1),                 # no doc
        (',"more":[5,{"hops":1,"doc":' + da + '}]}', 2),  # a stray element skipped
    ):
        text = base + more
        assert len(line_entries(text, json.loads(text), 10)) == want, more
    too_many = base + ',"more":[' + ",".join(['{"hops":1,"doc":' + da + '}'] * 5) + "]}"
    assert len(line_entries(too_many, json.loads(too_many), 3)) == 1  # over the limit: only doc


def test_raw_elements():
    assert raw_elements("[]", 5) == []
    assert raw_elements('[1, {"a": [2]} ,"x"]', 5) == ["1", '{"a": [2]}', '"x"']
    assert raw_elements("[1,]", 5) is None
    assert raw_elements("{}", 5) is None


def test_entries_with_hops_out_of_range_are_left_out_alone():
    ident = Identity.generate()
    da = _doc(ident, 1)
    line = presence_line("01J00000000000000000000000", "2026-11-29T10:00:00.000Z", 0, da)
    text = line.decode().rstrip("\n")[:-1] + ',"more":[' + ",".join(
        '{"hops":' + h + ',"doc":' + da + "}"
        for h in ("9223372036854775808", "true", "-1", "1.0", "9223372036854775807", "2")) + "]}"
    got = line_entries(text, json.loads(text), 10)
    assert [h for h, _raw, _doc in got] == [0, 2 ** 63 - 1, 2]
