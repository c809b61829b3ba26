"""What checking and repairing a damaged store costs (issue 34 item 4).

Builds a store of about ``--mb`` MB with the real schema (awp.store.db):
log rows of 60-1,500 bytes from five peers in 13 threads, outbox rows that
come and go (so freed pages are reused and tables interleave, as on a
daemon that ran for a while), board records of 50-400 bytes.  Then:

- the start check's cost, warm, three times each: ``quick_check`` and
  ``read_rows`` (what the start ran before issue 34), and
  ``integrity_check`` and ``read_rows`` (what it runs now);
- ``awp repair`` as a process, on a copy of the store with each damage:
  eight bytes flipped inside a key of a leaf of index ``log_thread``; one
  page of the log overwritten; the file cut at half; one page in a hundred
  overwritten at random (the case that went round for good before); and
  how many log rows each kept.

Target: repair finishes in seconds per 100 MB.

Run: python bench/repair.py [--mb 100] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from awp.store import check  # noqa: E402
from awp.store.db import open_store  # noqa: E402

PAGE = 4096


def build(path: str, mb: int) -> int:
    """The store at ``path``, grown to about ``mb`` MB; how many log rows."""
    con = open_store(path)
    rnd = random.Random(1)
    peers = ["ed25519:" + chr(65 + i) * 43 for i in range(5)]
    i = 0
    try:
        while os.path.getsize(path) + os.path.getsize(path + "-wal") < mb << 20:
            con.execute("BEGIN")
            for _ in range(500):
                i += 1
                peer, th = peers[i % 5], f"thr_{i % 13:08d}"
                line = json.dumps({"t": "msg", "id": f"{i:026d}", "th": th,
                                   "parts": [{"k": "text", "text": "y" * rnd.randint(60, 1500)}]})
                con.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line, acked)"
                            " VALUES (?, ?, 'msg', ?, ?, ?, ?, ?, 1)",
                            (peer, "in" if i % 2 else "out", f"{i:026d}", th, i, i, line))
                if i % 2 == 0:
                    con.execute("INSERT INTO outbox (peer, id, t, th, line, created)"
                                " VALUES (?, ?, 'msg', ?, ?, ?)", (peer, f"{i:026d}", th, line, i))
                if i % 3 == 0:
                    raw = json.dumps({"kind": "post", "body": "z" * rnd.randint(50, 400)})
                    con.execute("INSERT INTO board_records (topic, hash, kind, author, ts, size,"
                                " raw, received) VALUES (?, ?, 'post', ?, ?, ?, ?, ?)",
                                (f"topic{i % 4}", f"h{i:030d}", peer, i, len(raw), raw, i))
            con.execute("DELETE FROM outbox WHERE seq % 3 != 0 AND created < ?", (i - 200,))
            con.execute("COMMIT")
    finally:
        con.close()
    return i


def _leaf(db: str, name: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    con.close()
    with open(db, "rb") as f:
        while True:
            f.seek((page - 1) * PAGE)
            data = f.read(PAGE)
            if data[0] in (0x0A, 0x0D):
                return page
            n = struct.unpack(">H", data[3:5])[0] // 2
            cell = struct.unpack(">H", data[12 + 2 * n:14 + 2 * n])[0]
            page = struct.unpack(">I", data[cell:cell + 4])[0]


def flip_index_key(db: str) -> None:
    page = _leaf(db, "log_thread")
    with open(db, "r+b") as f:
        f.seek((page - 1) * PAGE)
        data = f.read(PAGE)
        at = data.index(b"ed25519:", PAGE // 3) + 10
        f.seek((page - 1) * PAGE + at)
        f.write(bytes(b ^ 0xFF for b in data[at:at + 8]))


def smash_log_page(db: str) -> None:
    with open(db, "r+b") as f:
        f.seek((_leaf(db, "log") - 1) * PAGE)
        f.write(b"\xa5" * 64)


def cut_at_half(db: str) -> None:
    os.truncate(db, os.path.getsize(db) // 2 // PAGE * PAGE)


def smash_one_page_in_100(db: str) -> None:
    pages = os.path.getsize(db) // PAGE
    with open(db, "r+b") as f:
        for page in random.Random(5).sample(range(2, pages), pages // 100):
            f.seek((page - 1) * PAGE + 8)
            f.write(b"\xa5" * 64)


DAMAGE = {"index key flipped": flip_index_key, "one log page": smash_log_page,
          "cut at half": cut_at_half, "1 page in 100": smash_one_page_in_100}


def start_check(db: str) -> dict[str, float]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out: dict[str, list[float]] = {"quick_check + read_rows": [], "integrity_check + read_rows": []}
    try:
        for _ in range(3):
            for name, first in (("quick_check + read_rows", check.quick_check),
                                ("integrity_check + read_rows", check.integrity_check)):
                t0 = time.perf_counter()
                assert first(con) == "" and check.read_rows(con) == ""
                out[name].append(time.perf_counter() - t0)
    finally:
        con.close()
    return {k: min(v) for k, v in out.items()}


def repair(where: str, src: str, damage) -> tuple[float, int, str]:
    home = os.path.join(where, "home")
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(home, mode=0o700)
    db = os.path.join(home, "awp.db")
    shutil.copyfile(src, db)
    damage(db)
    env = dict(os.environ, PYTHONPATH=ROOT)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "awp", "repair", "--home", home],
                       capture_output=True, text=True, env=env, timeout=900)
    took = time.perf_counter() - t0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    kept = con.execute("SELECT count(*) FROM log").fetchone()[0]
    con.close()
    return took, kept, (r.stderr.strip() if r.returncode else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    where = tempfile.mkdtemp(prefix="awp-bench-repair-", dir=args.dir)
    try:
        src = os.path.join(where, "built.db")
        t0 = time.perf_counter()
        rows = build(src, args.mb)
        print(f"store: {os.path.getsize(src) / 1e6:.1f} MB, {rows} log rows,"
              f" built in {time.perf_counter() - t0:.1f} s; load {os.getloadavg()[0]:.2f}")
        for name, took in start_check(src).items():
            print(f"start check, {name}: {took:.3f} s")
        for name, damage in DAMAGE.items():
            took, kept, err = repair(where, src, damage)
            print(f"awp repair, {name}: {took:.2f} s, {kept} of {rows} log rows kept {err}")
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
