"""Who may read and who may post a topic: a pure function of the topic and the grants.

Every host decides alone, with what it holds, and all honest hosts must
decide the same, or the copies of a topic would never converge.  So:

* The owner's topic document is the authority: its ``members`` list names
  keys that may read or post (until a time), and it travels to every
  subscriber over any path of readers.  A grant inside a record (``grant``,
  and ``via`` for an introduced one) also counts, as before members existed.
* Posting is judged when a host takes the record, at the host's clock, never
  at the record's own ``ts``: an author chooses its ``ts``, so judging by it
  let a revoked or expired author backdate records into the topic.  A grant
  counts when it has not expired and was never revoked; a member when its
  ``until`` has not passed.  A record a host took before a revocation
  stays.
* Grants bound to one peer (``aud``) never count: a board decision must be
  the same everywhere.
* One level of introduction, as for direct grants (SPEC.md section 10): a
  key holding ``introduce`` and the board capability from the owner may pass
  that capability on, but no more than it holds itself.
* Reading is judged by the host that serves a subscriber, at its clock:
  it decides what it sends, not what the subscriber already has.
"""

from __future__ import annotations

import threading

from ..wire.board import FUTURE_MS, Policy, Record, cap_covers, grant_name, is_owner
from ..wire.grants import check_grant
from ..wire.timefmt import parse_ts


def grant_counts(g: object, *, owner: str, sub: str, topic: str, what: str, at_ms: int,
                 policy: Policy | None, via: object = None) -> bool:
    """Whether grant ``g`` (with introducer grant ``via``) lets ``sub`` do ``what`` at ``at_ms``."""
    if not _usable(g, sub=sub, at_ms=at_ms, policy=policy):
        return False
    assert isinstance(g, dict)
    if not any(cap_covers(c, what, topic) for c in g["caps"]):
        return False
    if is_owner(owner, g["iss"]):
        return via is None
    # introduced: ``via`` is the owner's grant to the issuer, with introduce and the cap
    if not _usable(via, sub=g["iss"], at_ms=at_ms, policy=policy):
        return False
    assert isinstance(via, dict)
    return (is_owner(owner, via["iss"]) and "introduce" in via["caps"]
            and any(cap_covers(c, what, topic) for c in via["caps"]))


# Grant objects already checked: (the grant, signed and well formed, its name), by id.
# A relay asks whether a subscriber may read for every record it sends it, and
# the subscriber's grant (from its board-sub, the same object every time) cost
# a signature check and a hash each time: 0.18 ms a record a link.  The entry
# holds the grant, so its id is not reused while it is remembered; grants are
# never changed once parsed.  Bounded; a lock, since the store's thread asks too.
_CHECKED: dict[int, tuple[dict, bool, str]] = {}
_CHECKED_MAX = 1024
_checked_lock = threading.Lock()


def _checked(g: dict) -> tuple[bool, str]:
    """Whether ``g`` is well formed and signed by its issuer, and its name (memoized)."""
    hit = _CHECKED.get(id(g))
    if hit is not None and hit[0] is g:
        return hit[1], hit[2]
    ok = not check_grant(g)
    name = grant_name(g) if ok else ""
    with _checked_lock:
        if len(_CHECKED) >= _CHECKED_MAX:
            del _CHECKED[next(iter(_CHECKED))]
        _CHECKED[id(g)] = (g, ok, name)
    return ok, name


def _usable(g: object, *, sub: str, at_ms: int, policy: Policy | None) -> bool:
    if not isinstance(g, dict) or "aud" in g or g.get("sub") != sub or g.get("iss") == sub:
        return False
    ok, name = _checked(g)
    if not ok:
        return False
    try:
        if parse_ts(g["exp"]) <= at_ms:
            return False
    except ValueError:
        return False
    if policy is not None:
        cut = policy.revoked.get(name)
        if cut is not None and cut <= at_ms:
            return False
    return True


def may_post(rec: Record, policy: Policy | None, now_ms: int) -> str:
    """Empty when ``rec`` may be in its topic; otherwise why not.

    ``policy`` is the newest topic document this host holds (None: none yet,
    and then only the owner's own records are taken).  Topic documents
    themselves are the owner's and always pass here (``check_record``
    already made sure the owner signed them).
    """
    if rec.author == rec.owner:
        return ""
    if rec.kind in ("topic", "hide", "lease"):
        return "only the owner signs that"
    if policy is None:
        return "no topic document yet"
    if rec.author in policy.banned:
        return "author is banned from this topic"
    if rec.kind == "delete":
        return ""  # about the author's own post: a view rule, no grant needed
    if policy.post_open or policy.member(rec.author, "post", now_ms):
        return ""
    if grant_counts(rec.doc.get("grant"), owner=rec.owner, sub=rec.author, topic=rec.topic,
                    what="post", at_ms=now_ms, policy=policy, via=rec.doc.get("via")):
        return ""
    return "no grant to post here"


TOO_EARLY = "dated too far ahead"


def admit(rec: Record, policy: Policy | None, now_ms: int) -> str:
    """Empty when a host should take ``rec`` now; otherwise why not.

    Adds to :func:`may_post` the two rules that are not about rights: a
    record dated more than 5 minutes ahead waits (it is offered again later),
    and a post or edit must fit the topic's ``max_post``.
    """
    if rec.ts - now_ms > FUTURE_MS:
        return TOO_EARLY
    if policy is not None and rec.kind in ("post", "edit") and rec.size > policy.max_post:
        return "larger than the topic's max_post"
    return may_post(rec, policy, now_ms)


def may_read(key: str, *, topic: str, owner: str, policy: Policy | None, now_ms: int,
             grant: object = None, via: object = None) -> bool:
    """Whether a host should send ``topic``'s records to subscriber ``key``.

    A subscriber proves its right with the grant (and introducer grant) it
    sent when subscribing, or by being a member in the topic document; a
    post grant implies read.  Without a topic document only the owner is
    served.
    """
    if is_owner(owner, key):
        return True
    if policy is None or key in policy.banned:
        return False
    if policy.read_open or policy.member(key, "read", now_ms):
        return True
    return grant_counts(grant, owner=owner, sub=key, topic=topic, what="read", at_ms=now_ms,
                        policy=policy, via=via)
