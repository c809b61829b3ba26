"""The bounds on keeping links (SPEC.md section 8, docs/threat-model.md "Redialing").

A link that was recently alive is redialled after a drop or a restart.  That
is business the peer makes for us, so a crowd of keys that connect once and
advertise addresses (perhaps a victim's) must not make us dial a crowd.
"""

from __future__ import annotations

import time

from nodes import wait_for
from rawpeer import RawListener, RawPeer


def _dialed(listeners: list[RawListener], seconds: float) -> set[str]:
    """Keys of the listeners that got a connection within ``seconds``."""
    for lst in listeners:
        lst.sock.setblocking(False)
    got: set[str] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for lst in listeners:
            try:
                conn, _ = lst.sock.accept()
            except BlockingIOError:
                continue
            conn.close()
            got.add(lst.key)
        time.sleep(0.05)
    return got


def test_a_crowd_that_connected_once_gets_only_kept_peers_redials(make_node):
    node = make_node("d").with_limits(kept_peers=3).start()
    listeners = [RawListener(name=f"crowd{i}") for i in range(8)]
    try:
        for lst in listeners:  # each connects once, advertising its own listener
            with RawPeer(node.address, lst.identity) as p:
                assert p.handshake(addr=lst.address)["t"] == "resume"
                p.resume()
            wait_for(lambda k=lst.key: node.peer_state(k) != "connected (in)", 10,
                     "the daemon sees it go")
            time.sleep(0.01)  # distinct last_seen milliseconds: a clear order
        # A restart dials every kept peer at once (no dial-back grace): only the
        # three most recently connected, whatever the crowd's size.
        node.kill()
        node.start()
        dialed = _dialed(listeners, 6)
        assert dialed == {lst.key for lst in listeners[-3:]}, (len(dialed), node.tail_log())
    finally:
        for lst in listeners:
            lst.close()
