"""Every bound the daemon enforces on what others send it, in one place.

A peer's bytes, the files in the home and local callers are untrusted; each
field here caps one thing they can make us hold or do.  The defaults suit a
developer machine; ``config.json`` may change any of them under ``"limits"``
(sizes as integers or ``"8MiB"``-style strings, times as durations), and
``docs/threat-model.md`` says which attack each one answers.

Pure data: no I/O, so the engine, the store and the tests share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from .durations import parse_duration

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# Units each field is read in: "bytes", "count", "rate" (per second) or "seconds".
_KINDS: dict[str, str] = {}


def _kind(name: str, kind: str) -> None:
    _KINDS[name] = kind


@dataclass
class Limits:
    # Grants (a peer's grant lines and the grants we present in auth).
    grant_bytes: int = 4 * KiB              # one grant's canonical JSON
    grants_per_issuer: int = 16             # kept per issuer, subject and kind (held, presented)
    grants_per_peer: int = 64               # kept per peer that sent them (held and presented)
    present_bytes: int = 64 * KiB           # all grants we put in one auth line
    present_count: int = 32                 # grants we put in one auth line

    # Per peer and global budgets for inbound traffic (docs/threat-model.md).
    peer_inflight_bytes: int = 2 * MiB      # lines read, not yet stored, per connection
    peer_inflight_lines: int = 256          # lines read, not yet stored, per connection
    inflight_bytes: int = 32 * MiB          # bytes in flight over every connection
    large_line_bytes: int = 64 * KiB        # a line this long waits its turn to be parsed
    large_lines: int = 1                    # such lines parsed and stored at once (0: no bound)
    peer_lines_per_second: float = 2000.0   # sustained, per key; a faster peer is read later
    peer_burst_lines: int = 20000           # lines a key may send at once (a replayed backlog)
    peer_bytes_per_second: int = 8 * MiB    # sustained, per key
    peer_burst_bytes: int = 64 * MiB        # bytes a key may send at once (one 50 MiB file)
    peer_stored_bytes: int = 1 * GiB        # a key's inbound log and blobs on disk
    stored_bytes: int = 8 * GiB             # every key's inbound log and blobs together
    peer_connections: int = 4               # open connections from one authenticated key
    connections: int = 256                  # open inbound connections in all
    handshakes: int = 64                    # inbound connections still in their handshake
    peer_unclaimed_blob_bytes: int = 256 * MiB  # a key's blob bytes no stored msg names yet
    unclaimed_blob_ttl: float = 3600.0      # an unnamed blob is dropped after this
    # Bulk transfer (cap ``bulk``, SPEC.md "Bulk transfer"): files that travel
    # beside the line protocol on a side connection.
    bulk_bytes: int = 16 * GiB              # one bulk file, sent or accepted
    peer_bulk_bytes: int = 32 * GiB         # a key's bulk files on our disk, partial or whole
    bulk_min: int = 64 * MiB                # files this large (or over blob_limit) go the bulk way
    # Pair streams (cap ``pair``, SPEC.md "Pair streams"): live bytes on a side connection.
    pair_wait: float = 30.0                 # a granted request waits this long for an acceptor
    pair_per_peer: int = 2                  # pair streams (held or running) from one key
    pair_streams: int = 16                  # pair streams (held or running) in all

    # The board (SPEC.md section 14); the protocol's own bounds (64 KiB a record,
    # 512 KiB a line, 4,096 hashes a want) are fixed, and topics bound themselves.
    board_subscriptions: int = 256          # topics this host subscribes to
    board_link_bytes: int = 8 * MiB         # board lines queued for one peer; more wait for a digest
    board_serve_bytes: int = 64 * MiB       # records sent to one peer per minute on its asking
    board_claims_per_minute: int = 6000     # queue requests one peer makes of our queues
    board_submits_per_minute: int = 60000   # records one peer hands us to carry to (or, on
    #                                         our topics, to stamp as) a topic's owner
    board_queue_log: int = 10000            # rows in one queue's arbiter log before compacting
    board_award_window: float = 0.05        # claims on our queues arriving this close are
    #                                         served together, best bid first (the market)
    board_leases_per_claimant: int = 8      # leases one claimant holds at once in one of our queues
    board_head_every: float = 30.0          # we sign a head of each of our topics at least this
    #                                         often (0: only when it changed)
    board_stale_heads: int = 3              # a topic whose owner's head is this many heads
    #                                         overdue is stale: said, and asked of every peer
    board_ask_window: float = 300.0         # a signed queue ask dated further from our clock is
    #                                         refused
    board_ask_reorder: float = 5.0          # how far before a claimant's newest ask another of
    #                                         its asks may be dated and still be decided
    board_asks_per_claimant: int = 1024     # ask signatures remembered per claimant (replays)
    board_ask_claimants: int = 4096         # granted claimants whose asks we remember
    board_queue_seconds: float = 3.0        # our store writer's time one peer's queue requests
    #                                         may take a minute
    board_answers_kept: int = 4096          # answers to retried claims and completes kept to
    #                                         answer them without the writer (each kind)
    board_strikes_bar: int = 10             # a claimant's fails and expiries (its strikes) past
    #                                         which our queues award it nothing (0: never)

    # Links kept without business of our own (awp/node/business.py).
    kept_peers: int = 64                    # peers redialled only because they were recently
    #                                         connected or carry one of our topics
    warm_for: float = 1800.0                # a dropped link is redialled this long after it was up

    # Invites (awp invite): live ones at once; each is a row a redeemer can spend.
    invites: int = 1000

    # Key rotation (SPEC.md section 11): records of one peer's chain taken from one
    # auth line (two signature checks each), and pairs of conflicting records kept per key.
    rotation_chain: int = 8
    rotation_conflicts: int = 16
    # Operator keys (SPEC.md section 11): revocations of operators we do not trust
    # that we keep to pass on (a trusted operator's are always kept).
    op_revocations: int = 4096

    # The WebSocket binding (ws:HOST:PORT listeners and ws:// wss:// dials).
    ws_handshake_timeout: float = 10.0      # TCP accept (or dial) to the upgrade answered
    ws_frame_bytes: int = 2 * MiB           # one received data frame (a whole line fits)
    ws_message_bytes: int = 4 * MiB         # one received message, its frames together
    ws_upgrades_per_ip: int = 16            # connections from one address still upgrading

    # Time.
    write_timeout: float = 15.0             # each 256 KiB of a write to a peer (0: none)
    gap_timeout: float = 15.0               # an older line unacked while a newer one is (0: off)

    # Shape of what we parse.
    json_depth: int = 64                    # nesting of any JSON we parse (peer or local)
    api_body_bytes: int = 8 * MiB           # one request body on awp.sock (the web API takes none)
    mcp_line_bytes: int = 8 * MiB           # one JSON-RPC line to `awp mcp` (no call needs more
                                            # than a request body on awp.sock can carry)


for _f, _k in (
    ("grant_bytes", "bytes"), ("grants_per_issuer", "count"), ("grants_per_peer", "count"),
    ("present_bytes", "bytes"), ("present_count", "count"),
    ("peer_inflight_bytes", "bytes"), ("inflight_bytes", "bytes"),
    ("peer_inflight_lines", "count"), ("large_line_bytes", "bytes"), ("large_lines", "count"),
    ("peer_lines_per_second", "rate"), ("peer_burst_lines", "count"),
    ("peer_bytes_per_second", "bytes"), ("peer_burst_bytes", "bytes"),
    ("peer_stored_bytes", "bytes"), ("stored_bytes", "bytes"),
    ("peer_connections", "count"), ("connections", "count"), ("handshakes", "count"),
    ("peer_unclaimed_blob_bytes", "bytes"), ("unclaimed_blob_ttl", "seconds"),
    ("bulk_bytes", "bytes"), ("peer_bulk_bytes", "bytes"), ("bulk_min", "bytes"),
    ("pair_wait", "seconds"), ("pair_per_peer", "count"), ("pair_streams", "count"),
    ("write_timeout", "seconds"), ("gap_timeout", "seconds"), ("json_depth", "count"),
    ("api_body_bytes", "bytes"), ("mcp_line_bytes", "bytes"), ("board_subscriptions", "count"),
    ("board_link_bytes", "bytes"), ("board_serve_bytes", "bytes"),
    ("board_claims_per_minute", "count"), ("board_queue_log", "count"),
    ("board_submits_per_minute", "count"),
    ("board_award_window", "seconds"),
    ("kept_peers", "count"), ("warm_for", "seconds"),
    ("board_head_every", "seconds"), ("board_stale_heads", "count"),
    ("board_leases_per_claimant", "count"), ("board_strikes_bar", "count"),
    ("board_ask_window", "seconds"), ("board_ask_reorder", "seconds"),
    ("board_queue_seconds", "seconds"), ("board_answers_kept", "count"),
    ("board_asks_per_claimant", "count"), ("board_ask_claimants", "count"),
    ("invites", "count"), ("rotation_chain", "count"), ("rotation_conflicts", "count"),
    ("op_revocations", "count"),
    ("ws_handshake_timeout", "seconds"), ("ws_frame_bytes", "bytes"),
    ("ws_message_bytes", "bytes"), ("ws_upgrades_per_ip", "count"),
):
    _kind(_f, _k)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB|K|M|G)?\s*$", re.I)
_UNIT = {"b": 1, "k": KiB, "kib": KiB, "kb": 1000, "m": MiB, "mib": MiB, "mb": 1000 ** 2,
         "g": GiB, "gib": GiB, "gb": 1000 ** 3}


def parse_size(v: object) -> int:
    """Bytes for ``4096``, ``"4096"``, ``"64KiB"`` or ``"8MB"``; ``ValueError`` otherwise."""
    if isinstance(v, bool):
        raise ValueError("expected a size such as 65536 or \"64KiB\"")
    if isinstance(v, int):
        n = v
    elif isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and (m := _SIZE.match(v)):
        n = int(float(m.group(1)) * _UNIT[(m.group(2) or "b").lower()])
    else:
        raise ValueError("expected a size such as 65536 or \"64KiB\"")
    if n < 0:
        raise ValueError("a size cannot be negative")
    return n


def _parse(kind: str, v: object) -> float | int:
    if kind == "bytes":
        return parse_size(v)
    if kind == "seconds":
        if not isinstance(v, int | float | str) or isinstance(v, bool):
            raise ValueError("expected a duration such as \"30s\"")
        return parse_duration(v)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError("expected a number")
    if v < 0:
        raise ValueError("cannot be negative")
    if kind == "count":
        if not float(v).is_integer():
            raise ValueError("expected a whole number")
        return int(v)
    return float(v)


def limits_from_config(raw: object) -> Limits:
    """``Limits`` from the ``"limits"`` object of config.json; ``ValueError`` names the key."""
    if raw is None:
        return Limits()
    if not isinstance(raw, dict):
        raise ValueError("limits: expected an object such as {\"peer_stored_bytes\": \"1GiB\"}")
    known = {f.name for f in fields(Limits)}
    values: dict[str, float | int] = {}
    for key, v in raw.items():
        if key not in known:
            raise ValueError(f"limits.{key}: unknown limit (known: {', '.join(sorted(known))})")
        try:
            values[key] = _parse(_KINDS[key], v)
        except OverflowError:  # a number with hundreds of digits
            raise ValueError(f"limits.{key}: far too large") from None
        except ValueError as e:
            raise ValueError(f"limits.{key}: {e}") from None
    return Limits(**values)


def describe(lim: Limits) -> dict[str, float | int]:
    """The limits in force as a plain dict, for ``awp status --json``."""
    return {f.name: getattr(lim, f.name) for f in fields(Limits)}
