"""The CAs a local caller adds for ``wss://`` (``awp connect --ca FILE``), kept in the home.

A private CA (a test's, a company's) is trusted beside the system store
from then on, redials and restarts included.  The PEM is checked before it
is kept: bounded, only ``CERTIFICATE`` blocks, and loadable by ``ssl``.
Adding the same certificate twice keeps one copy.
"""

from __future__ import annotations

import os
import re
import ssl

from ..transport.wsconfig import MAX_CA_BYTES, MAX_CA_FILE_BYTES, ca_path, read_ca_file

_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")


class CaError(ValueError):
    """The text handed in is no usable CA certificate; the message says why."""


def add_ca(home: str, pem: str) -> int:
    """Keep the certificates of ``pem`` in the home's CA file; how many were new."""
    if len(pem.encode()) > MAX_CA_BYTES:
        raise CaError(f"the CA file is over {MAX_CA_BYTES // 1024} KiB")
    blocks = _BLOCK.findall(pem)
    if not blocks:
        raise CaError("the CA file holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        ssl.create_default_context().load_verify_locations(cadata="\n".join(blocks))
    except ssl.SSLError as e:
        raise CaError(f"the CA file does not load as certificates: {e.reason or e}") from None
    path = ca_path(home)
    try:
        kept = read_ca_file(path)
    except ValueError as e:
        raise CaError(str(e)) from None
    new = list(dict.fromkeys(b.replace("\r", "") for b in blocks if b.replace("\r", "") not in kept))
    if not new:
        return 0
    text = "".join(b + "\n" for b in new)
    if len(kept) + len(text) > MAX_CA_FILE_BYTES:
        raise CaError(f"{path} would grow over {MAX_CA_FILE_BYTES // 1024} KiB;"
                      " remove the CAs no longer needed from it first")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise CaError(f"cannot write {path}: {e.strerror}") from None
    with os.fdopen(fd, "a", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    return len(new)
