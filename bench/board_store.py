"""What storing one relayed board record costs, without a daemon: the store job alone.

``bench/board_cost.py`` measures a post's CPU in three daemons, where the
store job (``awp.store.board.take`` in a relaxed commit) is about half of
what a leaf spends; that figure moves with the machine's load.  This bench
runs the job alone, in one process, on a store file as the daemon opens it
(WAL, ``synchronous = NORMAL`` as a relaxed run leaves it), one record a
transaction as posts arrive one a line, and prints CPU microseconds a record
and the WAL pages each record's commit writes (each is copied back by a
checkpoint later, also CPU):

- ``owner``: records the topic's owner signed (a record of its own, no
  stamp: its signature is verified);
- ``stamped``: another author's records, each with the owner's stamp just
  before it (the stamp's signature is verified, which vouches for the
  record).

``--held`` records are in the topic first (index depth is part of the cost).
It also prints the parse and the signature check alone, so the rest is the
statements and the commit.

Run: python bench/board_store.py [--records 2000] [--held 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from awp.store import board as sb  # noqa: E402
from awp.store.db import connect, migrate  # noqa: E402
from awp.wire import board as b  # noqa: E402
from awp.wire.keys import Identity  # noqa: E402
from awp.wire.strictjson import DECODER  # noqa: E402

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"
TEXT = "deploy is green; " * 12  # about the size of a chat post


def _records(n: int, start: int, stamped: bool) -> list[list[str]]:
    """``n`` posts as they come in a line: ``[stamp, record]`` or ``[record]``."""
    out = []
    for i in range(start, start + n):
        ts = T0 + i * 20
        if stamped:
            rec = b.make_post(ALICE, TOPIC, [{"k": "text", "text": f"{TEXT}{i}"}], ts)
            st = b.make_stamp(OWNER, TOPIC, rec.hash, i + 1, ts + 1)
            out.append([st.raw, rec.raw])
        else:
            rec = b.make_post(OWNER, TOPIC, [{"k": "text", "text": f"{TEXT}{i}"}], ts)
            out.append([rec.raw])
    return out


def _store(path: str, held: int, stamped: bool):
    c = connect(path)
    migrate(c)
    doc = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=6000,
                       keep=1_000_000)
    c.execute("BEGIN IMMEDIATE")
    sb.put_topic(c, doc, T0)
    sb.subscribe(c, TOPIC, T0)
    for line in _records(held, 0, stamped):
        sb.take(c, line, T0 + held * 20, via="peer", hops=1, subs={TOPIC})
    c.execute("COMMIT")
    c.execute("PRAGMA synchronous = NORMAL")
    c.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL's growth is counted: frames a record
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return c


def run(records: int, held: int, stamped: bool) -> dict[str, float]:
    """CPU microseconds a record (the whole job with its commit, the parse, the check)
    and WAL frames (pages written) a record."""
    lines = _records(records, held, stamped)
    docs = [[DECODER.decode(r) for r in line] for line in lines]
    cpu = time.process_time
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "awp.db")
        c = _store(path, held, stamped)
        now = T0 + (held + records) * 20
        t = cpu()
        for line, ds in zip(lines, docs, strict=True):
            c.execute("BEGIN IMMEDIATE")
            got = sb.take(c, line, now, via="peer", hops=1, subs={TOPIC}, docs=ds)
            c.execute("COMMIT")
            assert len(got.new) == 1, got.refused
        job = (cpu() - t) / records * 1e6
        frames = os.path.getsize(path + "-wal") / (4096 + 24) / records
        c.close()
    t = cpu()
    for line, ds in zip(lines, docs, strict=True):
        for r, doc in zip(line, ds, strict=True):
            b.parse_unverified(r, doc=doc)
    parse = (cpu() - t) / records * 1e6
    recs = [b.parse_unverified(line[0]) for line in lines]
    t = cpu()
    for rec in recs:
        b.verify_record(rec)
    verify = (cpu() - t) / records * 1e6
    return {"job": job, "parse": parse, "verify": verify, "frames": frames}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--held", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for stamped in (False, True):
        best: dict[str, float] = {}
        for _ in range(a.rounds):
            got = run(a.records, a.held, stamped)
            best = {k: min(v, best.get(k, v)) for k, v in got.items()}
        name = "stamped" if stamped else "owner"
        print(f"store job, {name} records, {a.held} held, one a transaction (best of"
              f" {a.rounds}): {best['job']:.0f} us a record; parse {best['parse']:.0f} us,"
              f" signature {best['verify']:.0f} us, statements and commit"
              f" {best['job'] - best['parse'] - best['verify']:.0f} us;"
              f" {best['frames']:.1f} pages written a record")


if __name__ == "__main__":
    main()
