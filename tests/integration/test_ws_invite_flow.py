"""The whole promise, through the real ``awp`` executable: a sandbox comes up on ws
behind its platform URL, hands over an invite, and the other side reaches it
awake and asleep, sealed, every line once.

The platform is tests/fixtures/wakeproxy.py in HTTP mode: it cuts the links
and SIGSTOPs the sandbox's daemon on pause, answers 503 while it wakes, and
wakes it on the next dial.
"""

from __future__ import annotations

import json
from collections import Counter

from fixtures.wakeproxy import WakeProxy
from nodes import free_port, wait_for
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401

DELIVERY = 20.0


def got(home, peer_name: str) -> Counter:
    out = json.loads(home.ok("read", peer_name, "-n", "500", "--no-mark", "--json").stdout)
    recs = out.get("records", []) if isinstance(out, dict) else out
    return Counter(p.get("text", "") for r in recs if r.get("dir") == "in"
                   for p in r["line"].get("parts") or [])


def test_up_on_ws_invite_and_connect_reach_a_sleeping_sandbox(homes):
    a, b = homes("a"), homes("b")
    port, proxy_port = free_port(), free_port()
    public = f"ws://127.0.0.1:{proxy_port}/"
    r = b.ok("up", "--name", "sandbox", "--listen", f"ws:127.0.0.1:{port}={public}",
             "--no-tailcat")
    assert f"  address  {public}  " in r.stdout, r.stdout
    pid = json.loads(b.ok("status", "--json").stdout)["pid"]
    with WakeProxy(port, pid, wake_time=0.75, http=True, port=proxy_port) as w:
        invite = b.ok("invite").stdout.split()
        invite = next(t for t in invite if t.startswith("awpinv:"))
        a.ok("up", "--name", "lead")
        r = a.ok("connect", invite)
        assert r.stdout.startswith("connected to sandbox"), r.stdout
        a.ok("send", "sandbox", "while awake")
        wait_for(lambda: got(b, "lead")["while awake"], DELIVERY, "the first line")
        peers = a.ok("peers").stdout
        assert " sealed " in peers, peers

        w.pause()  # the platform idles the sandbox: links cut, daemon stopped
        wait_for(lambda: "connected" not in a.ok("peers").stdout, DELIVERY, "the link cut")
        queued = [f"while asleep {i}" for i in range(10)]
        for t in queued:
            a.ok("send", "sandbox", t)
        wait_for(lambda: w.wakes == 1, DELIVERY, "a dial wakes the sandbox")
        wait_for(lambda: all(got(b, "lead")[t] for t in queued), DELIVERY, "the queued lines")
        assert w.refused_http >= 1  # the waking dial was answered 503
    final = got(b, "lead")
    assert all(final[t] == 1 for t in ["while awake", *queued]), final
