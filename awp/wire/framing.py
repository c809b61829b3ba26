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

    __slots__ = ("_buf", "limit")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._buf = bytearray()  # the start of a line whose newline has not come
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the complete lines (without ``\\n``).

        Raises :class:`LineTooLarge` when a line exceeds the limit, whether or
        not its newline has arrived yet.  Lines before the offending one are
        still lost in that case, which is fine: the connection is closing.

        A read is split in one go (a backlog's reads hold dozens of lines);
        only the part of a line held from the read before is copied, and
        only once its newline has come.
        """
        buf, limit = self._buf, self.limit
        lines: list[bytes] = []
        if buf:
            nl = data.find(b"\n")
            if nl < 0:
                buf += data
                if len(buf) > limit:
                    raise LineTooLarge()
                return lines
            if len(buf) + nl > limit:
                raise LineTooLarge()
            # One copy of the joined line: appending the tail to the held
            # part and copying that once (a 1 MB line arrives in many reads).
            buf += data[:nl]
            lines.append(bytes(buf))
            buf.clear()
            data = data[nl + 1:]
        more = data.split(b"\n")
        rest = more.pop()
        if len(rest) > limit or len(data) > limit and any(len(x) > limit for x in more):
            raise LineTooLarge()
        buf += rest
        if lines:
            lines += more
            return lines
        return more

    def take_rest(self, lines: list[bytes]) -> bytes:
        """The exact bytes after the last line handed out, given the lines
        handed out but not used: what a sealed link decrypts once ``auth``
        has been read, since everything after it is no longer lines."""
        rest = b"".join(ln + b"\n" for ln in lines) + bytes(self._buf)
        self._buf.clear()
        return rest

    @property
    def pending(self) -> int:
        """Bytes of an unterminated line held so far (dropped at EOF)."""
        return len(self._buf)


def encode_line(obj_json: str) -> bytes:
    """Frame an already-serialised JSON object as one wire line."""
    return obj_json.encode("utf-8") + b"\n"
