"""Shared fixtures: real daemons in temporary homes."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from nodes import Node  # noqa: E402


@pytest.fixture
def tmp_home_root():
    """A short temp dir (Unix socket paths must stay under ~100 bytes)."""
    d = tempfile.mkdtemp(prefix="awpt", dir="/tmp")
    yield d
    if not os.environ.get("AWP_KEEP_TMP"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_node(tmp_home_root):
    nodes: list[Node] = []

    def make(name: str, **kw) -> Node:
        n = Node(os.path.join(tmp_home_root, name), name=name, **kw)
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        n.kill()


@pytest.fixture
def node(make_node):
    """One daemon, for tests that talk to it with a raw peer."""
    return make_node("d").start()


@pytest.fixture
def peer(node):
    """A raw AWP peer connected to ``node``, past the handshake and resume."""
    from rawpeer import RawPeer

    p = RawPeer(node.address)
    assert p.handshake()["t"] == "resume"
    p.resume()
    yield p
    p.close()
