"""The session core's delivery rules, driven with a fake clock and no sockets.

Each test feeds :class:`awp.node.session.Session` lines, store results and
the time, and checks the actions it answers with: what is stored, what is
written and in which order, what the engine is told, when it closes.  The
subprocess tests (tests/integration/test_protocol_*.py) prove the whole;
these pin each rule of SPEC.md on its own, in milliseconds.
"""

from __future__ import annotations

import json

import pytest

from awp.node.session import CLOSED, CLOSING, OPEN, PAUSE, REFUSED, RESUMED, Session
from awp.node.session import actions as A
from awp.wire.messages import dump


class Ids:
    """Ids in increasing order, like the real generator."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"01OURS{self.n:020d}"

    def next_run(self, n: int) -> list[str]:
        return [self.next() for _ in range(n)]


def _session(now: float = 100.0, **kw) -> Session:
    kw.setdefault("gap_timeout", 15.0)
    kw.setdefault("ping_interval", 30.0)
    kw.setdefault("resume_wait", 1000.0)  # out of the way unless the test is about it
    s = Session(Ids(), now=now, clock_ms=lambda: 1_700_000_000_000, **kw)
    s.start(now)
    return s


def _id(n: int) -> str:
    return f"01PEER{n:020d}"


def msg(n: int, th: str = "th1") -> bytes:
    return dump({"t": "msg", "id": _id(n), "ts": "2026-01-01T00:00:00.000Z", "th": th,
                 "parts": [{"type": "text", "text": f"m{n}"}]})[:-1]


def line(t: str, **kw) -> bytes:
    return dump({"t": t, "id": kw.pop("id", _id(900 + len(kw))),
                 "ts": "2026-01-01T00:00:00.000Z", **kw})[:-1]


def drain(s: Session, now: float = 100.0) -> list[tuple]:
    out = []
    while (act := s.next_action(now)) is not None:
        assert act is not PAUSE, "unexpected pause"
        out.append(act)
    return out


def sent(acts: list[tuple]) -> list[dict]:
    """The lines of every SEND action, parsed, in order."""
    out = []
    for a in acts:
        if a[0] == A.SEND:
            out.extend(json.loads(x) for x in a[1].splitlines())
    return out


def acked(acts: list[tuple]) -> list[str]:
    return [x["re"] for x in sent(acts) if x["t"] == "ack"]


def ok(n: int) -> list:
    return [(10 + i, []) for i in range(n)]


# -- dispatch and runs -----------------------------------------------------------------


def test_content_lines_are_stored_as_one_run_and_not_acked_before_done():
    s = _session()
    s.receive([msg(1), msg(2), msg(3)], 100.0)
    (act,) = drain(s)
    assert act[0] == A.STORE_RUN
    assert [ln["id"] for ln, _raw in act[2]] == [_id(1), _id(2), _id(3)]
    assert s.inflight == 3
    # nothing is acked until the store says so
    assert s.next_action(100.0) is None
    acts = s.done(act[1], ok(3))
    assert acked(acts) == [_id(1), _id(2), _id(3)]
    assert [a[2] for a in acts if a[0] == A.COMMITTED] == [10, 11, 12]
    assert s.inflight == 0


def test_runs_are_capped_and_other_lines_end_them_in_order():
    s = _session(run_lines=2)
    ack = line("ack", id=_id(50), th="th1", re="01OURS1")
    s.receive([msg(1), msg(2), msg(3), ack, msg(4), line("ping", id=_id(51))], 100.0)
    acts = drain(s)
    kinds = [a[0] for a in acts]
    assert kinds == [A.STORE_RUN, A.STORE_RUN, A.APPLY_ACKS, A.STORE_RUN, A.SEND]
    assert [len(a[2]) for a in acts if a[0] == A.STORE_RUN] == [2, 1, 1]
    assert acts[2][2] == [("th1", "01OURS1")]
    assert sent([acts[4]])[0] == {**sent([acts[4]])[0], "t": "pong", "re": _id(51)}


def test_unknown_types_go_to_the_extensions_and_the_connection_stays():
    s = _session()
    raw = line("presence", id=_id(7), doc={})
    s.receive([raw], 100.0)
    (act,) = drain(s)
    assert act[0] == A.OTHER and act[1]["t"] == "presence" and act[2] == raw
    assert s.state == OPEN


def test_a_bad_line_is_refused_after_the_lines_before_it_and_ends_intake():
    s = _session()
    s.receive([msg(1), b'{"t": "msg", "id": 1', msg(2)], 100.0)
    acts = drain(s)
    assert [a[0] for a in acts] == [A.STORE_RUN, A.REFUSE]
    assert acts[1][1] == "bad_frame"
    s.receive([msg(3)], 101.0)  # nothing more is taken
    assert s.next_action(101.0) is None
    # the line before the bad one is still acked once stored
    assert acked(s.done(acts[0][1], ok(1))) == [_id(1)]


# -- ack only after durable, in arrival order --------------------------------------------


def test_acks_keep_arrival_order_when_jobs_finish_out_of_order():
    s = _session()
    s.receive([msg(1)], 100.0)
    (first,) = drain(s)
    s.receive([line("grant", id=_id(60), grant={})], 100.0)
    (grant,) = drain(s)
    s.receive([msg(2)], 100.0)
    (second,) = drain(s)
    assert s.done(second[1], ok(1)) == []  # waits for the older jobs
    assert s.done(grant[1], 1) == []
    acts = s.done(first[1], ok(1))
    assert acked(acts) == [_id(1), _id(2)]
    # the grant's follow-up comes between the two lines', as the lines arrived
    kinds = [a[0] for a in acts]
    assert kinds.index(A.GRANTS) < [i for i, a in enumerate(acts)
                                    if a[0] == A.SEND and b'"ack"' in a[1]][1]


def test_a_lone_line_durable_in_the_journal_is_acked_then_not_again():
    s = _session()
    s.receive([msg(1)], 100.0)
    (act,) = drain(s)
    early = s.durable(act[1])
    assert acked(early) == [_id(1)]
    later = s.done(act[1], ok(1))
    assert acked(later) == []
    assert [a[0] for a in later] == [A.COMMITTED]


def test_durable_never_lets_an_ack_overtake_an_older_line():
    s = _session()
    s.receive([msg(1)], 100.0)
    (first,) = drain(s)
    s.receive([msg(2)], 100.0)
    (second,) = drain(s)
    assert s.durable(second[1]) == []  # not at the head: waits for its commit
    assert acked(s.done(first[1], ok(1))) == [_id(1)]
    assert acked(s.done(second[1], ok(1))) == [_id(2)]


def test_a_line_refused_over_a_budget_gets_its_err_and_no_ack():
    s = _session()
    s.receive([msg(1), msg(2)], 100.0)
    (act,) = drain(s)
    err = {"t": "err", "code": "quota", "re": _id(2), "detail": "log budget is used up"}
    acts = s.done(act[1], [(10, []), (REFUSED, [err])])
    assert acked(acts) == [_id(1)]
    errs = [x for x in sent(acts) if x["t"] == "err"]
    assert errs and errs[0]["code"] == "quota" and errs[0]["re"] == _id(2)
    assert [a[1]["id"] for a in acts if a[0] == A.COMMITTED] == [_id(1)]


def test_a_duplicate_is_acked_again_so_the_peer_drops_it():
    s = _session()
    s.receive([msg(1)], 100.0)
    (act,) = drain(s)
    acts = s.done(act[1], [(0, [])])  # seq 0: the store had it already
    assert acked(acts) == [_id(1)]
    assert [a[2] for a in acts if a[0] == A.COMMITTED] == [0]


def test_a_failed_store_is_never_acked_and_closes():
    s = _session()
    s.receive([msg(1), msg(2)], 100.0)
    (act,) = drain(s)
    acts = s.failed(act[1])
    assert acked(acts) == []
    (err,) = sent(acts)
    assert err["code"] == "internal" and err["re"] == _id(1)
    assert acts[-1] == (A.CLOSE, "store failure")
    assert s.state == CLOSED


def test_replies_and_effects_follow_the_ack():
    s = _session()
    s.receive([msg(1)], 100.0)
    (act,) = drain(s)
    work = object()
    acts = s.done(act[1], [(10, [{"t": "err", "code": "blob_refused", "re": _id(1)}, work])])
    assert [a[0] for a in acts] == [A.SEND, A.FLUSH, A.SEND, A.EFFECT, A.COMMITTED]
    assert sent(acts)[0]["t"] == "ack" and sent(acts)[1]["code"] == "blob_refused"
    assert acts[3][1] is work


def test_too_many_lines_waiting_for_the_store_pause_intake():
    s = _session(inflight_lines=2, run_lines=2)
    s.receive([msg(1), msg(2), msg(3)], 100.0)
    first = s.next_action(100.0)
    assert first[0] == A.STORE_RUN and len(first[2]) == 2
    assert s.next_action(100.0) is PAUSE
    assert s.next_action(100.0) is PAUSE  # still, until the store is done
    s.done(first[1], ok(2))
    second = s.next_action(100.0)
    assert second[0] == A.STORE_RUN and [ln["id"] for ln, _ in second[2]] == [_id(3)]


def test_chunks_grants_and_introduce_follow_up_in_order():
    s = _session()
    s.receive([line("chunk", id=_id(1), ref="r", n=0, data=""),
               line("introduce", id=_id(2), peer={}),
               line("grant", id=_id(3), grant={})], 100.0)
    chunk, intro, grant = drain(s)
    assert (chunk[0], intro[0], grant[0]) == (A.STORE_CHUNK, A.STORE_INTRODUCE, A.STORE_GRANT)
    assert s.done(grant[1], 1) == [] and s.done(intro[1], 1) == []
    acts = s.done(chunk[1], [{"t": "err", "code": "blob_refused"}])
    assert [a[0] for a in acts] == [A.CHUNK_DONE, A.SEND, A.INTRODUCED, A.GRANTS]
    assert s.done(s._job("introduce", None), 0) == []  # nothing new: nothing to tell


def test_acks_of_our_lines_are_applied_in_one_job_and_told_to_the_engine():
    s = _session()
    s.receive([line("ack", id=_id(1), th="a", re="01OURS9"),
               line("ack", id=_id(2), th="b", re="01OURS8"),
               line("ack", id=_id(3), th="b")], 100.0)  # no re: nothing to apply
    (act,) = drain(s)
    assert act[0] == A.APPLY_ACKS and act[2] == [("a", "01OURS9"), ("b", "01OURS8")]
    assert s.done(act[1], ["01OURS9", "01OURS8"]) == [(A.ACKED, ["01OURS9", "01OURS8"])]


# -- resume and replay ---------------------------------------------------------------


def test_resume_is_applied_then_replay_starts_from_the_start():
    s = _session()
    r = s.replay
    r.push(5, "msg", '{"t":"msg","id":"01OURS5"}')
    assert r.next_step() is None  # nothing goes before the peer's resume
    r.may_send = True
    assert r.next_step() == ("fetch", 0)  # a first scan is always due
    r.fetched([])
    assert r.next_step() == ("rows", [(5, "msg", '{"t":"msg","id":"01OURS5"}')])
    r.take([(5, "msg", '{"t":"msg","id":"01OURS5"}')])
    assert r.last_sent_seq == 5
    s.receive([line("resume", id=_id(1), seen={"th1": "01OURS3", "th2": 8})], 100.0)
    (act,) = drain(s)
    assert act[0] == A.APPLY_RESUME and act[2] == {"th1": "01OURS3"}
    assert s.state == OPEN and not r.resumed_by_peer
    acts = s.done(act[1], ["01OURS2", "01OURS3"])
    assert acts == [(A.ACKED, ["01OURS2", "01OURS3"]), (A.RESUMED,)]
    assert s.state == RESUMED and r.resumed_by_peer
    assert r.next_step() == ("fetch", 0)  # the scan starts over after a resume


def test_replay_sends_in_seq_order_and_never_twice():
    s = _session()
    r = s.replay
    r.may_send = True
    r.fetched([])
    rows = [(1, "msg", '{"t":"msg","id":"01OURS1"}'), (2, "state", '{"t":"state","id":"01OURS2"}')]
    assert r.take(rows) == [b'{"t":"msg","id":"01OURS1"}\n{"t":"state","id":"01OURS2"}\n']
    # a push that the scan already covered is skipped; a later one goes
    assert r.take([(2, "state", "x"), (3, "msg", '{"t":"msg","id":"01OURS3"}')]) == \
        [b'{"t":"msg","id":"01OURS3"}\n']
    # a line written before its commit moves the mark when it gets its seq
    r.sent_first(4)
    assert r.take([(4, "msg", "dup")]) == []


def test_chunks_leave_their_own_write_in_place():
    s = _session()
    parts = s.replay.take([(1, "msg", '{"t":"msg","id":"01OURS1"}'),
                           (2, "chunk", '{"t":"chunk","id":"01OURS2"}'),
                           (3, "msg", '{"t":"msg","id":"01OURS3"}')])
    assert parts == [b'{"t":"msg","id":"01OURS1"}\n', '{"t":"chunk","id":"01OURS2"}',
                     b'{"t":"msg","id":"01OURS3"}\n']


def test_rescan_overtakes_pushed_lines_and_bye_stops_everything():
    s = _session()
    r = s.replay
    r.may_send = True
    r.fetched([])
    r.push(1, "msg", "a")
    r.rescan()
    assert r.next_step() == ("fetch", 0)
    assert s.send_bye("done", 100.0) is not None
    assert r.next_step() is None
    assert s.send_bye("again", 100.0) is None  # said once


def test_without_the_peers_resume_replay_starts_after_resume_wait():
    s = _session(now=100.0, resume_wait=15.0)
    s.replay.push(1, "msg", "a")
    assert s.next_deadline() == 103.0  # the first ping comes first
    s.tick(103.0)
    assert s.next_deadline() == 115.0
    assert s.tick(114.9) == [] and s.replay.next_step() is None
    assert s.tick(115.0) == [(A.REPLAY,)]
    assert s.replay.next_step() == ("fetch", 0)
    assert not s.replay.resumed_by_peer  # a line of ours is not written early then
    assert (A.REPLAY,) not in s.tick(200.0)  # once


def test_the_peers_resume_ends_the_wait():
    s = _session(now=100.0, resume_wait=15.0)
    s.receive([line("resume", id=_id(1), seen={})], 101.0)
    (act,) = drain(s, 101.0)
    s.done(act[1], [])
    assert s.next_deadline() == 103.0
    s.tick(103.0)
    assert s.next_deadline() > 115.0 and (A.REPLAY,) not in s.tick(116.0)


# -- gaps ---------------------------------------------------------------------------


def _sent_two(s: Session) -> None:
    s.replay.take([(1, "msg", '{"t":"msg","id":"01OURSA"}'),
                   (2, "msg", '{"t":"msg","id":"01OURSB"}')])


def test_an_ack_that_overtakes_an_older_line_resends_it_after_gap_timeout():
    s = _session(gap_timeout=15.0)
    _sent_two(s)
    s.receive([line("ack", id=_id(1), th="th", re="01OURSB")], 101.0)
    drain(s, 101.0)
    assert s.timer_dirty
    assert not [a for a in s.tick(115.9) if a[0] == A.RESEND]
    acts = s.tick(116.0)
    assert (A.RESEND, ["01OURSA"]) in acts
    again = s.resending([("01OURSA", '{"t":"msg","id":"01OURSA"}')])
    assert again == (A.SEND, b'{"t":"msg","id":"01OURSA"}\n')
    # skipped once more: not sent a third time, it waits for the next resume
    s.replay.take([(3, "msg", '{"t":"msg","id":"01OURSC"}')])
    s.receive([line("ack", id=_id(2), th="th", re="01OURSC")], 120.0)
    drain(s, 120.0)
    acts = s.tick(135.0)
    assert not [a for a in acts if a[0] == A.RESEND]
    assert [a for a in acts if a[0] == A.LOG and "sent twice" in a[1]]


def test_acks_in_order_and_errs_that_answer_show_no_gap():
    s = _session()
    _sent_two(s)
    s.receive([line("err", id=_id(1), code="forbidden", re="01OURSA"),
               line("ack", id=_id(2), th="th", re="01OURSB")], 101.0)
    acts = drain(s, 101.0)
    assert acts[0][0] == A.PEER_ERR
    assert not [a for a in acts if a[0] == A.SEND]  # an err is never answered with an err
    assert not s.timer_dirty and s.gaps.due() is None
    assert s.state == OPEN  # forbidden does not close


def test_a_resume_that_covers_a_line_ends_its_wait():
    s = _session()
    _sent_two(s)
    s.receive([line("ack", id=_id(1), th="th", re="01OURSB")], 101.0)
    (acks,) = drain(s, 101.0)
    s.receive([line("resume", id=_id(2), seen={})], 102.0)
    (act,) = drain(s, 102.0)
    assert s.done(act[1], ["01OURSA"]) == []  # waits for the acks' job
    assert (A.RESUMED,) in s.done(acks[1], ["01OURSB"])
    assert not [a for a in s.tick(200.0) if a[0] == A.RESEND]


def test_no_resend_after_bye():
    s = _session()
    _sent_two(s)
    s.receive([line("ack", id=_id(1), th="th", re="01OURSB")], 101.0)
    drain(s, 101.0)
    s.send_bye("done", 100.0)
    assert not [a for a in s.tick(200.0) if a[0] == A.RESEND]


# -- ping and idle ---------------------------------------------------------------------


def _pings(acts: list[tuple]) -> list[dict]:
    return [x for x in sent(acts) if x["t"] == "ping"]


def test_first_ping_three_seconds_after_the_start():
    s = _session(now=100.0)
    assert s.next_deadline() == 103.0
    assert s.tick(102.9) == []
    (ping,) = _pings(s.tick(103.0))
    assert ping["id"]


def test_first_ping_sooner_when_the_interval_is_short():
    s = _session(now=100.0, ping_interval=1.0)
    assert s.next_deadline() == pytest.approx(100.9)


def test_pings_when_idle_and_a_pong_gives_the_rtt():
    s = _session(now=100.0)
    (ping,) = _pings(s.tick(103.0))
    s.receive([line("pong", id=_id(1), re=ping["id"])], 103.25)
    (rtt,) = drain(s, 103.25)
    assert rtt == (A.RTT, pytest.approx(250.0))
    # the next ping is due 27 s (0.9 x 30) after the last line read
    assert s.next_deadline() == pytest.approx(103.25 + 27)
    assert s.tick(130.0) == []
    assert _pings(s.tick(130.25))


def test_a_pong_we_did_not_ask_for_is_ignored():
    s = _session()
    s.receive([line("pong", id=_id(1), re="01NOTOURS")], 100.0)
    assert drain(s) == []


def test_lines_from_the_peer_keep_the_connection_alive():
    s = _session(now=100.0, ping_interval=10.0)  # idle 9 s
    s.tick(103.0)  # first ping
    s.receive([msg(1)], 110.0)
    drain(s, 110.0)
    assert s.tick(118.9) == []
    assert _pings(s.tick(119.0))


def test_two_unanswered_pings_close_the_connection():
    s = _session(now=100.0, ping_interval=10.0)
    assert _pings(s.tick(103.0))
    assert _pings(s.tick(112.0))
    acts = s.tick(121.0)
    assert acts == [(A.CLOSE, "peer stopped answering pings")]
    assert s.state == CLOSED and s.tick(200.0) == []


def test_the_peers_ping_is_answered_with_its_id():
    s = _session()
    s.receive([line("ping", id=_id(5))], 100.0)
    (pong,) = sent(drain(s))
    assert pong["t"] == "pong" and pong["re"] == _id(5) and pong["id"].startswith("01OURS")


# -- bye and err ---------------------------------------------------------------------


def test_the_peers_bye_is_answered_and_nothing_after_it_is_taken():
    s = _session()
    s.receive([line("bye", id=_id(1), reason="done"), msg(2)], 100.0)
    (act,) = drain(s)
    assert act[0] == A.PEER_BYE and act[1] == "done"
    reply = json.loads(act[2])
    assert reply["t"] == "bye" and reply["re"] == _id(1) and reply["reason"] == "done"
    assert s.state == CLOSING and s.bye_received
    assert s.replay.next_step() is None  # nothing more goes out
    s.receive([msg(3)], 101.0)
    assert s.next_action(101.0) is None


def test_a_bye_after_ours_ends_the_connection():
    s = _session()
    bye = s.send_bye("leaving", 100.0)
    assert json.loads(bye[1]) == {**json.loads(bye[1]), "t": "bye", "reason": "leaving"}
    s.receive([msg(1), line("bye", id=_id(2), reason="ok")], 100.0)
    acts = drain(s)
    assert [a[0] for a in acts] == [A.STORE_RUN, A.CLOSE]
    assert acts[1][1] == "bye exchanged"
    # what arrived before the peer's bye is still acked once stored
    assert acked(s.done(acts[0][1], ok(1))) == [_id(1)]


def test_our_bye_unanswered_closes_after_bye_linger():
    s = _session(now=100.0, bye_linger=5.0)
    s.tick(103.0)  # the first ping
    assert s.send_bye("done", 110.0) is not None
    assert s.timer_dirty and s.next_deadline() == 115.0
    assert s.tick(114.9) == []
    assert s.tick(115.0) == [(A.CLOSE, "we said bye")]
    assert s.state == CLOSED


def test_a_closing_err_is_passed_on_then_closes():
    s = _session()
    s.receive([line("err", id=_id(1), code="auth", detail="no")], 100.0)
    assert not s.peer_spoke  # an err alone does not count as the peer taking us
    s.receive([msg(2)], 100.0)
    acts = drain(s)
    assert [a[0] for a in acts] == [A.PEER_ERR, A.CLOSE]  # nothing after it is stored
    assert acts[1][1] == "peer sent err auth: no"
    assert s.state == CLOSED


def test_any_other_line_counts_as_the_peer_taking_us():
    s = _session()
    s.receive([line("ping", id=_id(1))], 100.0)
    assert s.peer_spoke
