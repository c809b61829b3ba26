"""Pure wire-format code: framing, envelopes, ids, keys, canonical JSON.

Nothing here does I/O or imports trio or sqlite, so every rule can be unit
tested and reused by tools that speak the protocol without a daemon.
"""
