"""The TLS context of a ``wss://`` dial, for the daemon's dialer and ``awp conform`` alike.

The system trust store, plus the PEM file given (the home's ``ws-ca.pem``, or
``awp conform --ca FILE``), read as :func:`~awp.transport.wsconfig.read_ca_file`
reads it: no symbolic link, a regular file, bounded.  ALPN says ``http/1.1``
since the upgrade is an HTTP/1.1 request.
"""

from __future__ import annotations

import ssl

from .wsconfig import read_ca_file

__all__ = ["client_context"]


def client_context(ca_file: str = "", *, required: bool = False) -> ssl.SSLContext:
    """A verifying client context; ``ValueError`` or ``ssl.SSLError`` for a CA file
    that cannot be trusted (the caller says so in its own words).

    ``required``: the file was named by the user (``--ca``), so a missing or
    empty one is an error; the home's file is optional.
    """
    ctx = ssl.create_default_context()
    if ca_file:
        pem = read_ca_file(ca_file)
        if not pem and required:
            raise ValueError(f"{ca_file} does not exist or is empty")
        if pem:
            ctx.load_verify_locations(cadata=pem)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
