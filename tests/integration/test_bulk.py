"""Bulk transfer between two real daemons: pieces on a side connection (cap ``bulk``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from fixtures.blobfiles import blob_row, file_digest
from nodes import ROOT, wait_for

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






def awp(node, *args: str) -> str:
    """``awp ARGS --home HOME`` as a user runs it; its stdout (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if k != "AWP_HOME"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "awp", *args, "--home", node.home],
                       capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert r.returncode == 0, f"awp {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


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
    awp(a, "send", b.key, "a big one", "--file", path, "--wait-ack", "30s")
    got = wait_for(lambda: blob_row(b, "big.bin", "complete"), 60, "bulk file complete")
    assert got["bulk"] and got["pieces"] == 6 and got["percent"] == 100.0
    assert got["size"] == size and file_digest(got["path"]) == digest
    assert got["path"].startswith(os.path.join(b.home, "blobs") + os.sep)
    sent = wait_for(lambda: (x := blob_row(a, "big.bin")) and x["bulk_state"] == "delivered" and x,
                    30, "sender told the file was delivered")
    assert sent["served"] == 6 and got["refetched"] == 0
    rows = json.loads(awp(b, "blobs", "--json"))
    assert {"percent", "rate", "eta_s", "pieces", "done", "root", "refetched"} <= set(rows[0])
    assert "100.0%" in awp(b, "blobs") and "delivered" not in awp(b, "blobs")
    # the message shows the file with its local path
    rec = b.inbound()[-1]
    assert rec["files"][0]["path"] == got["path"] and rec["files"][0]["status"] == "complete"


def _started(node, name: str, pieces: int):
    """Wait until ``pieces`` or more pieces of ``name`` are verified at ``node``."""
    def cond():
        x = blob_row(node, name)
        return x if x and x.get("bulk") and x["done"] >= pieces * PIECE else None
    return wait_for(cond, 60, f"{pieces} pieces verified", interval=0.002)


def test_receiver_killed_mid_transfer_resumes_with_one_piece_resent(make_node, tmp_home_root):
    a, b = _pair(make_node)
    count = 40
    path, digest = _file(tmp_home_root, "r.bin", count * PIECE)
    _send(a, b, path)
    at_kill = _started(b, "r.bin", 3)
    b.kill()
    assert at_kill["status"] == "fetching" and at_kill["done"] < count * PIECE
    b.start()
    got = wait_for(lambda: blob_row(b, "r.bin", "complete"), 90, "complete after restart")
    assert file_digest(got["path"]) == digest
    sent = wait_for(lambda: (x := blob_row(a, "r.bin")) and x["bulk_state"] == "delivered" and x,
                    30, "delivered")
    # every piece once, and at most the one in flight at the kill again
    assert count <= sent["served"] <= count + 1, sent
    assert len([r for r in b.inbound() if r["t"] == "msg"]) == 1
    assert not [n for n in os.listdir(os.path.dirname(os.path.dirname(got["path"])))
                if n.endswith(".part")]


def test_sender_killed_mid_transfer_resumes_with_one_piece_resent(make_node, tmp_home_root):
    a, b = _pair(make_node)
    count = 40
    path, digest = _file(tmp_home_root, "s.bin", count * PIECE)
    _send(a, b, path)
    _started(b, "s.bin", 3)
    a.kill()
    a.start()
    got = wait_for(lambda: blob_row(b, "s.bin", "complete"), 90, "complete after sender restart")
    assert file_digest(got["path"]) == digest
    sent = wait_for(lambda: (x := blob_row(a, "s.bin")) and x["bulk_state"] == "delivered" and x,
                    30, "delivered")
    assert count <= sent["served"] <= count + 1, sent
    assert got["refetched"] == 0


def test_flipped_byte_on_disk_refetches_that_piece(make_node, tmp_home_root):
    a, b = _pair(make_node)
    path, digest = _file(tmp_home_root, "d.bin", 6 * PIECE)
    _send(a, b, path)
    got = wait_for(lambda: blob_row(b, "d.bin", "complete"), 60, "complete")
    served = wait_for(lambda: (x := blob_row(a, "d.bin")) and x["bulk_state"] == "delivered" and x,
                      30, "delivered")["served"]
    with open(got["path"], "r+b") as f:
        f.seek(2 * PIECE + 777)
        byte = f.read(1)
        f.seek(2 * PIECE + 777)
        f.write(bytes([byte[0] ^ 0x40]))
    assert file_digest(got["path"]) != digest
    assert "1 damaged (2), fetching them again" in awp(b, "blobs", "--verify")
    wait_for(lambda: (x := blob_row(b, "d.bin", "complete")) and file_digest(x["path"]) == digest,
             60, "piece 2 fetched again")
    assert wait_for(lambda: blob_row(a, "d.bin")["served"], 10) == served + 1
    assert [r["bad"] for r in json.loads(awp(b, "blobs", "--verify", "--json"))] == [[]]


def test_over_the_quota_is_refused_with_the_reason(make_node, tmp_home_root):
    a, b = _pair(make_node, peer_bulk_bytes="10MiB")
    path, _digest_ = _file(tmp_home_root, "q.bin", 3 * PIECE)
    res = _send(a, b, path)
    assert res["acked"]  # the msg itself is delivered
    refused = wait_for(lambda: blob_row(b, "q.bin", "refused"), 30, "receiver refused it")
    assert "peer_bulk_bytes" in refused["error"]
    out = wait_for(lambda: blob_row(a, "q.bin", "refused"), 30, "sender told")
    assert "quota" in out["error"]
    assert not os.path.exists(os.path.join(b.home, "blobs", "nothing"))


def test_over_the_bulk_cap_is_refused_before_queueing(make_node, tmp_home_root):
    a, b = _pair(make_node, bulk_bytes="6MiB")
    path, _d = _file(tmp_home_root, "c.bin", 7 * 1024 * 1024)
    try:
        _send(a, b, path)
    except Exception as e:  # ApiFailure
        assert "over the blob limit" in str(e)
    else:
        raise AssertionError("a file over bulk_bytes was queued")
    assert blob_row(a, "c.bin") is None
