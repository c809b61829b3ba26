"""Who may post and read a topic: judged when a host takes a record, at its clock, never at
the record's own (author-chosen) time; the owner's document lists members by key."""

from __future__ import annotations

import json

from awp.board.perms import admit, may_post, may_read
from awp.wire import board as b
from awp.wire.grants import grant_hash, make_grant
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts_seconds

T0 = 1_790_000_000_000
HOUR = 3_600_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
BOB = Identity(b"\x03" * 32)
INTRO = Identity(b"\x04" * 32)
TOPIC = f"{OWNER.key}/ops"


def _policy(**kw):
    return b.check_policy(b.make_topic(OWNER, "ops", 1, T0, **kw).doc)


def _post(who=ALICE, ts=T0, **kw):
    return b.make_post(who, TOPIC, [{"k": "text", "text": "x"}], ts, **kw)


def _grant(iss, sub, caps, exp=T0 + HOUR, aud=None):
    return make_grant(iss, sub.key, caps, exp, aud=aud)


def test_owner_always_and_nobody_else_without_a_topic_document():
    assert may_post(_post(OWNER), None, T0) == ""
    assert "no topic document" in may_post(_post(), None, T0)
    assert may_read(OWNER.key, topic=TOPIC, owner=OWNER.key, policy=None, now_ms=T0)
    assert not may_read(ALICE.key, topic=TOPIC, owner=OWNER.key, policy=None, now_ms=T0)


def test_open_topics():
    pol = _policy(read="open", post="open")
    assert may_post(_post(), pol, T0) == ""
    assert may_read(BOB.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0)


def test_closed_topic_needs_the_owners_grant_valid_when_the_record_arrives():
    pol = _policy()
    assert may_post(_post(), pol, T0) == "no grant to post here"
    g = _grant(OWNER, ALICE, [b.post_cap(TOPIC)])
    assert may_post(_post(grant=g), pol, T0) == ""
    # judged at the host's clock: an expired grant admits nothing new, whatever ts says
    assert may_post(_post(ts=T0 - HOUR, grant=g), pol, T0 + HOUR - 1) == ""
    assert may_post(_post(ts=T0 - HOUR, grant=g), pol, T0 + HOUR) != ""
    assert may_post(_post(ts=T0 - 20 * 24 * HOUR, grant=g), pol, T0 + HOUR) != ""
    # read grant does not allow posting; a grant for another topic, or self-made, neither
    for bad in (_grant(OWNER, ALICE, [b.read_cap(TOPIC)]),
                _grant(OWNER, ALICE, [b.post_cap(f"{OWNER.key}/other")]),
                _grant(ALICE, BOB, [b.post_cap(TOPIC)]),
                _grant(OWNER, BOB, [b.post_cap(TOPIC)]),  # about someone else
                _grant(OWNER, ALICE, [b.post_cap(TOPIC)], aud=BOB.key)):  # bound to one peer
        assert may_post(_post(grant=bad), pol, T0) != ""
    wild = _grant(OWNER, ALICE, [f"board:post:{OWNER.key}/*"])
    assert may_post(_post(grant=wild), pol, T0) == ""


def test_forged_grant_inside_a_record_does_not_count():
    pol = _policy()
    g = _grant(OWNER, ALICE, [b.read_cap(TOPIC)])
    g["caps"] = [b.post_cap(TOPIC)]  # the signature no longer matches
    assert may_post(_post(grant=g), pol, T0) != ""


def test_revocation_admits_nothing_new_whatever_ts_and_ban_cuts_everything():
    g = _grant(OWNER, ALICE, [b.post_cap(TOPIC)])
    at = T0 + 1000
    pol = _policy(revoked=[{"grant": grant_hash(g), "at": format_ts_seconds(at)}])
    for back in (0, 10 * 60_000, 3 * HOUR, 20 * 24 * HOUR):  # dated back before the revoke
        assert may_post(_post(ts=at - 1 - back, grant=g), pol, at + 5) != ""
    banned = _policy(post="open", read="open", banned=[ALICE.key])
    assert "banned" in may_post(_post(), banned, T0)
    assert not may_read(ALICE.key, topic=TOPIC, owner=OWNER.key, policy=banned, now_ms=T0)


