"""CPU a relayed board record costs, step by step, for ``bench/board_cost.py``.

A relay's CPU a post is one figure; to know which step to cut, the daemon
adds the CPU time of this thread spent in each step of the relay path to
:data:`STEPS` (nanoseconds): ``read`` (the socket read and the seal's
decryption), ``parse`` (the line and its records decoded and checked),
``verify`` (the records' signatures), ``store`` (the SQLite statements and
the commit) and ``forward`` (the line built, sealed and written to each
link).  The board's status shows them (``cpu_ns``).

Reading the clock costs a system call (about 0.5 us), a dozen a record, so
it is read only when ``AWP_CPU_STEPS=1`` is in the daemon's environment (the
bench sets it); otherwise :func:`clock` is ``int``, which answers 0 at once.
"""

from __future__ import annotations

import os
import time

STEPS: dict[str, int] = dict.fromkeys(("read", "parse", "verify", "store", "forward"), 0)
ON = os.environ.get("AWP_CPU_STEPS") == "1"
clock = time.thread_time_ns if ON else int

__all__ = ["ON", "STEPS", "clock"]
