"""Fuzz the home's config.json: any content gives settings or one clear error.

Every file in the home is untrusted (a hand edit, a bad merge, a disk that
flipped a byte).  Whatever config.json holds, resolving the settings either
succeeds or raises :class:`HomeError` with a message for the user; nothing
else escapes to end the daemon's start with a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import fields

from fuzzgen import edge_ints, json_values, mutated, texts
from hypothesis import event, example, given
from hypothesis import strategies as st

from awp.base.durations import MAX_SECONDS
from awp.base.home import HomeError
from awp.base.limits import Limits
from awp.daemon.keyfile import load_identity_seed
from awp.daemon.settings import Flags, resolve

TOP = ("name", "about", "model", "harness", "listen", "advertise", "policy", "presence",
       "share_with", "blob_limit", "ping_interval", "outbox_ttl", "limits", "trace",
       "verbose", "allow_plaintext")
POLICY = ("accept", "allow", "trust", "serve", "root")
LIMITS = tuple(f.name for f in fields(Limits))

values = st.one_of(json_values(4), edge_ints, texts,
                   st.sampled_from(["30s", "1h", "8MiB", "64KiB", "-1", "0", "1e999", "any",
                                    "allowlist", "tcp:127.0.0.1:0", "tailcat", "fs:read",
                                    "exec", "ed25519:AAAA", 1e308, -0.5, 0.0, 10 ** 400,
                                    "1" + "0" * 400 + "KiB", "inf", "nan", "1e308s"]))
configs = st.fixed_dictionaries({}, optional={
    **{k: values for k in TOP},
    "policy": st.one_of(values, st.fixed_dictionaries(
        {}, optional={k: st.one_of(values, st.lists(values, max_size=3)) for k in POLICY})),
    "limits": st.one_of(values, st.fixed_dictionaries(
        {}, optional={k: values for k in LIMITS})),
    "listen": st.one_of(values, st.lists(values, max_size=3)),
})


def _resolve(text: bytes) -> str:
    home = tempfile.mkdtemp(prefix="awpcfg")
    try:
        with open(os.path.join(home, "config.json"), "wb") as f:
            f.write(text)
        try:
            s = resolve(home, Flags(start_dir=home), {}, env={})
        except HomeError as e:
            assert str(e).strip(), "an error with no message"
            return "refused"
        # what is taken can be used: times fit in milliseconds, nothing is NaN
        for name, v in [("ping_interval", s.ping_interval), ("outbox_ttl", s.outbox_ttl),
                        *((f.name, getattr(s.limits, f.name)) for f in fields(Limits))]:
            assert v == v and v >= 0, (name, v)
            if name in ("ping_interval", "outbox_ttl", "write_timeout", "gap_timeout",
                        "unclaimed_blob_ttl"):
                assert v <= MAX_SECONDS, (name, v)
            int(v * 1000)
        return "taken"
    finally:
        shutil.rmtree(home, ignore_errors=True)


@given(configs)
@example({"limits": {"json_depth": 1e308}})
@example({"ping_interval": 1e308})
@example({"blob_limit": 1e308})
@example({"outbox_ttl": 1e308})  # was taken, then the daemon's start died on it
@example({"ping_interval": 10 ** 400})
@example({"limits": {"peer_lines_per_second": 10 ** 400}})  # OverflowError, not a message
def test_any_config_object_gives_settings_or_a_clear_error(cfg):
    try:
        text = json.dumps(cfg).encode("utf-8", "surrogatepass")
    except ValueError:
        return
    event(_resolve(text))


@given(st.one_of(st.binary(max_size=200),
                 st.integers(900, 3000).map(lambda d: b'{"x":' + b"[" * d + b"]" * d + b"}"),
                 mutated(configs.map(lambda c: json.dumps(c).encode("utf-8", "surrogatepass")))))
@example(b'{"blob_limit": Infinity}')  # json.load took it; int() of it raised
def test_any_config_bytes_give_settings_or_a_clear_error(raw):
    event(_resolve(raw))


@given(st.one_of(
    st.binary(max_size=120),
    st.fixed_dictionaries({}, optional={"seed": values, "key": values}).map(
        lambda d: json.dumps(d).encode("utf-8", "surrogatepass")),
    st.integers(900, 3000).map(lambda d: b"[" * d + b"]" * d)))
@example(b'{"seed": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"}')
def test_any_identity_file_gives_a_seed_or_a_clear_error(raw):
    home = tempfile.mkdtemp(prefix="awpid")
    try:
        with open(os.path.join(home, "identity.json"), "wb") as f:
            f.write(raw)
        try:
            seed = load_identity_seed(home)
        except HomeError as e:
            assert "identity.json" in str(e)
            event("refused")
            return
        assert isinstance(seed, bytes) and len(seed) == 32
        event("taken")
    finally:
        shutil.rmtree(home, ignore_errors=True)
