"""What the daemon and the engine are handed instead of importing upward."""

from __future__ import annotations

import pytest
import trio

from awp.daemon.settings import Harnesses
from awp.harness.identity import HARNESSES, normalize
from awp.node.network import NoNetwork
from awp.wire.address import parse_address


def test_the_daemon_reads_harness_spellings_as_its_caller_told_it():
    told = Harnesses(HARNESSES, normalize, "codex")
    assert told.id_of("claude-code") == "claude" and told.id_of("emacs") is None
    assert told.detected == "codex"
    bare = Harnesses(("claude",))  # ids only: exact names, nothing detected
    assert bare.id_of("claude") == "claude" and bare.id_of("claude-code") is None
    assert Harnesses().id_of("claude") is None and Harnesses().detected == ""


def test_an_engine_given_no_network_says_so():
    net = NoNetwork()
    addr = parse_address("tcp:127.0.0.1:9")
    with pytest.raises(OSError, match="no network to dial"):
        trio.run(lambda: net.dial(addr))
    with pytest.raises(OSError, match="no network to listen"):
        trio.run(lambda: net.listen(addr))
