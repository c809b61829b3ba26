"""The board's replication rules (awp.board.replica), on a fake clock, without I/O."""

from __future__ import annotations

from awp.board import replica_actions as A
from awp.board.replica import HEAD_HOPS, HOPS_CAP, MAX_SUBS, MAX_WANT, Replica, next_hops

ME = "m" * 43
LOW, HIGH, THIRD = "a" * 43, "z" * 43, "q" * 43  # keys below and above ours
OWNER = "o" * 43
TOPIC = f"{OWNER}/chat"
MINE = f"{ME}/notes"


def newer(a: dict, b: dict) -> bool:
    return a["ts"] > b["ts"]


def head(ts: int, sig: str = "s") -> dict:
    return {"topic": TOPIC, "ts": ts, "sig": f"{sig}{ts}"}


def linked(*keys: str, topics: tuple[str, ...] = (TOPIC,)) -> Replica:
    r = Replica(ME, now=0.0)
    r.subs.update(topics)
    for k in keys:
        r.link_up(k)
        list(r.on_sub(k, [(t, None, None) for t in topics], []))
    return r


def names(actions: list[tuple]) -> list[str]:
    return [a[0] for a in actions]


# -- link up, link down -------------------------------------------------------------------


def test_a_new_link_gets_our_subscriptions():
    r = Replica(ME, now=0.0)
    r.subs.update({TOPIC, MINE})
    assert r.link_up(LOW) == [(A.SUB, [LOW], sorted([TOPIC, MINE]), [])]


def test_on_connect_the_smaller_key_opens_and_a_later_sub_is_answered_by_its_receiver():
    r = Replica(ME, now=0.0)
    r.subs.add(TOPIC)
    r.link_up(LOW)
    r.link_up(HIGH)
    first_low = list(r.on_sub(LOW, [(TOPIC, None, None)], []))
    first_high = list(r.on_sub(HIGH, [(TOPIC, None, None)], []))
    assert (A.OPEN, LOW, TOPIC) not in first_low  # LOW's key is smaller: it opens
    assert (A.OPEN, HIGH, TOPIC) in first_high  # ours is smaller: we open
    assert first_low[0] == (A.HEARD, LOW, [TOPIC], [])
    later = list(r.on_sub(LOW, [(TOPIC, "g", None)], []))
    assert (A.OPEN, LOW, TOPIC) in later  # a later board-sub: whoever receives it answers
    assert r.peers[LOW].subs[TOPIC] == ("g", None)


def test_a_sub_for_a_topic_of_ours_we_do_not_hold_gets_none_unless_the_link_is_full():
    r = Replica(ME, now=0.0)
    r.link_up(LOW)
    ghost = f"{ME}/ghost"
    assert (A.NONE, LOW, ghost) in list(r.on_sub(LOW, [(ghost, None, None)], []))
    assert not [a for a in r.on_sub(LOW, [(ghost, None, None)], [], full=lambda: True)
                if a[0] == A.NONE]


def test_a_full_link_resyncs_later_instead_of_answering_now():
    r = Replica(ME, now=0.0)
    r.subs.add(TOPIC)
    r.link_up(HIGH)
    acts = list(r.on_sub(HIGH, [(TOPIC, None, None)], [], full=lambda: True))
    assert names(acts) == [A.HEARD, A.RESYNC]


def test_a_reader_that_may_not_read_gets_the_document_but_no_head_or_digest():
    r = linked(HIGH)
    r.heads[TOPIC] = head(5)
    acts = list(r.on_sub(HIGH, [(TOPIC, None, None)], [], may_read=lambda k, t: False))
    assert names(acts) == [A.HEARD, A.DOC]
    acts = list(r.on_sub(HIGH, [(TOPIC, None, None)], []))
    assert names(acts) == [A.HEARD, A.DOC, A.HEAD, A.OPEN]


def test_a_peer_cannot_make_us_remember_topics_without_end():
    r = Replica(ME, now=0.0)
    r.link_up(LOW)
    for i in range(6):
        list(r.on_sub(LOW, [(f"{OWNER}/t{i}-{j}", None, None) for j in range(MAX_SUBS)], []))
    assert len(r.peers[LOW].subs) == 4 * MAX_SUBS
    assert f"{OWNER}/t5-0" in r.peers[LOW].subs and f"{OWNER}/t0-0" not in r.peers[LOW].subs


