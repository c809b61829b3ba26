"""The daemon's identity file, ``identity.json``: read it, or make one on first start.

Kept in the daemon (not the base package) because it needs the wire's key
types: the base package imports nothing of ours.
"""

from __future__ import annotations

import json
import os

from ..base.files import write_private
from ..base.home import IDENTITY_NAME, HomeError, path
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
