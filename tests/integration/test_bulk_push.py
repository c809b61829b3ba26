"""A bulk sender the receiver cannot dial: the receiver asks over the link, and
the sender dials it and pushes; when neither can dial the other, the file says
so in ``awp blobs`` instead of waiting without a word."""

from __future__ import annotations

import socket

from fixtures.blobfiles import blob_row, file_digest
from fixtures.tapproxy import TapProxy
from nodes import wait_for
from test_bulk import PIECE, _file, _send


def test_a_sender_with_no_address_dials_the_receiver_and_pushes(make_node, tmp_home_root):
    lim = {"bulk_min": "1MiB"}
    a = make_node("a").with_limits(**lim).start("--advertise", "none")  # cannot be dialed back
    b = make_node("b").with_limits(**lim).start()
    a.connect(b)
    path, digest = _file(tmp_home_root, "p.bin", 2 * PIECE + 99)
    assert _send(a, b, path)["acked"]
    got = wait_for(lambda: blob_row(b, "p.bin", "complete"), 60, "pushed file complete")
    assert got["bulk"] and file_digest(got["path"]) == digest and got["error"] == ""
    sent = wait_for(lambda: (x := blob_row(a, "p.bin")) and x["bulk_state"] == "delivered" and x,
                    30, "sender told it was delivered")
    assert sent["served"] == 3
    assert "asking it to dial us" in b.tail_log(200)


def test_neither_side_can_dial_the_other_is_shown(make_node, tmp_home_root):
    lim = {"bulk_min": "1MiB"}
    a = make_node("a").with_limits(**lim).start("--advertise", "none")
    b = make_node("b").with_limits(**lim).start("--advertise", "none")
    with TapProxy(b.port) as proxy:  # a reaches b only through this one connection
        a.connect(type("Target", (), {"address": proxy.address})())
        proxy.sock.shutdown(socket.SHUT_RDWR)  # stops listening: no second connection
        proxy.sock.close()
        path, _d = _file(tmp_home_root, "n.bin", PIECE + 1)
        assert _send(a, b, path)["acked"]
        row = wait_for(lambda: (x := blob_row(b, "n.bin")) and x["error"] and x, 60,
                       "the reason shown")
        assert row["status"] == "fetching" and "neither side could dial the other" in row["error"]
        # the link itself is untouched: messages still cross
        assert a.send(b.key, "still here", wait_ack=10)["acked"]
