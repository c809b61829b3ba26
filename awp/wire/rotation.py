"""Key rotation records: one identity moving from one Ed25519 key to the next.

A record ``{old, new, seq, next, ts}`` says "the identity that was ``old`` is
now ``new``".  Both keys sign it: ``old`` so that nobody else can move an
identity away, ``new`` so that nobody can claim an identity for a key they do
not hold.  ``next`` commits to the key of the *following* rotation (the hash
of its public key, made now and kept in the home), so that a thief of the
current key alone cannot rotate the identity to a key of their own: KERI's
pre-rotation.

This module is pure: it builds and signs records, checks their shape and
signatures, and judges a record against what a host already knows
(:class:`Known`), so every rule is unit-tested with fixed seeds (SPEC.md,
"Key rotation", has the test vectors).  What a host does with a verdict
(store, re-key a peer, keep evidence) is the store's and the engine's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .b64 import b64url
from .canonical import canonical_bytes, canonical_json
from .keys import Identity, KeyError_, decode_key, normalize_key, verify
from .timefmt import format_ts, parse_ts

CAP = "rotate"  # hello.caps: we read ``auth.rotation`` and know "rotated to" refusals
CONTEXT = b"awp-rotate-v1"  # what both signatures cover: CONTEXT 0x00 canonical body
NEXT_CONTEXT = b"awp-rotate-next-v1"  # the commitment: SHA-256(NEXT_CONTEXT 0x00 raw key)
SAFETY_CONTEXT = b"awp-safety-v1"
MAX_RECORD_BYTES = 2048  # one record's canonical JSON (ours are about 400 bytes)
MAX_CHAIN = 8  # records one auth line carries: the newest ones
MAX_SEQ = 2**53 - 1  # JSON numbers every reader keeps exact

_SIGS = ("sig_old", "sig_new")


class RotationError(ValueError):
    """A record refused; ``kind`` names the rule (``bad``, ``forged``, ``old_seq``,
    ``gap``, ``uncommitted``, ``conflict``, ``retired``)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def commitment(key: str) -> str:
    """The ``next`` value that commits to ``key``: unpadded base64url of
    SHA-256(``awp-rotate-next-v1`` 0x00 raw public key)."""
    raw = decode_key(key)
    return b64url(hashlib.sha256(NEXT_CONTEXT + b"\x00" + raw).digest())


def body(rec: dict) -> dict:
    """The record without its two signatures: what is signed (unknown fields included)."""
    return {k: v for k, v in rec.items() if k not in _SIGS}


def signed_bytes(rec: dict) -> bytes:
    """``awp-rotate-v1`` 0x00 canonical JSON of the body: what both keys sign."""
    return CONTEXT + b"\x00" + canonical_bytes(body(rec))


def make(old: Identity, new: Identity, seq: int, next_key: str, ts_ms: int) -> dict:
    """A record moving ``old`` to ``new``, committing to ``next_key``, signed by both."""
    rec: dict = {"old": old.key, "new": new.key, "seq": seq, "next": commitment(next_key),
                 "ts": format_ts(ts_ms)}
    data = signed_bytes(rec)
    rec["sig_old"] = old.sign(data)
    rec["sig_new"] = new.sign(data)
    return rec


def record_id(rec: dict) -> str:
    """Hex of the first 16 bytes of SHA-256 of the whole canonical record: how tools name it."""
    return hashlib.sha256(canonical_bytes(rec)).hexdigest()[:32]


@dataclass(frozen=True)
class Rotation:
    """A record whose shape and both signatures checked out."""

    old: str
    new: str
    seq: int
    next: str
    ts_ms: int
    raw: dict  # the record as it came, kept and passed on verbatim

    @property
    def text(self) -> str:
        return canonical_json(self.raw)


