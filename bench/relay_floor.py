"""The machine's floor for relaying one signed board record, with no awp code.

``bench/board.py`` and ``bench/board_cost.py`` print the CPU a post costs
each host it reaches (issue 24's target: <= 0.5 ms).  This bench prints what
the least a Python relay can do costs on this machine, so that figure can be
read against it, as ``bench/floor.py`` does for a message's latency.

Three processes on loopback TCP: a source writes signed JSON records (an
Ed25519 signature over the record's canonical bytes, as a board record
carries) at ``--rate`` a second; the relay reads each line, parses it,
verifies its signature with PyNaCl, inserts it into a WAL-mode SQLite table
with two indexes in a transaction of its own (``synchronous = NORMAL``: a
relayed record is held by its neighbours, so it is not fsynced, as awp's
relays do), and writes the same bytes to a sink.  The relay's CPU while the
records flow, less its CPU at rest, divided by the records, is printed for
two relays: one on trio (awp's event loop: the read waits in epoll, one
pass of the loop a record) and one on plain blocking sockets (the least any
Python relay can pay).

Run: python bench/relay_floor.py [--records 1500] [--rate 50] [--skip verify,store]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import socket
import sqlite3
import tempfile
import time

SCHEMA = (
    "CREATE TABLE recs (hash TEXT PRIMARY KEY, topic TEXT, author TEXT, ts TEXT, line TEXT)",
    "CREATE INDEX recs_topic ON recs (topic, ts)",
    "CREATE INDEX recs_author ON recs (author, ts)",
)


def _cpu_s(pid: int) -> float:
    """CPU seconds ``pid``'s threads have run so far, to the nanosecond (the scheduler's
    count: ``/proc/<pid>/stat`` counts in 10 ms ticks, a tenth of what 200 records
    cost).  A thread that ended meanwhile is no longer counted: the relays here keep
    theirs, and a daemon's are long-lived."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def _open_db() -> sqlite3.Connection:
    home = tempfile.mkdtemp(prefix="awp-relay-floor-")
    db = sqlite3.connect(os.path.join(home, "relay.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    for sql in SCHEMA:
        db.execute(sql)
    return db


SKIP: set[str] = set()  # parts left out to split the figure (--skip)
# CPU ns of this thread in each step (read, parse, verify, store, forward), for
# bench/board_cost.py to set beside the daemon's; the clock is read only when asked.
STEPS = dict.fromkeys(("read", "parse", "verify", "store", "forward"), 0)
_clock = int


def _take(db: sqlite3.Connection, raw: bytes, verify) -> None:
    """What every relay must do with a record: parse, verify, store."""
    t0 = _clock()
    rec = json.loads(raw)
    sig = bytes.fromhex(rec.pop("sig"))
    body = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
    t1 = _clock()
    if "verify" not in SKIP:
        verify(body, sig)
    t2 = _clock()
    STEPS["parse"] += t1 - t0
    STEPS["verify"] += t2 - t1
    if "store" in SKIP:
        return
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT OR IGNORE INTO recs VALUES (?, ?, ?, ?, ?)",
               (hashlib.sha256(body).hexdigest(), rec["topic"], rec["author"], rec["ts"],
                raw.decode()))
    db.execute("COMMIT")
    STEPS["store"] += _clock() - t2


def _set_up(skip: set[str], steps: bool) -> None:
    global _clock
    SKIP.update(skip)
    if steps:
        _clock = time.thread_time_ns


def _verifier(key_hex: str):
    from nacl.signing import VerifyKey

    vk = VerifyKey(bytes.fromhex(key_hex))
    return lambda body, sig: vk.verify(body, sig)


def _relay_blocking(port_q: mp.Queue, up_port: int, down_port: int, key_hex: str,
                    skip: set[str], steps: bool = False) -> None:
    _set_up(skip, steps)
    db, verify = _open_db(), _verifier(key_hex)
    up = socket.create_connection(("127.0.0.1", up_port))
    down = socket.create_connection(("127.0.0.1", down_port))
    for s in (up, down):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port_q.put("ready")
    buf = b""
    while True:
        data = up.recv(65536)
        if not data:
            port_q.put(STEPS)
            return
        buf += data
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            _take(db, raw, verify)
            t = _clock()
            down.sendall(raw + b"\n")
            STEPS["forward"] += _clock() - t


def _relay_trio(port_q: mp.Queue, up_port: int, down_port: int, key_hex: str,
                skip: set[str], steps: bool = False) -> None:
    import trio

    _set_up(skip, steps)
    db, verify = _open_db(), _verifier(key_hex)

    async def main() -> None:
        up = await trio.open_tcp_stream("127.0.0.1", up_port)
        down = await trio.open_tcp_stream("127.0.0.1", down_port)
        port_q.put("ready")
        # One pass of the event loop a read and none a write (what awp's
        # base/sockread.py and LineOut.write_now do): trio's own
        # receive_some and send_all each add a scheduler checkpoint.
        up_fd, down_fd = up.socket.fileno(), down.socket.fileno()
        buf = b""
        while True:
            await trio.lowlevel.wait_readable(up.socket)
            t = _clock()
            data = os.read(up_fd, 65536)
            STEPS["read"] += _clock() - t
            if not data:
                port_q.put(STEPS)
                return
            t = _clock()
            buf += data
            *lines, buf = buf.split(b"\n")
            STEPS["parse"] += _clock() - t
            for raw in lines:
                _take(db, raw, verify)
                t = _clock()
                out = raw + b"\n"
                sent = os.write(down_fd, out)
                STEPS["forward"] += _clock() - t
                if sent < len(out):
                    await down.send_all(out[sent:])

    trio.run(main)


def _sink(port_q: mp.Queue, done: mp.Queue, n: int) -> None:
    lst = socket.create_server(("127.0.0.1", 0))
    port_q.put(lst.getsockname()[1])
    sock, _ = lst.accept()
    got = 0
    while got < n:
        data = sock.recv(65536)
        if not data:
            break
        got += data.count(b"\n")
    done.put(got)


def measure(relay, n: int, rate: float, skip: set[str],
            steps: dict[str, float] | None = None) -> float:
    """CPU ms a record on ``relay``, less its rate at rest; with ``steps``, the CPU ms
    a record of each step is put there (its clock read costs a little)."""
    from nacl.signing import SigningKey

    sk = SigningKey.generate()
    records = []
    for i in range(n):
        rec = {"t": "post", "topic": "alice/ops", "author": sk.verify_key.encode().hex(),
               "ts": f"2026-12-02T00:00:{i // 1000:02d}.{i % 1000:03d}Z",
               "parts": [{"k": "text", "text": f"relay floor {i} " + "x" * 120}]}
        body = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
        rec["sig"] = sk.sign(body).signature.hex()
        records.append(json.dumps(rec, separators=(",", ":")).encode() + b"\n")
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    src = socket.create_server(("127.0.0.1", 0))
    sink = ctx.Process(target=_sink, args=(q, done, n))
    sink.start()
    down_port = q.get(timeout=30)
    proc = ctx.Process(target=relay, args=(q, src.getsockname()[1], down_port,
                                           sk.verify_key.encode().hex(), skip,
                                           steps is not None))
    proc.start()
    up, _ = src.accept()
    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    q.get(timeout=30)
    try:
        time.sleep(1.0)
        c0, t0 = _cpu_s(proc.pid), time.monotonic()
        time.sleep(2.0)
        rest = (_cpu_s(proc.pid) - c0) / (time.monotonic() - t0)
        c1, t1 = _cpu_s(proc.pid), time.monotonic()
        nxt = t1
        for raw in records:
            nxt += 1 / rate
            time.sleep(max(0.0, nxt - time.monotonic()))
            up.sendall(raw)
        got = done.get(timeout=60)
        flow_s, cpu = time.monotonic() - t1, _cpu_s(proc.pid) - c1
        if got != n:
            raise SystemExit(f"the sink got {got} of {n} records")
        up.close()
        if steps is not None:  # the relay sends them when its upstream closes
            steps.update({k: v / 1e6 / n for k, v in q.get(timeout=30).items()})
        return max(0.0, cpu - rest * flow_s) * 1000 / n
    finally:
        up.close()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
        sink.join(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--skip", default="", help="leave parts out to split the figure:"
                    " verify, store or both (comma-separated)")
    args = ap.parse_args()
    skip = {x for x in args.skip.split(",") if x}
    if skip - {"verify", "store"}:
        ap.error("--skip takes verify and/or store")
    work = ["parse"] + [name for x, name in (("verify", "Ed25519 verify"),
                                          ("store", "one SQLite commit")) if x not in skip]
    for name, relay in (("on trio", _relay_trio), ("on blocking sockets", _relay_blocking)):
        ms = measure(relay, args.records, args.rate, skip)
        print(f"relay floor {name}: {args.records} records at {args.rate:g}/s,"
              f" {' + '.join(work)} + forward: CPU a record {ms:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
