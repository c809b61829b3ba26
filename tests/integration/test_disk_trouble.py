"""A home on a full or read-only disk: one clear error, nothing queued is lost.

The home lives on a small tmpfs mounted in a private mount namespace
(``unshare -m``), so the test needs root and util-linux's unshare; it is
skipped, saying so, where those are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from nodes import ROOT, free_port, wait_for

SCRIPT = r"""
set -u
mount -t tmpfs -o size=4m tmpfs "$MNT"
awp() { "$PY" -m awp "$@" --home "$MNT/h"; }
out() { echo "== $1 rc=$2"; }
awp up --name full >/dev/null 2>&1; out up $?
awp connect "$PEER" >/dev/null 2>&1; out connect $?
awp send "$PEERKEY" "before full" --wait-ack 10s >/dev/null 2>&1; out before $?
echo go > "$MNT/ready"
while [ ! -e "$SIGNAL/peer-down" ]; do sleep 0.05; done
awp send "$PEERKEY" "queued while peer away" >/dev/null 2>&1; out queued $?
dd if=/dev/zero of="$MNT/fill" bs=64k >/dev/null 2>&1
awp send "$PEERKEY" "while full" 2>"$SIGNAL/full.err" >/dev/null; out full $?
rm -f "$MNT/fill"
awp status >/dev/null 2>&1; out status $?
# A read-only home: stop the daemon (a mount with files open for writing
# cannot be made read-only), then ask for a send, which must start one.
awp down >/dev/null 2>&1; out down1 $?
mount -o remount,ro "$MNT"; out remount $?
awp send "$PEERKEY" "while read-only" 2>"$SIGNAL/ro.err" >/dev/null; out ro $?
mount -o remount,rw "$MNT"
awp up >/dev/null 2>&1; out up2 $?
echo done > "$SIGNAL/writable"
while [ ! -e "$SIGNAL/peer-up" ]; do sleep 0.05; done
awp wait --timeout 1s >/dev/null 2>&1
sleep 0.1
while [ ! -e "$SIGNAL/finish" ]; do sleep 0.05; done
awp down >/dev/null 2>&1; out down $?
"""


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


def test_full_and_read_only_disk_give_one_line_and_lose_nothing(make_node, tmp_home_root):
    if not _can_unshare():
        pytest.skip("needs root and a working `unshare -m` to mount a small tmpfs")
    peer = make_node("peer").start()
    mnt = os.path.join(tmp_home_root, "mnt")
    signal_dir = os.path.join(tmp_home_root, "sig")
    os.makedirs(mnt)
    os.makedirs(signal_dir)
    env = dict(os.environ, MNT=mnt, SIGNAL=signal_dir, PY=sys.executable, PEER=peer.address,
               PEERKEY=peer.key, PYTHONPATH=ROOT,
               AWP_LISTEN=f"tcp:127.0.0.1:{free_port()}")
    env.pop("AWP_HOME", None)
    proc = subprocess.Popen(["unshare", "-m", "bash", "-c", SCRIPT], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the first message went through; then the peer goes away
        wait_for(lambda: [r for r in peer.inbound() if r["t"] == "msg"], 30, "first message")
        peer.stop()
        open(os.path.join(signal_dir, "peer-down"), "w").close()
        wait_for(lambda: os.path.exists(os.path.join(signal_dir, "writable")), 60,
                 "full and read-only sends")
        peer.start()
        open(os.path.join(signal_dir, "peer-up"), "w").close()
        texts = wait_for(lambda: len(peer.inbound()) >= 2 and [
            p["text"] for r in peer.inbound() for p in r["line"].get("parts", [])], 30,
            "the queued message arrives")
        assert texts.count("queued while peer away") == 1
        assert "while full" not in texts and "while read-only" not in texts
    finally:
        open(os.path.join(signal_dir, "finish"), "w").close()
        out, _ = proc.communicate(timeout=60)
    rcs = dict(line[3:].split(" rc=") for line in out.splitlines() if line.startswith("== "))
    assert rcs == {"up": "0", "connect": "0", "before": "0", "queued": "0", "full": "1",
                   "status": "0", "down1": "0", "remount": "0", "ro": "1", "up2": "0",
                   "down": "0"}, out
    with open(os.path.join(signal_dir, "full.err")) as f:
        err = f.read()
    assert err.count("\n") == 1 and err.startswith("awp send: "), err
    assert "nothing was queued" in err, err
    with open(os.path.join(signal_dir, "ro.err")) as f:
        err = f.read()
    assert err.startswith("awp send: ") and "Read-only file system" in err.splitlines()[0], err