def check(rec: object) -> Rotation:
    """Shape, then both signatures; raises :class:`RotationError` (``bad``/``forged``)."""
    if not isinstance(rec, dict):
        raise RotationError("bad", "a rotation record is a JSON object")
    try:
        size = len(canonical_bytes(rec))
    except (TypeError, ValueError) as e:
        raise RotationError("bad", f"not canonical JSON: {e}") from None
    if size > MAX_RECORD_BYTES:
        raise RotationError("bad", f"record over {MAX_RECORD_BYTES} bytes")
    try:
        old = normalize_key(rec.get("old"))  # type: ignore[arg-type]
        new = normalize_key(rec.get("new"))  # type: ignore[arg-type]
    except KeyError_ as e:
        raise RotationError("bad", f"record key: {e}") from None
    if old != rec["old"] or new != rec["new"]:
        raise RotationError("bad", "record keys are not in canonical form")
    if old == new:
        raise RotationError("bad", "a record rotates a key to itself")
    seq = rec.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        raise RotationError("bad", "seq must be an integer from 1")
    nxt = rec.get("next")
    if not isinstance(nxt, str) or len(nxt) != 43:
        raise RotationError("bad", "next must be 43 characters of base64url")
    try:
        ts_ms = parse_ts(rec.get("ts"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise RotationError("bad", "ts is not an RFC 3339 time") from None
    data = signed_bytes(rec)
    for field, key in (("sig_old", old), ("sig_new", new)):
        sig = rec.get(field)
        if not isinstance(sig, str) or not verify(key, data, sig):
            raise RotationError("forged", f"{field} does not verify")
    return Rotation(old, new, seq, nxt, ts_ms, rec)


def follow(chain: object, start: str) -> list[Rotation]:
    """Check a chain carried by someone else (a topic document): records that move
    ``start`` on, one key after another, each signed by both its keys, each
    following the one before (seq + 1, its key the one committed to).
    Raises :class:`RotationError`; returns the records, oldest first."""
    if not isinstance(chain, list) or not 1 <= len(chain) <= MAX_CHAIN:
        raise RotationError("bad", f"a rotation chain is a list of 1 to {MAX_CHAIN} records")
    out: list[Rotation] = []
    at = start
    for rec in chain:
        rot = check(rec)
        if rot.old != at:
            raise RotationError("bad", f"the chain does not continue from {at}")
        if out and (rot.seq != out[-1].seq + 1 or commitment(rot.new) != out[-1].next):
            raise RotationError("uncommitted", f"{rot.new} does not follow {rot.old}'s record")
        out.append(rot)
        at = rot.new
    return out


@dataclass
class Known:
    """What a host knows when a record arrives (looked up by the store).

    ``same_old``: the record it already holds that rotated ``rec.old`` away;
    ``before``: the record whose ``new`` is ``rec.old`` (the one this follows);
    ``committed``: the ``next`` it holds for ``rec.old`` when ``before`` is
    unknown (first announced in an auth line); ``retired``: whether
    ``rec.new`` is itself a key already rotated away.
    """

    same_old: Rotation | None = None
    before: Rotation | None = None
    committed: str = ""
    retired: bool = False


NEW = "new"
DUPLICATE = "duplicate"


def judge(rot: Rotation, known: Known) -> str:
    """``NEW`` (apply it) or ``DUPLICATE`` (held already); else :class:`RotationError`.

    A second, different record rotating the same old key is ``conflict``:
    both verified, so the identity's keys signed two histories, and the
    caller keeps the pair as evidence (as a topic owner's equivocation).
    """
    if known.same_old is not None:
        if canonical_json(body(known.same_old.raw)) == canonical_json(body(rot.raw)):
            return DUPLICATE
        raise RotationError("conflict", f"{rot.old} was already rotated to {known.same_old.new}"
                            f" (seq {known.same_old.seq}); this record says {rot.new}")
    if known.retired:
        raise RotationError("retired", f"{rot.new} was already rotated away")
    if known.before is not None:
        want = known.before.seq + 1
        if rot.seq < want:
            raise RotationError("old_seq", f"seq {rot.seq} is not after {known.before.seq}")
        if rot.seq > want:
            raise RotationError("gap", f"seq {rot.seq} skips after {known.before.seq}")
        committed = known.before.next
    else:
        committed = known.committed
    if committed and commitment(rot.new) != committed:
        raise RotationError("uncommitted", f"{rot.new} is not the key {rot.old} committed to")
    return NEW


def safety_number(a: str, b: str) -> str:
    """60 digits in 12 groups of 5, the same whichever side computes it.

    SHA-512 over ``awp-safety-v1`` 0x00 and the two raw keys in byte order,
    each 5-byte slice of the digest read as a number modulo 100,000.
    """
    ka, kb = sorted((decode_key(a), decode_key(b)))
    digest = hashlib.sha512(SAFETY_CONTEXT + b"\x00" + ka + kb).digest()
    groups = [int.from_bytes(digest[i:i + 5], "big") % 100000 for i in range(0, 60, 5)]
    return " ".join(f"{g:05d}" for g in groups)


def safety_short(number: str) -> str:
    """The first four groups: what two people read aloud to each other."""
    return " ".join(number.split()[:4])
