"""A hostile peer for tests and benches: writes big msgs as fast as it is read.

It reads (and keeps the errs of) whatever comes back, so the daemon's acks
never block on it: only the daemon's own budgets slow it down.  Shared by
``tests/integration/test_budgets.py`` and ``bench/hostile.py``.
"""

from __future__ import annotations

import threading

from rawpeer import RawPeer, dumps


class Flooder:
    """A raw peer writing ``size``-byte msgs in one thread and reading in another."""

    def __init__(self, address: str, size: int = 1_000_000, name: str = "flooder") -> None:
        self.peer = RawPeer(address, name=name)
        if self.peer.handshake()["t"] != "resume":
            raise RuntimeError(f"{name}: handshake failed")
        self.peer.resume()
        self.size = size
        self.text = "x" * size
        self.stop = threading.Event()
        self.sent = 0
        self.errs: list[bytes] = []
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._read, daemon=True)]
        for t in self.threads:
            t.start()

    @property
    def sent_bytes(self) -> int:
        return self.sent * self.size

    def _write(self) -> None:
        # Small msgs go many to a write, so the flooder's own CPU (it runs
        # beside the daemon on the same cores) is not what sets the pace.
        per = max(1, (64 << 10) // (self.size + 160))
        while not self.stop.is_set():
            try:
                if per == 1:
                    self.peer.msg(self.text, th="thr_flood0001")
                else:
                    self.peer.send_raw(b"".join(
                        dumps(self.peer.envelope({"t": "msg", "th": "thr_flood0001", "parts": [
                            {"k": "text", "text": self.text}]})) + b"\n" for _ in range(per)))
                self.sent += per
            except OSError:
                return

    def _read(self) -> None:
        sock, buf = self.peer.sock, b""
        sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            self.errs.extend(x for x in lines if b'"t":"err"' in x)

    def close(self) -> None:
        self.stop.set()
        self.peer.close()
