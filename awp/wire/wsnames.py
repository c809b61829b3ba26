"""The names the WebSocket binding puts on the wire (SPEC.md section 2).

Here, below both the transport that speaks the binding and the conformance
peer that checks it, so the two agree on the names and nothing else.
"""

from __future__ import annotations

SUBPROTOCOL = "awp.v0"  # Sec-WebSocket-Protocol: what marks an AWP connection
HEALTH_PATH = "/healthz"  # answered 200 without an upgrade, for platform health checks
