"""kill -9 either side at random while messages flow both ways.

Afterwards each side must hold every message the other side committed to
send exactly once, in send order within each thread.  The sender's store is
the truth for "what was sent": a send call cut off by a kill may or may not
have been queued.  A lone message may also be written to the peer while its
own commit is still syncing (see docs/architecture.md); if the sender dies in
that window the peer holds it and the sender has no record of it.  Such a
message is still exactly once and in order at the receiver, and there can be
at most one per kill of the sender, which is what the check allows.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time

from nodes import Node, wait_for

from awp.localapi.client import ApiFailure, DaemonNotRunning

THREADS = 4
PER_DIRECTION = 1050
KILLS = 12


def _sender(src: Node, dst_key: str, ths: list[str], count: int, stop: threading.Event,
            errors: list) -> None:
    i = 0
    while i < count and not stop.is_set():
        th = ths[i % len(ths)]
        try:
            src.api("POST", "/v1/send", {"peer": dst_key, "th": th, "wait_ack": 0,
                                         "parts": [{"k": "text", "text": f"{src.name} #{i}"}]})
            i += 1
        except (DaemonNotRunning, ConnectionError, OSError, TimeoutError):
            time.sleep(0.02)  # the node is being restarted; the retry is a new message
        except ApiFailure as e:
            errors.append(e)
            return


def _out_ids(node: Node, peer: str) -> dict[str, list[str]]:
    recs = node.api("POST", "/v1/read", {"peer": peer, "n": 1_000_000, "mark": False})["records"]
    by: dict[str, list[str]] = {}
    for r in recs:
        if r["dir"] == "out" and r["t"] == "msg":
            by.setdefault(r["th"], []).append(r["id"])
    return by


def _in_ids(node: Node, peer: str) -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for r in node.inbound(peer=peer):
        if r["t"] == "msg":
            by.setdefault(r["th"], []).append(r["id"])
    return by


def _why_missing(src: Node, dst: Node, th: str, sent: list[str], got: list[str],
                 x: str) -> tuple:
    """What a failure needs to be understood: the ids around the lost one."""
    with sqlite3.connect(dst.home + "/awp.db") as con:
        seen = con.execute("SELECT last_id FROM seen WHERE peer = ? AND th = ?",
                           (src.key, th)).fetchone()
    ids = sorted(sent)
    k = ids.index(x)
    around = ids[max(0, k - 3):k + 4]
    return (src.name, th, "lost", x, "peer's seen", seen, "sent around", around,
            "got around", [i for i in sorted(got) if around[0] <= i <= around[-1]])


def test_kill9_both_sides_loses_and_duplicates_nothing(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    # One thread per slot, opened from both sides, so both directions share threads.
    ths = []
    for k in range(THREADS):
        ths.append(a.send(b.key, f"open {k}", subject=f"crash thread {k}")["th"])
    stop = threading.Event()
    errors: list = []
    senders = [
        threading.Thread(target=_sender, args=(a, b.key, ths, PER_DIRECTION, stop, errors)),
        threading.Thread(target=_sender, args=(b, a.key, ths, PER_DIRECTION, stop, errors)),
    ]
    for t in senders:
        t.start()
    rnd = random.Random(20261129)
    kills = 0
    kills_of = {a.name: 0, b.name: 0}
    try:
        while kills < KILLS:
            time.sleep(rnd.uniform(0.2, 0.7))
            victim = rnd.choice([a, b])
            victim.kill()
            kills += 1
            kills_of[victim.name] += 1
            time.sleep(rnd.uniform(0.0, 0.3))
            victim.start()
        for t in senders:
            t.join(timeout=180)
    finally:
        stop.set()
    assert not errors, errors
    assert kills >= 10

    def drained() -> bool:
        return a.api("GET", "/v1/status")["queued"] == 0 and \
            b.api("GET", "/v1/status")["queued"] == 0

    wait_for(drained, 120, "both outboxes to drain", interval=0.2)

    for src, dst in ((a, b), (b, a)):
        sent = _out_ids(src, dst.key)
        got = _in_ids(dst, src.key)
        total = sum(len(v) for v in sent.values())
        assert total >= PER_DIRECTION, (src.name, total)
        assert set(sent) == set(got)
        unrecorded = 0
        for th in sent:
            # exactly once, and in send order (ids increase in send order)
            assert len(got[th]) == len(set(got[th])), (src.name, th, "duplicate")
            assert got[th] == sorted(got[th]), (src.name, th, "out of order")
            missing = set(sent[th]) - set(got[th])
            assert not missing, _why_missing(src, dst, th, sent[th], got[th], min(missing))
            unrecorded += len(got[th]) - len(sent[th])
        assert unrecorded <= kills_of[src.name], (src.name, unrecorded)


def test_lone_messages_written_before_commit_survive_kill9(make_node):
    """Paced messages take the early path (written, then stored); kill -9 the
    sender among them: nothing is duplicated or reordered, every recorded
    message arrives, and after a crash new ids start above the reservation."""
    from awp.wire.ids import ulid_time_ms
    from awp.wire.timefmt import now_ms

    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "open", subject="early writes")["th"]
    kills = 0
    for _round in range(4):
        early_before = a.api("GET", "/v1/status")["store"]["sent_before_commit"]
        for i in range(25):
            a.send(b.key, f"lone {_round}.{i}", th=th, wait_ack=2)
            time.sleep(0.005)  # leave the store quiet, so each goes alone
        assert a.api("GET", "/v1/status")["store"]["sent_before_commit"] > early_before
        stop = threading.Event()
        errors: list = []
        t = threading.Thread(target=_sender, args=(a, b.key, [th], 10_000, stop, errors))
        t.start()
        time.sleep(0.15)
        killed_at = now_ms()
        a.kill()
        kills += 1
        stop.set()
        t.join(timeout=30)
        a.start()
        first = a.send(b.key, "after the crash", th=th)
        assert ulid_time_ms(first["id"]) >= killed_at + 29_000, "ids must start above the reservation"
    a.stop()
    a.start()
    assert ulid_time_ms(a.send(b.key, "after a clean stop", th=th)["id"]) <= now_ms() + 61_000

    wait_for(lambda: a.api("GET", "/v1/status")["queued"] == 0, 60, "a's outbox to drain")
    sent = _out_ids(a, b.key)[th]
    got = _in_ids(b, a.key)[th]
    assert len(got) == len(set(got)) and got == sorted(got)
    assert not set(sent) - set(got)
    assert len(got) - len(sent) <= kills


def _paced_sender(src: Node, dst_key: str, th: str, stop: threading.Event, acked: list,
                  tag: str) -> None:
    """Lone messages with a pause between them (so each takes the journal path);
    ``acked`` gets the id of every one whose ack came back."""
    i = 0
    while not stop.is_set():
        try:
            r = src.send(dst_key, f"{tag} {i}", th=th, wait_ack=1)
            if r.get("ack_ms") is not None:
                acked.append(r["id"])
        except (DaemonNotRunning, ConnectionError, OSError, TimeoutError, ApiFailure):
            pass
        i += 1
        time.sleep(0.004)


def test_lines_acked_from_the_intake_journal_survive_kill9_of_the_receiver(make_node):
    """The receiver acks a lone line once it is synced to its intake journal,
    before SQLite has it; kill -9 the receiver among such lines, again and
    again: every acked line is there afterwards, once, in order."""
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "open", subject="journal kills", wait_ack=5)["th"]
    rnd = random.Random(20261130)
    acked: list[str] = []
    journaled = 0
    for k in range(20):  # six kills; more while no line took the journal's way (slow commits)
        if k >= 6 and journaled > 0:
            break
        before = b.api("GET", "/v1/status")["store"]["intake"]["journaled"]
        stop = threading.Event()
        t = threading.Thread(target=_paced_sender, args=(a, b.key, th, stop, acked, f"r{k}"))
        t.start()
        wait_for(lambda n=len(acked): len(acked) > n + 5, 20, "lines to be acked")
        journaled += b.api("GET", "/v1/status")["store"]["intake"]["journaled"] - before
        time.sleep(rnd.uniform(0.0, 0.2))
        b.kill()
        stop.set()
        t.join(timeout=30)
        b.start()
    assert journaled > 0, "no line took the journal's way"
    wait_for(lambda: a.api("GET", "/v1/status")["queued"] == 0, 60, "a's outbox to drain")
    got = _in_ids(b, a.key)[th]
    assert len(got) == len(set(got)), "duplicate"
    assert got == sorted(got), "out of order"
    assert not set(acked) - set(got), sorted(set(acked) - set(got))[:5]
    assert not set(_out_ids(a, b.key)[th]) - set(got)


def test_a_line_left_in_the_intake_journal_is_stored_at_start(make_node):
    """A crash after the ack but before the SQLite commit leaves the line only
    in the journal: the next start stores it before serving anyone, once."""
    from awp.node.intake import FILENAME
    from awp.store.intake import IntakeJournal, Record
    from awp.wire.canonical import compact_json
    from awp.wire.ids import IdGenerator
    from awp.wire.timefmt import format_ts, now_ms

    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "open", subject="left in the journal", wait_ack=5)["th"]
    b.kill()
    ident = IdGenerator().next()
    text = compact_json({"t": "msg", "id": ident, "ts": format_ts(now_ms()), "th": th,
                         "parts": [{"k": "text", "text": "acked, then the receiver died"}]})
    j = IntakeJournal.open(f"{b.home}/{FILENAME}")
    assert j.append(Record(a.key, now_ms(), text))
    j.close()
    b.start()
    assert _in_ids(b, a.key)[th][-1] == ident
    b.stop()
    b.start()
    assert _in_ids(b, a.key)[th].count(ident) == 1
    later = a.send(b.key, "after the restart", th=th, wait_ack=10)
    assert later["ack_ms"] is not None
    assert _in_ids(b, a.key)[th][-2:] == [ident, later["id"]]


def test_a_journaled_line_whose_commit_fails_is_stored_before_newer_ones(make_node):
    """The receiver acks a lone line from its journal, then its SQLite commit
    fails (another process holds the database's write lock past the busy
    timeout): the line is not lost, and it lands ahead of the next one."""
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "open", subject="commit trouble", wait_ack=5)["th"]
    blocker = sqlite3.connect(b.home + "/awp.db", timeout=10, isolation_level=None)
    x = None
    try:
        for attempt in range(20):  # a busy machine's slow commits send lines the ordinary way
            blocker.execute("BEGIN IMMEDIATE")  # the write lock, held by someone else
            r = a.send(b.key, f"acked from the journal, then the commit failed ({attempt})",
                       th=th, wait_ack=3)
            if r["ack_ms"] is not None:
                x = r
                break
            # b was busy, so the line took the ordinary way (no ack before its
            # commit): let that commit through and try again
            blocker.execute("ROLLBACK")
            wait_for(lambda i=r["id"]: i in _in_ids(b, a.key)[th], 30, "the ordinary store")
        assert x is not None, "no line took the journal's way"
        wait_for(lambda: b.api("GET", "/v1/status")["store"]["intake"]["off"], 40,
                 "b's commit to give up on the lock")
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    y = a.send(b.key, "the next one", th=th, wait_ack=30)
    assert y["ack_ms"] is not None
    got = _in_ids(b, a.key)[th]
    assert got[-2:] == [x["id"], y["id"]] and got.count(x["id"]) == 1
