"""Fuzz the sans-I/O handshake with arbitrary hello, auth and other lines.

The oracle is what the generator did, not the code under test: the handshake
may finish only after an auth that the holder of the hello's key signed over
the real transcript.  Signatures cannot be guessed, so any other way to
``done`` is a bug.
"""

from __future__ import annotations

import json

from fuzzgen import json_values, lines, texts
from hypothesis import event, example, given
from hypothesis import strategies as st

from awp.node.handshake import Handshake, LocalHello
from awp.wire.b64 import b64url
from awp.wire.errors import KNOWN, ProtocolError
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity, auth_transcript, verify

US, PEER, OTHER = Identity.generate(), Identity.generate(), Identity.generate()
SIGNERS = {"peer": PEER, "other": OTHER, "us": US}
NONCE = b64url(bytes(range(32)))

missing = object()


def _half(good: object, *bad: object) -> st.SearchStrategy:
    """The good value half the time, so whole valid lines are common enough."""
    return st.one_of(st.just(good), st.sampled_from(bad))


key_forms = st.one_of(st.sampled_from(["peer", "peer="]),
                      st.sampled_from(["us", "us=", "other", "bad", "none", "int"]))


def _key(form: str) -> object:
    return {"peer": PEER.key, "peer=": PEER.key + "=", "us": US.key, "us=": US.key + "=",
            "other": OTHER.key, "bad": "ed25519:AAAA", "none": None, "int": 5}[form]


extras = st.dictionaries(texts, json_values(4), max_size=3)
hello_actions = st.one_of(
    st.tuples(st.just("hello"), st.sampled_from(["peer", "peer="]), st.just(0), st.just(NONCE),
              extras),
    st.tuples(st.just("hello"), key_forms,
              _half(0, missing, 1, True, False, "0", None, 2 ** 64),
              _half(NONCE, "", None, 7, missing), extras))
auth_extras = st.dictionaries(st.sampled_from(["grants", "x", "sig2"]), json_values(4),
                              max_size=2)
auth_actions = st.one_of(
    st.tuples(st.just("auth"), st.just("peer"), st.just("right"), st.just(False), auth_extras),
    st.tuples(st.just("auth"), _half("peer", "other", "us"),
              _half("right", "mirror", "no-hello"), st.booleans(), auth_extras))
raw_actions = st.tuples(st.just("raw"), lines)
# Mostly a hello first (anything else there is a plain bad_frame), then a mix.


def _weighted(*pairs: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """Pick a strategy by weight (``one_of`` favours its first branches)."""
    total = sum(w for w, _ in pairs)

    def pick(i: int) -> st.SearchStrategy:
        for w, strat in pairs:
            if i < w:
                return strat
            i -= w
        raise AssertionError(i)

    return st.integers(0, total - 1).flatmap(pick)


actions = st.builds(lambda first, rest: [first, *rest],
                    _weighted((6, hello_actions), (1, auth_actions), (1, raw_actions)),
                    st.lists(_weighted((4, auth_actions), (2, hello_actions), (1, raw_actions)),
                             max_size=5))


def _hello_line(form: str, v: object, nonce: object, extra: dict) -> bytes:
    obj: dict = {"t": "hello", "id": "01K5ZQ0Y6S7C8D9E0F1G2H3J4K", "ts": "2026-09-25T17:03:11Z",
                 "key": _key(form), "name": "fuzz", "caps": ["chat"]}
    if v is not missing:
        obj["v"] = v
    if nonce is not missing:
        obj["nonce"] = nonce
    obj.update({k: x for k, x in extra.items() if k not in ("t",)})
    return json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _new() -> tuple[Handshake, bytes]:
    hs = Handshake(US, LocalHello(name="us", caps=["chat"]), IdGenerator())
    return hs, hs.start()[:-1]


@given(actions)
@example([("hello", "other", 0, NONCE, {}), ("auth", "other", "right", False, {})])
def test_done_only_after_the_key_holder_signs_the_transcript(steps):
    hs, mine = _new()
    last_hello = b""
    for step in steps:
        genuine = False
        if step[0] == "hello":
            line = last_hello = _hello_line(*step[1:])
        elif step[0] == "auth":
            _, signer, transcript, corrupt, extra = step
            theirs = last_hello if transcript != "no-hello" else b""
            signed = (auth_transcript(theirs, mine) if transcript == "right"
                      else auth_transcript(mine, theirs))
            sig = SIGNERS[signer].sign(signed)
            if corrupt:
                sig = sig[:-2] + ("AA" if not sig.endswith("AA") else "BB")
            # the holder of the hello's key (whichever key that is: "other" is
            # a stranger as good as any) signed the real transcript
            genuine = (transcript == "right" and not corrupt and theirs == hs.peer_hello
                       and hs.peer_key == SIGNERS[signer].key)
            line = json.dumps({"t": "auth", "id": "01K5ZQ0Y6S7C8D9E0F1G2H3J4Z", "sig": sig,
                               **extra}, separators=(",", ":")).encode("utf-8", "surrogatepass")
        else:
            line = step[1]
        was_done = hs.done
        try:
            reply = hs.receive(line)
        except ProtocolError as e:
            assert e.code in KNOWN or e.code == ""
            assert not hs.done or was_done
            event(f"refused: {e.code or 'peer err'}")
            return  # the connection closes here
        if hs.done and not was_done:
            assert genuine, f"handshake finished on {line[:200]!r}"
            event("finished")
            assert verify(hs.peer_key, auth_transcript(hs.peer_hello, hs.my_hello),
                          hs.peer_auth["sig"])
        if reply is not None:  # our auth, sent after an accepted hello
            sig = json.loads(reply)["sig"]
            assert verify(US.key, auth_transcript(mine, hs.peer_hello), sig)


@given(st.dictionaries(st.sampled_from(["about", "addr", "shares", "x", "caps"]),
                       json_values(4), max_size=3), st.sampled_from(["peer", "peer="]))
def test_an_honest_peer_always_gets_through(extra, form):
    hs, mine = _new()
    hello = _hello_line(form, 0, NONCE, extra)
    reply = hs.receive(hello)
    assert reply is not None and hs.peer_key == PEER.key
    assert hs.receive(json.dumps({"t": "auth", "sig": PEER.sign(auth_transcript(hello, mine))})
                      .encode()) is None
    assert hs.done