def test_one_level_of_introduction_and_no_more_than_the_introducer_holds():
    pol = _policy()
    via = _grant(OWNER, INTRO, ["introduce", b.post_cap(TOPIC)])
    g = _grant(INTRO, ALICE, [b.post_cap(TOPIC)])
    assert may_post(_post(grant=g, via=via), pol, T0) == ""
    # the introducer without the cap, or without introduce, confers nothing
    for v in (_grant(OWNER, INTRO, ["introduce", b.read_cap(TOPIC)]),
              _grant(OWNER, INTRO, [b.post_cap(TOPIC)]),
              _grant(BOB, INTRO, ["introduce", b.post_cap(TOPIC)])):
        assert may_post(_post(grant=g, via=v), pol, T0) != ""
    # an owner grant does not need (and refuses) a via
    direct = _grant(OWNER, ALICE, [b.post_cap(TOPIC)])
    assert may_post(_post(grant=direct, via=via), pol, T0) != ""
    # revoking the introducer's grant cuts everyone it introduced
    cut = _policy(revoked=[{"grant": grant_hash(via), "at": format_ts_seconds(T0)}])
    assert may_post(_post(grant=g, via=via), cut, T0) != ""
    # reading through an introduction
    rg = _grant(INTRO, BOB, [b.read_cap(TOPIC)])
    assert may_read(BOB.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0, grant=rg,
                    via=via)
    assert not may_read(BOB.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0 + HOUR,
                        grant=rg, via=via)


def test_owner_only_kinds_and_deletes():
    pol = _policy(post="open")
    p = _post()
    assert may_post(b.make_hide(OWNER, p, T0), pol, T0) == ""
    assert may_post(b.make_delete(ALICE, p, T0), pol, T0) == ""
    closed = _policy()
    assert may_post(b.make_delete(ALICE, p, T0), closed, T0) == ""  # own post: a view rule
    # a record claiming to be a lease but signed by someone else never gets this far
    lease = b.make_lease(OWNER, TOPIC, p.hash, ALICE.key, "claimed", "L", T0, T0)
    assert json.loads(lease.raw)["author"] == OWNER.key


def test_admit_adds_the_time_bound_and_max_post():
    pol = _policy(post="open", max_post=1024)
    assert admit(_post(ts=T0), pol, T0) == ""
    assert admit(_post(ts=T0 + b.FUTURE_MS + 1), pol, T0) == "dated too far ahead"
    assert admit(_post(ts=T0 + b.FUTURE_MS + 1), pol, T0 + 2) == ""  # later it is fine
    big = b.make_post(ALICE, TOPIC, [{"k": "text", "text": "x" * 1024}], T0)
    assert "max_post" in admit(big, pol, T0)
    assert admit(big, _policy(post="open"), T0) == ""
    assert admit(_post(ts=T0), None, T0) == "no topic document yet"


def test_members_in_the_document_post_and_read_by_key_until_their_time():
    until = format_ts_seconds(T0 + HOUR)
    pol = _policy(members=[{"key": ALICE.key, "can": "post", "until": until},
                           {"key": BOB.key, "can": "read"}])
    assert may_post(_post(), pol, T0) == ""
    assert may_post(_post(ts=T0 - 20 * 24 * HOUR), pol, T0 + HOUR) != ""  # expired at arrival
    assert may_post(_post(BOB), pol, T0) == "no grant to post here"  # a reader only
    assert may_read(BOB.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0 + 10 * HOUR)
    assert may_read(ALICE.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0)
    assert not may_read(ALICE.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0 + HOUR)
    assert not may_read(INTRO.key, topic=TOPIC, owner=OWNER.key, policy=pol, now_ms=T0)
    # a ban wins over membership
    both = _policy(members=[{"key": ALICE.key, "can": "post"}], banned=[ALICE.key])
    assert "banned" in may_post(_post(), both, T0)
    assert not may_read(ALICE.key, topic=TOPIC, owner=OWNER.key, policy=both, now_ms=T0)


def test_members_list_is_checked():
    for bad in ([{"key": ALICE.key, "can": "own"}], [{"key": "ed25519:nope", "can": "read"}],
                [{"key": ALICE.key, "can": "read"}, {"key": ALICE.key, "can": "post"}],
                [{"key": ALICE.key, "can": "read", "until": "soon"}], "all",
                [{"key": ALICE.key, "can": "read"}] * (b.MAX_MEMBERS + 1)):
        try:
            _policy(members=bad)
        except b.BoardError:
            continue
        raise AssertionError(f"members {bad!r} accepted")
