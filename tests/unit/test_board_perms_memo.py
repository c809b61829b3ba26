"""A grant is checked (signature, shape, name) once per grant object: a relay asks
whether a subscriber may read for every record it sends, with the same grant."""

from __future__ import annotations

import copy

import pytest

from awp.board import perms
from awp.wire.board import check_policy, make_topic
from awp.wire.grants import make_grant
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms

OWNER, READER = Identity.generate(), Identity.generate()
TOPIC = OWNER.key + "/x"


def _policy(**more: object):
    return check_policy(make_topic(OWNER, "x", 1, now_ms(), read="grant", post="grant",
                                   **more).doc)


def _reads(g: object, pol) -> bool:
    return perms.may_read(READER.key, topic=TOPIC, owner=OWNER.key, policy=pol,
                          now_ms=now_ms(), grant=g)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = perms.check_grant

    def counting(g: object) -> str:
        seen.append(g)
        return real(g)

    monkeypatch.setattr(perms, "check_grant", counting)
    monkeypatch.setattr(perms, "_CHECKED", {})
    return seen


def test_the_same_grant_is_checked_once(checks: list[object]) -> None:
    g = make_grant(OWNER, READER.key, [f"board:post:{OWNER.key}/*"], now_ms() + 3_600_000)
    pol = _policy()
    assert all(_reads(g, pol) for _ in range(5))
    assert checks == [g]
    again = copy.deepcopy(g)  # another object, even with the same content: checked
    assert _reads(again, pol) and len(checks) == 2


def test_what_changes_with_time_or_the_document_is_judged_each_time(
        checks: list[object]) -> None:
    g = make_grant(OWNER, READER.key, [f"board:post:{OWNER.key}/*"], now_ms() + 3_600_000)
    assert _reads(g, _policy())
    revoked = _policy(revoked=[{"grant": perms.grant_name(g), "at": "2020-01-01T00:00:00Z"}])
    assert not _reads(g, revoked)  # the memo keeps the name, not the answer
    expired = make_grant(OWNER, READER.key, [f"board:post:{OWNER.key}/*"], now_ms() - 1000)
    assert not _reads(expired, _policy())


def test_a_forged_grant_stays_refused(checks: list[object]) -> None:
    g = make_grant(OWNER, READER.key, [f"board:post:{OWNER.key}/*"], now_ms() + 3_600_000)
    forged = dict(g, caps=[f"board:post:{OWNER.key}/*", "board:post:*"])  # the same sig
    pol = _policy()
    assert _reads(g, pol) and not _reads(forged, pol) and not _reads(forged, pol)


def test_the_memo_is_bounded(checks: list[object]) -> None:
    g = make_grant(OWNER, READER.key, [f"board:post:{OWNER.key}/*"], now_ms() + 3_600_000)
    pol = _policy()
    kept = [copy.deepcopy(g) for _ in range(perms._CHECKED_MAX + 10)]
    assert all(_reads(x, pol) for x in kept)
    assert len(perms._CHECKED) == perms._CHECKED_MAX
