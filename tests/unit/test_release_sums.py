"""SHA256SUMS and its signature (awp/wire/release.py)."""

from __future__ import annotations

import json

import pytest

from awp.wire.keys import Identity
from awp.wire.release import ReleaseError, check_sig, parse_sums, sign, sums_text

KEY = Identity(b"\x05" * 32)
OTHER = Identity(b"\x06" * 32)


def test_sums_round_trip_sorted_in_sha256sum_form():
    text = sums_text({"b.whl": "1" * 64, "a.tar.gz": "2" * 64})
    assert text == f"{'2' * 64}  a.tar.gz\n{'1' * 64}  b.whl\n"
    assert parse_sums(text) == {"a.tar.gz": "2" * 64, "b.whl": "1" * 64}
    assert parse_sums(f"{'3' * 64} *c.whl\n") == {"c.whl": "3" * 64}  # binary-mode marker


@pytest.mark.parametrize("bad", [
    "", "nothing here\n", f"{'1' * 63}  a\n", f"{'1' * 64}  ../a\n", f"{'1' * 64}  d/a\n",
    f"{'1' * 64}  a\n{'2' * 64}  a\n", f"{'1' * 64}  ..\n", f"{'G' * 64}  a\n",
])
def test_bad_sums_are_refused(bad):
    with pytest.raises(ReleaseError):
        parse_sums(bad)


def test_a_signature_binds_the_key_and_the_exact_sums():
    sums = sums_text({"a.whl": "1" * 64}).encode()
    sig = sign(KEY, sums)
    assert check_sig(sig, sums, {KEY.key}) == KEY.key
    with pytest.raises(ReleaseError, match="another SHA256SUMS"):
        check_sig(sig, sums + b"\n", {KEY.key})
    with pytest.raises(ReleaseError, match="not a release key you trust"):
        check_sig(sig, sums, {OTHER.key})
    doc = json.loads(sig)
    doc["key"] = OTHER.key  # claims another signer
    with pytest.raises(ReleaseError, match="does not verify"):
        check_sig(json.dumps(doc), sums, {OTHER.key})
    for junk in ("", "[]", '{"k":"release"}', "not json"):
        with pytest.raises(ReleaseError):
            check_sig(junk, sums, {KEY.key})
