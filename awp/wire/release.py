"""A release's checksums and their signature: what ``awp verify-release`` checks.

A release directory holds its files, ``SHA256SUMS`` (one ``<hex>  <name>``
line a file, the format ``sha256sum -c`` reads) and ``SHA256SUMS.sig``: a
JSON object signed by the release key, an ordinary awp identity::

    {"k": "release", "key": "ed25519:…", "sums": "<sha256 hex of SHA256SUMS>",
     "sig": "…"}

The signature covers the canonical JSON of the other fields under the
context ``awp-release-v0``, so it can never be mistaken for a record, an ask
or a hello signature by the same key.  Pure: the CLI reads the files.
"""

from __future__ import annotations

import hashlib
import json
import re

from .canonical import canonical_bytes
from .keys import Identity, verify

SUMS = "SHA256SUMS"
SIG = "SHA256SUMS.sig"
CONTEXT = b"awp-release-v0\n"
MAX_SUMS_BYTES = 1 << 20  # a release lists a handful of files
MAX_SIG_BYTES = 4096

# The project's release keys, once it publishes one; until then a release is checked
# against the keys given with --key (README.md, "Checking a download").
RELEASE_KEYS: frozenset[str] = frozenset()

_LINE = re.compile(r"^([0-9a-f]{64}) [ *]([^/\\\x00-\x1f]+)$")


class ReleaseError(ValueError):
    """What is wrong with a release, in words that name the file."""


def sums_text(digests: dict[str, str]) -> str:
    """``SHA256SUMS`` for ``{name: sha256 hex}``, sorted by name."""
    for name in digests:
        if not _LINE.match(f"{'0' * 64}  {name}"):
            raise ReleaseError(f"{name!r}: not a plain file name")
    return "".join(f"{digests[n]}  {n}\n" for n in sorted(digests))


def parse_sums(text: str) -> dict[str, str]:
    """``{name: sha256 hex}`` from ``SHA256SUMS``; a bad line or a name twice is refused."""
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None or m.group(2) in (".", ".."):
            raise ReleaseError(f"{SUMS} line {i}: not '<sha256 hex>  <file name>'")
        if m.group(2) in out:
            raise ReleaseError(f"{SUMS} line {i}: {m.group(2)} listed twice")
        out[m.group(2)] = m.group(1)
    if not out:
        raise ReleaseError(f"{SUMS} lists no file")
    return out


def _body(key: str, sums: bytes) -> dict:
    return {"k": "release", "key": key, "sums": hashlib.sha256(sums).hexdigest()}


def sign(identity: Identity, sums: bytes) -> str:
    """``SHA256SUMS.sig``'s text for ``sums`` (the bytes of ``SHA256SUMS``)."""
    body = _body(identity.key, sums)
    body["sig"] = identity.sign(CONTEXT + canonical_bytes(body))
    return json.dumps(body, separators=(",", ":")) + "\n"


def check_sig(sig_text: str, sums: bytes, trusted: set[str] | frozenset[str]) -> str:
    """The signing key when ``sig_text`` is a valid signature over ``sums`` by a key in
    ``trusted``; :class:`ReleaseError` saying what failed otherwise."""
    try:
        doc = json.loads(sig_text)
    except ValueError:
        raise ReleaseError(f"{SIG} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("k") != "release" or not all(
            isinstance(doc.get(f), str) for f in ("key", "sums", "sig")):
        raise ReleaseError(f"{SIG} is not a release signature")
    body = {k: doc[k] for k in ("k", "key", "sums")}
    if body != _body(doc["key"], sums):
        raise ReleaseError(f"{SIG} signs another {SUMS} (its digest differs)")
    if not verify(doc["key"], CONTEXT + canonical_bytes(body), doc["sig"]):
        raise ReleaseError(f"{SIG}: the signature does not verify")
    if doc["key"] not in trusted:
        raise ReleaseError(f"{SIG} is signed by {doc['key']}, which is not a release key"
                           " you trust (--key KEY to add one)")
    return doc["key"]
