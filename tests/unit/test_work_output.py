"""The pure parts of ``awp work``'s output handling: what is kept, and what a reply says."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

from awp.work.output import Spool, Tail, drain, result_parts
from awp.work.reaper import descendants


def test_a_spool_keeps_its_cap_and_counts_the_rest(tmp_path):
    s = Spool(10, str(tmp_path))
    for _ in range(5):
        s.take(b"abcdef")
    assert s.total == 30 and s.kept() == b"abcdefabcd"
    assert os.fstat(s.file.fileno()).st_size == 10
    assert os.listdir(tmp_path) == []  # unnamed from the start
    s.close()
    s.take(b"more")  # after close: ignored, no error


def test_a_tail_keeps_the_last_bytes_only():
    t = Tail(4)
    for chunk in (b"hello", b" ", b"world"):
        t.take(chunk)
    assert t.kept() == b"orld" and t.total == 11


def test_drain_reads_a_pipe_to_its_end():
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('x' * 300000)"],
                         stdout=subprocess.PIPE)
    s = Spool(1000)
    t = drain(p.stdout, s)
    t.join(30)
    p.wait()
    assert s.total == 300000 and s.kept() == b"x" * 1000
    s.close()


def test_utf8_goes_as_text_and_a_cut_is_said():
    tries = result_parts(b"hello", 5, 1000, 5096)
    assert tries[0] == ([{"k": "text", "text": "hello"}], 5)
    # cut in the middle of a two-byte character: the half character is dropped
    data = ("é" * 10).encode()[:7]
    parts, shown = result_parts(data, 20, 7, 4103)[0]
    assert parts[0]["text"] == "ééé" and shown == 6
    assert "the command wrote 20 bytes; the first 6 are here" in parts[1]["text"]


def test_binary_goes_as_an_exact_file_part_and_a_note_is_the_last_try():
    data = bytes(range(256))
    tries = result_parts(data, 256, 2000, 6096)
    parts, shown = tries[0]
    assert parts[0]["k"] == "file" and parts[0]["mime"] == "application/octet-stream"
    assert base64.b64decode(parts[0]["data"]) == data and shown == 256
    assert tries[-1][1] == 0 and "output cut" in tries[-1][0][0]["text"]
    assert result_parts(b"", 0, 2000, 6096) == [([{"k": "text", "text": "(no output)"}], 0)]


def test_descendants_finds_a_grandchild_that_left_the_session():
    code = ("import subprocess, sys, time; subprocess.Popen(['setsid', sys.executable, '-c',"
            " 'import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        found = descendants(os.getpid())
        assert p.pid in found and len([x for x in found if x != p.pid]) >= 1
    finally:
        for pid in descendants(p.pid):
            os.kill(pid, 9)
        p.kill()
        p.wait()
