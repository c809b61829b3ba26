"""The machine's floor for one durable hop, with no awp code at all.

Two plain Python processes on loopback TCP: the sender writes a small JSON
line with a blocking socket; the receiver reads it, parses it, inserts it in
a WAL-mode SQLite table (``synchronous=FULL``, two indexes), commits, stamps
CLOCK_MONOTONIC and writes an ack.  Same pacing as bench/delivery.py (100
msg/s), so the figures show what any Python peer that commits before it acks
pays on this machine: a lower bound to read awp's one-way latency against.

``--loop trio`` has the receiver wait in trio's event loop instead of a
blocking read: what the event loop alone adds to the floor.  ``--loop
thread`` runs trio too, but reads and commits on a thread blocked in
``recv`` and has the loop write the ack, as the reader threads of the
``readthread`` branch do: what is left of the event loop's cost.

``--cpus A,B`` holds the sender to CPU A and the receiver to CPU B, as
delivery.py's second run holds its two daemons.

Run: python bench/floor.py [--messages N] [--sync FULL|OFF] [--loop blocking|trio|thread]
[--cpus A,B]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sqlite3
import statistics
import tempfile
import time


def _receiver(ports: mp.Queue, stamps: mp.Queue, n: int, sync: str, loop: str,
              cpu: int | None = None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    home = tempfile.mkdtemp(prefix="awpfloor", dir="/tmp")
    db = sqlite3.connect(os.path.join(home, "floor.db"), isolation_level=None,
                         check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {sync}")
    db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, peer TEXT,"
               " id TEXT, th TEXT, line TEXT)")
    db.execute("CREATE UNIQUE INDEX log_id ON log (peer, id)")
    db.execute("CREATE INDEX log_th ON log (peer, th, seq)")
    lst = socket.create_server(("127.0.0.1", 0))
    ports.put(lst.getsockname()[1])
    sock, _ = lst.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out: list[int] = []

    def take(raw: bytes) -> None:
        msg = json.loads(raw)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO log (peer, id, th, line) VALUES (?, ?, ?, ?)",
                   ("peer", msg["id"], msg["th"], raw))
        db.execute("COMMIT")
        out.append(time.perf_counter_ns())

    if loop == "trio":
        _receive_on_trio(sock, n, take)
    elif loop == "thread":
        _receive_on_thread(sock, n, take)
    else:
        reader = sock.makefile("rb")
        for _ in range(n):
            take(reader.readline())
            sock.sendall(b'{"t":"ack"}\n')
    stamps.put(out)


def _receive_on_trio(sock: socket.socket, n: int, take) -> None:
    """The same receiver waiting in trio's event loop, as a daemon does.

    One pass of the loop a read (``wait_readable`` and ``os.read``, as
    awp's base/sockread.py) and the ack written at once: what an event
    loop costs a line's latency and nothing more.
    """
    import trio

    sock.setblocking(False)

    async def main() -> None:
        buf, got = b"", 0
        while got < n:
            await trio.lowlevel.wait_readable(sock)
            data = os.read(sock.fileno(), 65536)
            if not data:
                return
            *lines, buf = (buf + data).split(b"\n")
            for raw in lines:
                take(raw)
                got += 1
                os.write(sock.fileno(), b'{"t":"ack"}\n')

    trio.run(main)


def _receive_on_thread(sock: socket.socket, n: int, take) -> None:
    """Reads and commits on a thread blocked in ``recv``; trio writes each ack."""
    import threading

    import trio

    async def main() -> None:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def ack() -> None:
            os.write(sock.fileno(), b'{"t":"ack"}\n')

        def reader() -> None:
            buf, got = b"", 0
            while got < n:
                data = sock.recv(65536)
                if not data:
                    break
                *lines, buf = (buf + data).split(b"\n")
                for raw in lines:
                    take(raw)
                    got += 1
                    token.run_sync_soon(ack)
            token.run_sync_soon(done.set)

        threading.Thread(target=reader, daemon=True).start()
        await done.wait()

    trio.run(main)


def measure(messages: int = 500, sync: str = "FULL", loop: str = "blocking",
            cpus: tuple[int, int] | None = None) -> tuple[list[float], list[float]]:
    """(one-way ms, msg-to-ack ms) of ``messages`` hops at 100 msg/s, warm-up dropped.

    ``cpus`` holds the sender (this process, for the call) to the first CPU
    and the receiver to the second, as delivery.py holds its daemons: two
    hosts' worth of CPU on one machine.
    """
    ports: mp.Queue = mp.Queue()
    stamps: mp.Queue = mp.Queue()
    proc = mp.Process(target=_receiver, args=(ports, stamps, messages, sync, loop,
                                              cpus[1] if cpus else None))
    proc.start()
    mine = os.sched_getaffinity(0) if cpus else None
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})
    try:
        return _send(ports, stamps, proc, messages)
    finally:
        if mine is not None:
            os.sched_setaffinity(0, mine)


def _send(ports: mp.Queue, stamps: mp.Queue, proc: mp.Process,
          messages: int) -> tuple[list[float], list[float]]:
    sock = socket.create_connection(("127.0.0.1", ports.get()))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    acks = sock.makefile("rb")
    sent, round_trips = [], []
    for i in range(messages):
        line = json.dumps({"t": "msg", "id": f"{i:026d}", "th": "thr_floor",
                           "parts": [{"k": "text", "text": f"probe {i}"}]}).encode() + b"\n"
        t0 = time.perf_counter_ns()
        sock.sendall(line)
        acks.readline()
        round_trips.append((time.perf_counter_ns() - t0) / 1e6)
        sent.append(t0)
        time.sleep(0.01)
    got = stamps.get()
    proc.join()
    sock.close()
    warm = min(50, messages // 5)
    one_way = [(b - a) / 1e6 for a, b in zip(sent, got, strict=True)][warm:]
    return one_way, round_trips[warm:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--sync", choices=("FULL", "OFF"), default="FULL")
    ap.add_argument("--loop", choices=("blocking", "trio", "thread"), default="blocking",
                    help="the receiver reads a blocking socket, waits in trio's event loop,"
                         " or reads on a thread beside trio")
    ap.add_argument("--cpus", default="", metavar="A,B",
                    help="hold the sender to CPU A and the receiver to CPU B")
    args = ap.parse_args()
    cpus: tuple[int, int] | None = None
    if args.cpus:
        try:
            a, b = (int(x) for x in args.cpus.split(","))
        except ValueError:
            ap.error("--cpus takes two CPU numbers, as 0,1")
        cpus = (a, b)
    one_way, round_trips = measure(args.messages, args.sync, args.loop, cpus)
    print(f"floor (synchronous={args.sync}, receiver {args.loop}{', cpus ' + args.cpus if cpus else ''})"
          f" over {len(one_way)} msgs at 100 msg/s: "
          f"one-way to committed p50 {statistics.median(one_way):.3f} ms, "
          f"msg-to-ack p50 {statistics.median(round_trips):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