def test_a_link_that_went_down_gets_nothing_and_coming_back_resyncs():
    r = linked(LOW, HIGH)
    r.link_down(HIGH)
    assert r.stored(TOPIC, ["rec"], 0, via=THIRD) == [(A.FORWARD, TOPIC, ["rec"], 1, [LOW])]
    assert r.link_up(HIGH) == [(A.SUB, [HIGH], [TOPIC], [])]
    acts = list(r.on_sub(HIGH, [(TOPIC, None, None)], []))
    assert (A.OPEN, HIGH, TOPIC) in acts  # a fresh link: the smaller key compares again


def test_dropped_topics_stop_forwarding():
    r = linked(LOW, HIGH)
    list(r.on_sub(LOW, [], [TOPIC]))
    assert r.readers(TOPIC) == [HIGH]


# -- take, dedupe, forward -----------------------------------------------------------------


def test_new_records_go_to_every_other_link_that_lists_the_topic_not_back_to_the_source():
    r = linked(LOW, HIGH, THIRD)
    list(r.on_sub(THIRD, [], [TOPIC]))
    assert r.stored(TOPIC, ["x", "y"], 3, via=LOW) == [(A.FORWARD, TOPIC, ["x", "y"], 4, [HIGH])]


def test_what_the_store_already_held_ends_here():
    r = linked(LOW, HIGH)
    assert r.stored(TOPIC, [], 3, via=LOW) == []


def test_our_own_records_leave_with_hops_zero_to_every_link():
    r = linked(LOW, HIGH)
    assert r.stored(TOPIC, ["x"], 9) == [(A.FORWARD, TOPIC, ["x"], 0, [LOW, HIGH])]


def test_hops_saturate():
    assert next_hops(HOPS_CAP) == HOPS_CAP
    assert next_hops(HOPS_CAP - 1) == HOPS_CAP


def test_a_new_document_goes_on_and_every_link_compares_again():
    r = linked(LOW, HIGH)
    acts = r.stored_doc(TOPIC, "doc", 0, via=LOW)
    assert acts == [(A.RESYNC, LOW, [TOPIC]), (A.RESYNC, HIGH, [TOPIC]),
                    (A.FORWARD_DOC, TOPIC, "doc", 1, [HIGH])]


# -- heads and gaps --------------------------------------------------------------------------


def test_a_newer_head_is_kept_passed_on_and_checked_later():
    r = linked(LOW, HIGH)
    h = head(10)
    acts = r.on_head(LOW, h, 2, newer=newer)
    assert acts == [(A.KEEP_HEAD, h), (A.HEAD, TOPIC, h, 3, [HIGH]),
                    (A.WAIT_GAP, TOPIC, r.gap_wait_s)]
    assert r.head_via[TOPIC] == LOW


def test_the_same_head_again_is_not_news_and_an_older_one_is_counted():
    r = linked(LOW, HIGH)
    r.on_head(LOW, head(10), 0, newer=newer)
    assert r.on_head(HIGH, head(10), 0, newer=newer) == []
    assert r.on_head(HIGH, head(9, "other"), 0, newer=newer) == [(A.STAT, "heads_old")]
    assert r.heads[TOPIC] == head(10)


def test_heads_are_bounded_in_hops_and_ignored_for_topics_we_do_not_follow():
    r = linked(LOW, HIGH)
    assert r.on_head(LOW, head(10), HEAD_HOPS, newer=newer) == []
    assert r.on_head(LOW, head(10), True, newer=newer) == []
    assert r.on_head(LOW, dict(head(10), topic=f"{OWNER}/other"), 0, newer=newer) == []
    r.subs.add(MINE)
    assert r.on_head(LOW, dict(head(10), topic=MINE), 0, newer=newer) == []


def test_one_gap_check_a_topic_at_a_time_against_the_head_it_began_with():
    r = linked(LOW, HIGH)
    first = head(10)
    r.on_head(LOW, first, 0, newer=newer)
    acts = r.on_head(LOW, head(11), 0, newer=newer)
    assert A.WAIT_GAP not in names(acts)
    assert r.gap_due(TOPIC) == [(A.CHECK_GAP, TOPIC, first)]
    assert r.gap_due(TOPIC) == []
    assert A.WAIT_GAP in names(r.on_head(LOW, head(12), 0, newer=newer))


def test_a_gap_asks_every_peer_again_and_no_gap_explains():
    r = linked(LOW, HIGH)
    h = head(10)
    assert r.gap_checked(TOPIC, h, True) == [(A.STAT, "head_gaps"),
                                             (A.SUB, [LOW, HIGH], [TOPIC], [])]
    assert r.gap_checked(TOPIC, h, False) == [(A.EXPLAINED, TOPIC, h)]


