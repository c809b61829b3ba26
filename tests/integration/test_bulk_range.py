"""``awp fetch PEER FILE --range A-B``: verified bytes of a bulk file a peer sent,
from our copy where it holds, from the peer where it does not."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from fixtures.blobfiles import blob_row
from nodes import ROOT, wait_for
from test_bulk import PIECE, _file, _pair, _send


def fetch(node, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AWP_HOME"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "awp", "fetch", *args, "--home", node.home],
                          capture_output=True, timeout=120, env=env, cwd=ROOT)


def _bytes(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def test_a_range_of_a_refused_file_comes_verified_from_the_sender(make_node, tmp_home_root):
    # Over the quota: refused whole, but its hashes are kept, so parts can be had.
    a, b = _pair(make_node, peer_bulk_bytes="10MiB")
    path, _d = _file(tmp_home_root, "big.bin", 3 * PIECE + 777)
    _send(a, b, path)
    row = wait_for(lambda: blob_row(b, "big.bin", "refused"), 30, "refused whole")
    lo, hi = PIECE - 10, 2 * PIECE + 10  # across three pieces
    dest = os.path.join(tmp_home_root, "part.bin")
    r = fetch(b, a.key, row["ref"], "--range", f"{lo}-{hi}", "-o", dest, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    want = _bytes(path, lo, hi + 1)
    assert res["bytes"] == len(want) and res["sha256"] == hashlib.sha256(want).hexdigest()
    assert _bytes(dest, 0, len(want) + 1) == want and not os.path.exists(dest + ".part")
    assert res["range"] == f"{lo}-{hi}/{3 * PIECE + 777}"
    # by a prefix of the root hash, the last bytes, to stdout
    r = fetch(b, a.key, row["root"][:12], "--range", "-100")
    assert r.returncode == 0, r.stderr
    assert r.stdout == _bytes(path, 3 * PIECE + 677, 3 * PIECE + 777)
    # still refused whole, and nothing landed in the home
    assert blob_row(b, "big.bin")["status"] == "refused"
    assert not any(f.endswith(".part") for _r, _d2, fs in os.walk(b.home) for f in fs)


def test_a_range_of_a_complete_file_is_read_locally_and_a_damaged_piece_refetched(
        make_node, tmp_home_root):
    a, b = _pair(make_node)
    path, _d = _file(tmp_home_root, "c.bin", 2 * PIECE + 5)
    _send(a, b, path)
    got = wait_for(lambda: blob_row(b, "c.bin", "complete"), 60, "complete")
    served = wait_for(lambda: (x := blob_row(a, "c.bin")) and x["served"] >= 3 and x, 30)["served"]
    r = fetch(b, a.key, got["ref"], "--range", "100-")
    assert r.returncode == 0 and r.stdout == _bytes(path, 100, 2 * PIECE + 5)
    assert blob_row(a, "c.bin")["served"] == served  # every piece came from our copy
    with open(got["path"], "r+b") as f:  # one byte of piece 1 flipped on disk
        f.seek(PIECE + 3)
        f.write(bytes([f.read(1)[0] ^ 0xFF]))
    r = fetch(b, a.key, got["ref"], "--range", f"{PIECE}-{PIECE + 9}")
    assert r.returncode == 0 and r.stdout == _bytes(path, PIECE, PIECE + 10)
    assert blob_row(a, "c.bin")["served"] == served + 1  # that piece, from the sender


def test_bad_ranges_and_unknown_files_are_refused_clearly(make_node, tmp_home_root):
    a, b = _pair(make_node)
    path, _d = _file(tmp_home_root, "s.bin", PIECE + 1)
    _send(a, b, path)
    got = wait_for(lambda: blob_row(b, "s.bin", "complete"), 60, "complete")
    dest = os.path.join(tmp_home_root, "x.bin")
    for rng, words in ((f"{PIECE + 1}-", "past the end"), ("9-3", "ends before"),
                       ("x-y", "is not A-B")):
        r = fetch(b, a.key, got["ref"], "--range", rng, "-o", dest)
        assert r.returncode == 1 and words in r.stderr.decode(), (rng, r.stderr)
    r = fetch(b, a.key, "b_nosuchfile", "-o", dest)
    assert r.returncode == 1 and "sent us no bulk file" in r.stderr.decode()
    r = fetch(a, b.key, got["ref"], "-o", dest)  # b never sent a anything
    assert r.returncode == 1 and "sent us no bulk file" in r.stderr.decode()
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")


def test_an_unreachable_sender_is_a_clear_error_before_any_byte(make_node, tmp_home_root):
    a, b = _pair(make_node, peer_bulk_bytes="1MiB")
    path, _d = _file(tmp_home_root, "u.bin", PIECE + 1)
    _send(a, b, path)
    row = wait_for(lambda: blob_row(b, "u.bin", "refused"), 30, "refused whole")
    a.stop()
    dest = os.path.join(tmp_home_root, "u.out")
    r = fetch(b, a.key, row["ref"], "-o", dest)
    assert r.returncode == 1 and "cannot reach" in r.stderr.decode(), r.stderr
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
