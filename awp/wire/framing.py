"""Line framing: one JSON object per ``\\n``-terminated line, at most 1 MiB.

The reader is sans-I/O: feed it bytes as they arrive and it hands back complete
lines.  It reports an over-long line as soon as the buffered, unterminated part
passes the limit, so the peer gets ``too_large`` without us first buffering an
unbounded amount of data waiting for a newline that may never come.
"""

from __future__ import annotations

MAX_LINE = 1_048_576  # bytes, not counting the newline; exactly 1 MiB is accepted


class LineTooLarge(Exception):
    """The peer sent a line longer than :data:`MAX_LINE` bytes."""


class LineReader:
    """Incremental splitter of a byte stream into lines."""

    __slots__ = ("_buf", "_scan_from", "limit")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._buf = bytearray()
        self._scan_from = 0
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the complete lines (without ``\\n``).

        Raises :class:`LineTooLarge` when a line exceeds the limit, whether or
        not its newline has arrived yet.  Lines before the offending one are
        still lost in that case, which is fine: the connection is closing.
        """
        buf = self._buf
        buf += data
        lines: list[bytes] = []
        start = 0
        pos = buf.find(b"\n", self._scan_from)
        if pos != -1:
            # Copied out through a view: ``bytes(buf[a:b])`` copies twice,
            # which for a 1 MB line took 4 ms instead of 0.3.
            with memoryview(buf) as view:
                while pos != -1:
                    if pos - start > self.limit:
                        raise LineTooLarge()
                    lines.append(bytes(view[start:pos]))
                    start = pos + 1
                    pos = buf.find(b"\n", start)
            del buf[:start]
        if len(buf) > self.limit:
            raise LineTooLarge()
        self._scan_from = len(buf)
        return lines

    @property
    def pending(self) -> int:
        """Bytes of an unterminated line held so far (dropped at EOF)."""
        return len(self._buf)


def encode_line(obj_json: str) -> bytes:
    """Frame an already-serialised JSON object as one wire line."""
    return obj_json.encode("utf-8") + b"\n"