def test_an_owner_signs_changed_topics_and_idle_ones_every_period():
    r = linked(LOW, topics=(MINE, TOPIC))
    assert r.heads_due(0.0, 60.0) == [MINE]  # never signed: due at once
    assert r.heads_due(2.0, 60.0) == []
    r.stored(MINE, ["x"], 0)
    r.stored(TOPIC, ["y"], 0, via=LOW)  # not ours: no head of it
    assert r.heads_due(4.0, 60.0) == [MINE]
    assert r.heads_due(63.0, 60.0) == []
    assert r.heads_due(64.0, 60.0) == [MINE]
    r.changed(MINE)
    assert r.heads_due(65.0, 0) == [MINE]  # every 0: changed ones only
    assert r.heads_due(999.0, 0) == []
    acts = r.signed_head(MINE, {"topic": MINE})
    assert acts == [(A.HEAD, MINE, {"topic": MINE}, 0, [LOW])]


# -- anti-entropy ----------------------------------------------------------------------------


def test_every_link_resyncs_its_shared_topics_each_period_on_the_clock():
    r = linked(LOW, HIGH)
    list(r.on_sub(HIGH, [(f"{OWNER}/unshared", None, None)], []))
    r.start(100.0)
    assert r.tick(100.0 + r.resync_s - 0.001) == []
    acts = r.tick(100.0 + r.resync_s)
    assert acts == [(A.RESYNC, LOW, [TOPIC]), (A.RESYNC, HIGH, [TOPIC])]
    assert r.tick(100.0 + r.resync_s + 1) == []


def test_a_digest_step_replies_pushes_to_that_link_and_asks_in_bounded_wants():
    r = linked(LOW, HIGH)
    want = [f"{i:032x}" for i in range(MAX_WANT + 3)]
    acts = r.digest_step(LOW, TOPIC, {"floor": 0, "ranges": []}, ["p"], want, True)
    assert names(acts) == [A.DIGEST, A.RESYNC, A.FORWARD, A.WANT, A.WANT]
    assert acts[2] == (A.FORWARD, TOPIC, ["p"], 0, [LOW])
    assert [len(a[3]) for a in acts[3:]] == [MAX_WANT, 3]
    assert r.digest_step(LOW, TOPIC, None, [], [], False) == []


def test_subscribing_tells_every_link_and_unsubscribing_drops():
    r = linked(LOW, HIGH)
    list(r.on_sub(LOW, [(f"{OWNER}/new", None, None)], []))
    acts = r.subscribe(f"{OWNER}/new")
    assert acts == [(A.SUB, [LOW, HIGH], [f"{OWNER}/new"], []),
                    (A.HEARD, LOW, [f"{OWNER}/new"], [])]
    assert r.subscribe(f"{OWNER}/new") == []
    assert r.unsubscribe(f"{OWNER}/new") == [(A.SUB, [LOW, HIGH], [], [f"{OWNER}/new"])]
    assert r.unsubscribe(f"{OWNER}/new") == []


# -- staleness ---------------------------------------------------------------------------


def ts_of(h: dict) -> int:
    return h["ts"]


def test_a_topic_whose_heads_stopped_is_said_stale_once_and_asked_for_every_few_heads():
    r = linked(LOW, HIGH)
    r.on_head(LOW, dict(head(1_000), every=10_000), 0, newer=newer)
    assert r.stale(TOPIC, 1_000 + 29_999, 3, ts_of) is None  # under three heads overdue
    assert r.judge_staleness(100.0, 1_000 + 29_999, 3, ts_of) == []
    st = {"since": 1_000, "via": LOW, "heads": 3}
    assert r.stale(TOPIC, 1_000 + 30_000, 3, ts_of) == st
    first = r.judge_staleness(100.0, 1_000 + 30_000, 3, ts_of)
    assert first == [(A.STALE, TOPIC, st), (A.SUB, [LOW, HIGH], [TOPIC], [])]
    assert r.judge_staleness(129.0, 1_000 + 59_000, 3, ts_of) == []  # asked 29 s ago
    again = r.judge_staleness(130.0, 1_000 + 60_000, 3, ts_of)
    assert again == [(A.SUB, [LOW, HIGH], [TOPIC], [])]  # said once, asked again
    r.on_head(HIGH, dict(head(61_000), every=10_000), 0, newer=newer)  # heads come again
    assert r.judge_staleness(131.0, 61_500, 3, ts_of) == []
    r.on_head(HIGH, dict(head(61_001), every=0), 0, newer=newer)
    assert r.stale(TOPIC, 10 ** 9, 3, ts_of) is None  # an owner that promised nothing
