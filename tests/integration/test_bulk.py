"""Bulk transfer between two real daemons: pieces on a side connection (cap ``bulk``)."""

from __future__ import annotations

import hashlib
import os

from nodes import wait_for

PIECE = 4 * 1024 * 1024


def _file(root: str, name: str, size: int) -> tuple[str, str]:
    path = os.path.join(root, name)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 1 << 20))
            h.update(block)
            f.write(block)
            left -= len(block)
    return path, h.hexdigest()


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _blob(node, name: str, status: str | None = None):
    for b in node.api("GET", "/v1/blobs"):
        if name in (b["ref"], b["name"]) and (status is None or b["status"] == status):
            return b
    return None


def _pair(make_node, **limits):
    lim = {"bulk_min": "1MiB", **limits}
    a = make_node("a").with_limits(**lim).start()
    b = make_node("b").with_limits(**lim).start()
    a.connect(b)
    return a, b


def _send(a, b, path: str) -> dict:
    return a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 30,
                                      "parts": [{"k": "text", "text": "a big one"}]})


def test_bulk_file_arrives_verified(make_node, tmp_home_root):
    a, b = _pair(make_node)
    size = 5 * PIECE + 12345
    path, digest = _file(tmp_home_root, "big.bin", size)
    assert _send(a, b, path)["acked"]
    got = wait_for(lambda: _blob(b, "big.bin", "complete"), 60, "bulk file complete")
    assert got["bulk"] and got["pieces"] == 6 and got["percent"] == 100.0
    assert got["size"] == size and _digest(got["path"]) == digest
    assert got["path"].startswith(os.path.join(b.home, "blobs") + os.sep)
    sent = wait_for(lambda: (x := _blob(a, "big.bin")) and x["bulk_state"] == "delivered" and x,
                    30, "sender told the file was delivered")
    assert sent["served"] == 6 and got["refetched"] == 0
    # the message shows the file with its local path
    rec = b.inbound()[-1]
    assert rec["files"][0]["path"] == got["path"] and rec["files"][0]["status"] == "complete"
