"""The daemon's identity file, ``identity.json``: read it, or make one on first start.

Kept in the daemon (not the base package) because it needs the wire's key
types: the base package imports nothing of ours.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..base.files import write_private
from ..base.home import IDENTITY_NAME, HomeError, path
from ..wire import rotation
from ..wire.b64 import b64decode_any, b64url
from ..wire.keys import Identity

MAX_IDENTITY_BYTES = 64 * 1024  # identity.json is read whole, and is never near this


def load_identity_seed(home: str) -> bytes:
    """The Ed25519 seed from ``identity.json``, creating one on first start."""
    file = path(home, IDENTITY_NAME)
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read(MAX_IDENTITY_BYTES + 1)  # ours is about 120 bytes
        if len(text) > MAX_IDENTITY_BYTES:
            raise ValueError(f"over {MAX_IDENTITY_BYTES} bytes")
        data = json.loads(text)
        seed = b64decode_any(data["seed"])
        if len(seed) != 32:
            raise ValueError("seed is not 32 bytes")
        try:
            if os.stat(file).st_mode & 0o077:
                os.chmod(file, 0o600)
        except OSError:
            pass
        return seed
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise HomeError(f"{file} is unreadable ({e}); move it away to start with a new identity"
                        ) from None
    ident = Identity.generate()
    try:
        write_private(file, json.dumps({"key": ident.key, "seed": b64url(ident.seed)}) + "\n")
    except OSError as e:
        raise HomeError(f"cannot write {file}: {e.strerror}") from None
    return ident.seed


MAX_KEPT_RECORDS = 32  # our own rotation records kept in identity.json (auth sends the newest)


@dataclass
class IdentityFile:
    """``identity.json``: the current seed, the seed of the next key, our records.

    The reference reads ``key`` and ``seed`` only; ``next`` (the seed of the
    key our next rotation moves to, committed in the newest record or, before
    any, announced in auth) and ``rotations`` (our own records, oldest first)
    are ours.  The seed of a key rotated away is never written again.
    """

    seed: bytes
    next_seed: bytes
    rotations: list[dict] = field(default_factory=list)

    @property
    def identity(self) -> Identity:
        return Identity(self.seed)

    @property
    def next_key(self) -> str:
        return Identity(self.next_seed).key

    def text(self) -> str:
        ident = self.identity
        return json.dumps({"key": ident.key, "seed": b64url(self.seed),
                           "next": b64url(self.next_seed),
                           "rotations": self.rotations[-MAX_KEPT_RECORDS:]}) + "\n"


def _write(file: str, data: IdentityFile) -> None:
    try:
        write_private(file, data.text())
    except OSError as e:
        raise HomeError(f"cannot write {file}: {e.strerror}") from None


def load_identity(home: str) -> IdentityFile:
    """The whole identity file; a home without a next key gets one now (written first)."""
    seed = load_identity_seed(home)
    file = path(home, IDENTITY_NAME)
    try:
        with open(file, encoding="utf-8") as f:
            data = json.loads(f.read(MAX_IDENTITY_BYTES + 1))
        nxt = b64decode_any(data["next"]) if isinstance(data.get("next"), str) else b""
        recs = data.get("rotations")
        rotations = [r for r in recs if isinstance(r, dict)] if isinstance(recs, list) else []
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise HomeError(f"{file} is unreadable ({e})") from None
    if len(nxt) == 32:
        return IdentityFile(seed, nxt, rotations)
    out = IdentityFile(seed, Identity.generate().seed, rotations)
    _write(file, out)
    return out


def rotate_identity(home: str, now: int) -> tuple[dict, IdentityFile]:
    """Move the home to its committed next key; returns (our new record, the new file).

    The rename of ``identity.json`` is the whole commit: killed before it,
    nothing happened; after it, the daemon's next start finds the record
    and owes it to every peer (awp/node/rotate.py).  The old seed is held
    in memory only to sign the record.
    """
    cur = load_identity(home)
    old, new, after = cur.identity, Identity(cur.next_seed), Identity.generate()
    seq = int(cur.rotations[-1].get("seq", 0)) + 1 if cur.rotations else 1
    rec = rotation.make(old, new, seq, after.key, now)
    out = IdentityFile(new.seed, after.seed, [*cur.rotations, rec])
    _write(path(home, IDENTITY_NAME), out)
    return rec, out
