"""Peer names: the normal form, the look-alike fold, and lookups that refuse to guess."""

from __future__ import annotations

import json

import pytest

from awp.store import ops, queries
from awp.store.db import open_store
from awp.store.queries import LookupFailed
from awp.wire.keys import Identity, short_key
from awp.wire.names import NAME_MAX, clean_name, name_fold


@pytest.mark.parametrize("raw, clean", [
    ("builder", "builder"),
    ("builder ", "builder"),
    ("  builder\t", "builder"),
    ("build\u200ber", "builder"),            # zero-width space
    ("\u202ebuilder", "builder"),            # right-to-left override
    ("builder\u2066\u2069", "builder"),      # bidi isolates
    ("\ufeffbuilder", "builder"),            # byte order mark
    ("a\u00a0\u2003 b\n\nc", "a b c"),       # every space is one space
    ("bu\x00il\x1bder\x7f", "builder"),      # control characters
    ("e\u0301", "\u00e9"),                   # NFC
    ("\u3164", ""),                          # a letter that shows nothing
    ("\u200b \u200d", ""),
    (None, ""),
    (42, ""),
])
def test_clean_name(raw, clean):
    assert clean_name(raw) == clean


def test_clean_name_bounds_length_and_stacked_marks():
    assert len(clean_name("x" * 10_000)) == NAME_MAX
    assert clean_name("x" + "\u0301" * 50) == "x" + "\u0301" * 3
    assert clean_name("y" * (NAME_MAX - 1) + " z") == "y" * (NAME_MAX - 1)


@pytest.mark.parametrize("a, b", [
    ("builder", "Builder "),
    ("builder", "BUILDER"),
    ("builder", "bu\u200bilder"),
    ("builder", "\u0432uilder".replace("\u0432", "b")),
    ("builder", "\u0412uilder"),             # Cyrillic capital ve
    ("paypal", "\u0440\u0430yp\u0430l"),     # Cyrillic er and a
    ("coder", "c\u03bfder"),                 # Greek omicron
    ("node1", "nodel"),
    ("o1", "0l"),
    ("cafe", "caf\u00e9"),
    ("worker-1", "worker\u2010l"),           # hyphen look-alike
    ("\uff42uilder", "builder"),             # fullwidth
])
def test_lookalikes_fold_equal(a, b):
    assert name_fold(a) == name_fold(b)


@pytest.mark.parametrize("a, b", [
    ("builder", "builders"),
    ("builder", "build er"),
    ("worker-1", "worker-2"),
    ("a@box", "b@box"),
])
def test_different_names_fold_apart(a, b):
    assert name_fold(a) != name_fold(b)


@pytest.fixture
def store(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    yield c
    c.close()


def _peer(c, name: str) -> str:
    key = Identity.generate().key
    ops.record_hello(c, key, {"name": name}, 1)
    return key


def test_hello_name_is_stored_clean(store):
    key = _peer(store, " evil\u202egnp.exe\u200b ")
    assert store.execute("SELECT name FROM peers WHERE key = ?", (key,)).fetchone()[0] \
        == "evilgnp.exe"


def test_lookalike_names_refuse_to_resolve_and_label_apart(store):
    b = _peer(store, "builder")
    assert queries.resolve_peer(store, "builder") == b
    assert queries.peer_label(store, b) == "builder"
    # A second key claims a look-alike (stored raw, as an older store may hold it).
    c = Identity.generate().key
    ops.ensure_peer(store, c, 2)
    store.execute("UPDATE peers SET name = 'Builder\u200b ' WHERE key = ?", (c,))
    with pytest.raises(LookupFailed) as e:
        queries.resolve_peer(store, "builder")
    assert e.value.code == "ambiguous_peer"
    assert short_key(b) in str(e.value) and short_key(c) in str(e.value)
    with pytest.raises(LookupFailed):
        queries.resolve_peer(store, "BUILDER")
    assert queries.peer_label(store, b) == f"builder ({short_key(b)})"
    assert queries.peer_label(store, c) == f"Builder ({short_key(c)})"
    rows = {r["key"]: r for r in queries.peer_rows(store)}
    assert rows[c]["name"] == "Builder" and rows[b]["lookalike"] and rows[c]["lookalike"]
    # Key prefixes and aliases still pick exactly one.
    assert queries.resolve_peer(store, short_key(c)) == c
    store.execute("INSERT INTO aliases (alias, key) VALUES ('real', ?)", (b,))
    assert queries.resolve_peer(store, "real") == b
    # A peer calling itself like that alias never passes for it either.
    d = _peer(store, "Real")
    assert queries.resolve_peer(store, "real") == b
    assert queries.peer_label(store, b) == "real"
    assert queries.peer_label(store, d) == f"Real ({short_key(d)})"
    with pytest.raises(LookupFailed):
        queries.resolve_peer(store, "REAL")


def test_a_name_that_is_another_peers_key_prefix_is_ambiguous(store):
    b = _peer(store, "b")
    c = _peer(store, short_key(b)[:6])
    with pytest.raises(LookupFailed) as e:
        queries.resolve_peer(store, short_key(b)[:6])
    assert e.value.code == "ambiguous_peer"
    assert queries.resolve_peer(store, short_key(c)) == c


def test_thread_ids_are_per_peer(store):
    b, c = _peer(store, "b"), _peer(store, "c")
    assert queries.thread_peers(store, "thr_x") == []
    assert queries.scope_thread(store, "thr_x", None) is None
    ops.touch_thread_out(store, b, "thr_x", 10)
    store.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
                  " (?, 'out', 'msg', '01A', 'thr_x', 10, 10, '{}')", (b,))
    assert queries.thread_peer(store, "thr_x") == b
    ops.store_inbound(store, c, {"t": "msg", "id": "01B", "th": "thr_x", "parts": []},
                      '{"t":"msg"}', 20)
    assert queries.thread_peers(store, "thr_x") == [b, c]
    with pytest.raises(LookupFailed) as e:
        queries.scope_thread(store, "thr_x", None, "awp read {th} -p {peer}")
    assert e.value.code == "ambiguous_thread"
    assert f"awp read thr_x -p {short_key(b)}" in str(e.value)
    assert short_key(c) in str(e.value)
    assert queries.scope_thread(store, "thr_x", c) == c
    assert queries.thread_ref(store, c, "thr_x") == f"thr_x -p {short_key(c)}"
    # A peer seen only in the log (an introduce line in that thread) counts too.
    d = _peer(store, "d")
    store.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
                  " (?, 'in', 'introduce', '01C', 'thr_y', 30, 30, '{}')", (d,))
    assert queries.thread_peers(store, "thr_y") == [d]


