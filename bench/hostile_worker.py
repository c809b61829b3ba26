"""A granted but hostile worker for bench/work.py (issues 40 and 34), on a raw link.

It holds a grant to the queue and does, over and over, what an honest worker
must never be able to turn against the queue:

- **fail loops** (40.1): claim up to 8 items and ``fail`` each at once;
- **hoarding** (34.6): claim up to 8 and let the leases run out;
- **laundered results** (40.2): reply to a held item with a ``done`` result part
  and ``release`` it, hoping the next worker skips it;
- **replayed asks** (40.3): send every signed ask it ever sent again, after a
  burst of asks signed by fresh (ungranted) keys.

Its requests go as signed asks over its own link to the owner, as a host in
between would carry them. It counts what the owner answered.
"""

from __future__ import annotations

import threading

from rawpeer import RawPeer

from awp.wire import board as wb
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms

RESULT_MIME = "application/vnd.awp.work+json"


class HostileWorker(threading.Thread):
    def __init__(self, address: str, topic: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.stop = address, topic, stop
        self.me = Identity.generate()
        self.key = self.me.key
        self.asks: list[dict] = []  # every ask sent, for the replays
        self.counts = {"claimed": 0, "refused": 0, "failed": 0, "hoarded": 0, "laundered": 0,
                       "replayed": 0, "strangers": 0}
        self.error = ""

    def _send(self, p: RawPeer, op: str, wait: bool = True, **fields) -> dict | None:
        ask = wb.make_ask(self.me, self.topic, op, now_ms(), **fields)
        self.asks.append(ask)
        sent = p.send_line({"t": "board-claim", "topic": self.topic, "op": op, **fields,
                            "ask": ask})
        if not wait:
            return None
        try:
            return p.recv_until(lambda x: x.get("t") == "board-lease"
                                and x.get("re") == sent["id"], 15)
        except TimeoutError:
            return None

    def _claims(self, p: RawPeer, n: int) -> list[tuple[str, str]]:
        out = []
        for _ in range(n):
            got = self._send(p, "claim", req=p.ids.next())
            if got is None or "doc" not in got:
                self.counts["refused"] += 1
                break
            self.counts["claimed"] += 1
            out.append((got["doc"]["of"], got["doc"]["lease"]))
        return out

    def run(self) -> None:
        rnd = 0
        while not self.stop.is_set():
            try:
                with RawPeer(self.address, self.me) as p:
                    p.handshake(caps=["chat", "board"])
                    p.resume()
                    p.send_line({"t": "board-sub", "topics": [{"topic": self.topic}],
                                 "drop": []})
                    while not self.stop.is_set():
                        self._round(p, rnd % 4)
                        rnd += 1
                        p.skipped.clear()
                        self.stop.wait(1.0)
            except (OSError, AssertionError) as e:  # the owner was killed: dial again
                self.error = repr(e)[:200]
                self.counts["redials"] = self.counts.get("redials", 0) + 1
                self.stop.wait(1.0)

    def _round(self, p: RawPeer, kind: int) -> None:
        if kind == 1:  # the fail loop
            for _item, lease in self._claims(p, 8):
                self._send(p, "fail", lease=lease)
                self.counts["failed"] += 1
        elif kind == 2:  # the hoard: never renewed
            self.counts["hoarded"] += len(self._claims(p, 8))
        elif kind == 0:  # laundered results
            for item, lease in self._claims(p, 4):
                rec = wb.make_post(self.me, self.topic, [
                    {"k": "text", "text": "done (not really)"},
                    {"k": "data", "mime": RESULT_MIME, "data": {"result": "done",
                                                                "lease": lease}}],
                    now_ms(), parent=item)
                p.send_line({"t": "board-posts", "topic": self.topic, "hops": 0,
                             "recs": [rec.doc]})
                self._send(p, "release", lease=lease)
                self.counts["laundered"] += 1
        else:  # replays, behind a burst of strangers' asks
            for i in range(100):
                s = Identity.generate()
                p.send_line({"t": "board-claim", "topic": self.topic, "op": "claim",
                             "req": f"x{i}", "ask": wb.make_ask(s, self.topic, "claim",
                                                                now_ms(), req=f"x{i}")})
                self.counts["strangers"] += 1
            for ask in list(self.asks[-100:]):
                body = {k: ask[k] for k in ("req", "lease") if k in ask}
                p.send_line({"t": "board-claim", "topic": self.topic, "op": ask["op"], **body,
                             "ask": ask})
                self.counts["replayed"] += 1
