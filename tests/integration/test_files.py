"""Files between two daemons: sizes, crash mid-transfer, limits both ways."""

from __future__ import annotations

import hashlib
import os

import pytest
from fixtures.blobfiles import blob_row, file_digest
from nodes import wait_for

from awp.localapi.client import ApiFailure

CHUNK = 256 * 1024


def _file(root: str, name: str, size: int) -> tuple[str, str]:
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 1 << 20))
            f.write(block)
            left -= len(block)
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()






@pytest.mark.parametrize("size", [0, 1, CHUNK, CHUNK + 1, 20 * 1024 * 1024])
def test_file_arrives_whole(make_node, tmp_home_root, size):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    path, digest = _file(tmp_home_root, f"f{size}.bin", size)
    res = a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 30,
                                     "parts": [{"k": "text", "text": "see attached"}]})
    assert res["acked"]
    got = wait_for(lambda: blob_row(b, f"f{size}.bin", "complete"), 30, "blob complete")
    assert got["size"] == size and file_digest(got["path"]) == digest
    # the message shows the file with its local path, and the sender says sent
    rec = b.inbound()[-1]
    assert rec["files"][0]["path"] == got["path"]
    assert wait_for(lambda: blob_row(a, f"f{size}.bin", "sent"), 10, "sender status sent")
    # the path lives under the receiver's home, named safely
    assert got["path"].startswith(os.path.join(b.home, "blobs") + os.sep)


def test_receiver_killed_mid_transfer_then_completes(make_node, tmp_home_root):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    path, digest = _file(tmp_home_root, "big.bin", 40 * 1024 * 1024)
    a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 0,
                               "parts": [{"k": "text", "text": "big one"}]})
    def started():
        return next((x for x in b.api("GET", "/v1/blobs") if x["received"] > 0), None)

    at_kill = wait_for(started, 30, "transfer started", interval=0.005)
    b.kill()
    assert at_kill["status"] == "pending" and at_kill["received"] < 40 * 1024 * 1024
    b.start()
    got = wait_for(lambda: blob_row(b, "big.bin", "complete"), 90, "blob complete after restart")
    assert file_digest(got["path"]) == digest
    # exactly one message, no leftovers
    assert len([r for r in b.inbound() if r["t"] == "msg"]) == 1
    assert not [f for f in os.listdir(os.path.dirname(os.path.dirname(got["path"])))
                if f.endswith(".part")]


def test_sender_refuses_a_file_over_its_own_limit_before_queuing(make_node, tmp_home_root):
    # (to a peer with the bulk cap a file over blob_limit goes the bulk way,
    # up to bulk_bytes: both are the sender's limits here)
    a = make_node("a", env={"AWP_BLOB_LIMIT": "1000"}).with_limits(bulk_bytes=1000).start()
    b = make_node("b").start()
    a.connect(b)
    path, _ = _file(tmp_home_root, "big.bin", 1001)
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/send", {"peer": b.key, "files": [path],
                                   "parts": [{"k": "text", "text": "x"}]})
    assert e.value.status == 413 and "blob limit" in e.value.message
    assert a.api("GET", "/v1/status")["queued"] == 0
    assert a.api("GET", "/v1/blobs") == []


def test_receiver_over_limit_refuses_blob_but_keeps_message(make_node, tmp_home_root):
    a = make_node("a").start()
    b = make_node("b", env={"AWP_BLOB_LIMIT": str(CHUNK)}).start()
    a.connect(b)
    path, _ = _file(tmp_home_root, "toolarge.bin", 3 * CHUNK)
    res = a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 10,
                                     "parts": [{"k": "text", "text": "too big for you"}]})
    assert res["acked"]
    wait_for(lambda: blob_row(a, "toolarge.bin", "refused"), 10, "sender marks refused")
    assert blob_row(b, "toolarge.bin", "refused")
    assert [r for r in b.inbound() if r["t"] == "msg"][0]["line"]["parts"][0]["text"] == \
        "too big for you"
    # nothing of it is left on the receiver's disk, and no chunks stay queued
    for dirpath, _dirs, names in os.walk(os.path.join(b.home, "blobs")):
        assert not names, (dirpath, names)
    wait_for(lambda: a.api("GET", "/v1/status")["queued"] == 0, 10, "outbox empty")


def test_relative_or_missing_file_is_a_clear_error(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/send", {"peer": b.key, "files": ["rel/x.txt"]})
    assert "absolute" in e.value.message
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/send", {"peer": b.key, "files": ["/nonexistent/x.txt"]})
    assert "x.txt" in e.value.message