def test_local_name_is_cleaned_and_an_invisible_one_refused(tmp_path):
    from awp.base.home import HomeError
    from awp.daemon.settings import Flags, resolve

    s = resolve(str(tmp_path), Flags(name=" lead\u200b@\u202elaptop "), {}, env={})
    assert s.name == "lead@laptop"
    assert s.remember["name"] == "lead@laptop"
    with pytest.raises(HomeError, match="empty once spaces and invisible"):
        resolve(str(tmp_path), Flags(name="\u200b \u2066"), {}, env={})


# -- issue 20 items 13, 14: UTS #39 look-alikes, introductions ---------------------------------

LOOKALIKES = ["buiIder", "b\u057dilder", "builde\u0433", "\u0185uilder", "buil\ua4d2er",
              "bui1der", "\u0432uilder".replace("\u0432", "\u0412"), "BUILDER"]


@pytest.mark.parametrize("name", LOOKALIKES)
def test_confusable_skeletons_fold_together(name):
    # capital I, Armenian seh, Cyrillic ghe, tone six, Lisu pha, digit one, Cyrillic VE, case
    assert name_fold(name) == name_fold("builder")


@pytest.mark.parametrize("name", ["buiIder", "b\u057dilder", "builde\u0433", "\u0185uilder",
                                  "buil\ua4d2er"])
def test_a_lone_lookalike_is_never_taken_for_the_name_without_its_key(store, name):
    """`awp send builder` when the only peer known calls itself a look-alike."""
    fake = _peer(store, name)
    with pytest.raises(LookupFailed) as e:
        queries.resolve_peer(store, "builder")
    assert e.value.code == "lookalike_peer" and short_key(fake) in str(e.value)
    # Its own name, its key prefix, or an alias still reach it.
    assert queries.resolve_peer(store, name) == fake
    assert queries.resolve_peer(store, short_key(fake)) == fake
    store.execute("INSERT INTO aliases (alias, key) VALUES ('bob', ?)", (fake,))
    assert queries.resolve_peer(store, "builder") == fake  # named before: an alias
    # Flagged beside the real one.
    real = _peer(store, "builder")
    assert queries.peer_label(store, real) == f"builder ({short_key(real)})"


def test_a_lookalike_the_user_has_written_to_resolves(store):
    fake = _peer(store, "buiIder")
    store.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
                  " (?, 'out', 'msg', '01A', 'thr_x', 10, 10, '{}')", (fake,))
    assert queries.resolve_peer(store, "builder") == fake


def _introduce(c, sender: str, key: str, name: str, addr: str = "") -> None:
    line = {"t": "introduce", "id": Identity.generate().key[-10:], "th": "",
            "peer": {"key": key, "name": name, **({"address": addr} if addr else {})}}
    c.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
              " (?, 'in', 'introduce', ?, '', 1, 1, ?)", (sender, line["id"], json.dumps(line)))


def test_introduced_names_never_shadow_or_crowd_a_name(store):
    real = _peer(store, "builder")
    mallory = _peer(store, "mallory")
    phantom = Identity.generate().key
    ops.ensure_peer(store, phantom, 3)
    _introduce(store, mallory, phantom, "builder")
    assert queries.resolve_peer(store, "builder") == real  # not ambiguous
    assert queries.resolve_peer(store, "builder", introduced=True) == real
    # A name only an introduction gave: connect may use it, send may not.
    other = Identity.generate().key
    ops.ensure_peer(store, other, 4)
    _introduce(store, mallory, other, "reviewer")
    assert queries.resolve_peer(store, "reviewer", introduced=True) == other
    with pytest.raises(LookupFailed) as e:
        queries.resolve_peer(store, "reviewer")
    assert e.value.code == "unknown_peer" and short_key(other) in str(e.value)


def test_introduced_addresses_rank_below_the_peers_own(store):
    key = _peer(store, "builder")
    ops.add_address(store, key, "tcp:10.0.0.1:7000", "hello", 10)
    ops.add_address(store, key, "tcp:10.6.6.6:7000", "introduce", 20)
    ops.add_address(store, key, "tcp:10.0.0.1:7000", "introduce", 30)  # never downgrades
    ops.address_result(store, key, "tcp:10.6.6.6:7000", 40)  # even after it once worked
    order = [r["addr"] for r in ops.ranked_addresses(store, key)]
    assert order == ["tcp:10.0.0.1:7000", "tcp:10.6.6.6:7000"]
    ops.add_address(store, key, "tcp:10.1.1.1:7000", "connect", 50)
    assert ops.ranked_addresses(store, key)[0]["addr"] == "tcp:10.1.1.1:7000"


def _heard(c, name: str, via: str) -> str:
    """A key this host never met, naming itself in presence or in a topic document."""
    key = Identity.generate().key
    if via == "presence":
        c.execute("INSERT INTO presence (origin, name, seq, doc, doc_ts, received)"
                  " VALUES (?, ?, 1, '{}', 1, 1)", (key, name))
    else:
        doc = json.dumps({"k": "topic", "topic": f"{key}/ops", "owner_name": name})
        c.execute("INSERT INTO board_topics (topic, owner, seq, hash, doc, received)"
                  " VALUES (?, ?, 1, 'h', ?, 1)", (f"{key}/ops", key, doc))
    return key


def test_names_heard_of_resolve_only_when_asked_and_unambiguous(store):
    alice = _heard(store, "alice", "topic")
    with pytest.raises(LookupFailed, match="unknown peer"):
        queries.resolve_peer(store, "alice")  # send and friends: met peers only
    assert queries.resolve_peer(store, "alice", heard=True) == alice
    assert queries.resolve_peer(store, "ALICE", heard=True) == alice  # folded, as met names
    assert queries.peer_label(store, alice) == f"alice (heard of, {short_key(alice)})"
    w = _heard(store, "worker", "presence")
    assert queries.peer_label(store, w).startswith("worker (heard of")
    # a met peer of that name wins over any key heard of
    met = _peer(store, "worker")
    assert queries.resolve_peer(store, "worker", heard=True) == met
    # two keys heard of by one name: nothing is picked, each shown with its source
    other = _heard(store, "alice", "presence")
    with pytest.raises(LookupFailed, match="2 keys this host has heard of") as e:
        queries.resolve_peer(store, "alice", heard=True)
    assert e.value.code == "ambiguous_peer"
    assert short_key(alice) in str(e.value) and short_key(other) in str(e.value)
    assert "topic document" in str(e.value) and "presence" in str(e.value)


def test_a_workers_name_in_a_lease_record_labels_it_but_never_resolves(store):
    """The name a worker signed in its ask reaches hosts that never met it in the
    owner's lease records: shown as heard of, never taken for a typed name."""
    from awp.wire.board import make_lease

    owner, worker = Identity.generate(), Identity.generate()
    rec = make_lease(owner, f"{owner.key}/jobs", "a" * 32, worker.key, "claimed", "L1",
                     2_000_000_000_000, 1_900_000_000_000, holder_name="builder\u200b")
    store.execute("INSERT INTO board_records (topic, hash, kind, author, ts, of, size, raw,"
                  " received) VALUES (?, ?, 'lease', ?, ?, ?, ?, ?, 1)",
                  (rec.topic, rec.hash, owner.key, rec.ts, rec.of, len(rec.raw), rec.raw))
    assert queries.peer_label(store, worker.key) == f"builder (heard of, {short_key(worker.key)})"
    with pytest.raises(LookupFailed, match="unknown peer"):
        queries.resolve_peer(store, "builder", heard=True)
    # a holder that only looks like it (another key) gets no name from that record
    assert queries.peer_label(store, owner.key) == short_key(owner.key)


def test_many_names_at_once_agree_with_one_at_a_time(store):
    """The dashboard's one-pass lookup gives what heard_name gives per key, in its order."""
    from awp.store.heard import heard_name, heard_names_of

    a = _heard(store, "alice", "topic")
    w = _heard(store, "worker", "presence")
    store.execute("INSERT INTO board_topics (topic, owner, seq, hash, doc, received)"
                  " VALUES (?, ?, 1, 'h2', ?, 1)", (f"{w}/two", w, '{"owner_name":"other"}'))
    nobody = Identity.generate().key
    got = heard_names_of(store, {a, w, nobody})
    assert got == {k: heard_name(store, k) for k in (a, w)}
    assert got[w] == ("worker", "presence")  # presence before the topic document
