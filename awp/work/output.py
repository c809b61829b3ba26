"""A command's output, read once and bounded: what a result reply can carry, and no more.

The command writes to pipes, not files: a reader thread per stream keeps
what a reply could use and counts the rest, so a command that writes
gigabytes costs the disk at most one topic post (stdout, in one anonymous
temporary file the system removes however the worker ends) and the memory
a stderr tail.  :func:`result_parts` then turns what was kept into the
reply's parts: a text part for UTF-8 that fits, a file part (the bytes
exactly) for anything else, and a note saying how much was cut.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from typing import IO

CHUNK = 65536


class Spool:
    """The first ``cap`` bytes of a stream in an unnamed temporary file; the rest counted."""

    def __init__(self, cap: int, directory: str = "") -> None:
        self.cap = max(0, cap)
        self.total = 0
        self.file = tempfile.TemporaryFile(dir=directory or None)  # noqa: SIM115  (close())
        self._lock = threading.Lock()

    def take(self, data: bytes) -> None:
        with self._lock:
            if self.file.closed:
                return
            room = self.cap - self.total
            if room > 0:
                self.file.write(data[:room])
            self.total += len(data)

    def kept(self) -> bytes:
        """What was kept (at most ``cap`` bytes)."""
        with self._lock:
            self.file.flush()
            self.file.seek(0)
            return self.file.read(self.cap)

    def close(self) -> None:
        with self._lock:
            self.file.close()


class Tail:
    """The last ``size`` bytes of a stream, in memory; the rest counted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.total = 0
        self.buf = bytearray()
        self._lock = threading.Lock()

    def take(self, data: bytes) -> None:
        with self._lock:
            self.total += len(data)
            self.buf += data[-self.size:]
            del self.buf[:-self.size]

    def kept(self) -> bytes:
        with self._lock:
            return bytes(self.buf)

    def close(self) -> None:
        pass


def drain(stream: IO[bytes], sink: Spool | Tail) -> threading.Thread:
    """Read ``stream`` to its end into ``sink`` on a thread (closing the stream after)."""
    def run() -> None:
        try:
            while chunk := stream.read1(CHUNK):  # type: ignore[attr-defined]
                sink.take(chunk)
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    t = threading.Thread(target=run, name="awp-work-output", daemon=True)
    t.start()
    return t


def _text_of(data: bytes, cut: bool) -> str | None:
    """``data`` as UTF-8, or None; a character split by the cut is dropped, not replaced."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if cut and e.reason == "unexpected end of data" and e.start >= len(data) - 3:
            return data[:e.start].decode("utf-8")
        return None


def cut_note(total: int, shown: int, max_post: int) -> str:
    return (f"[output cut: the command wrote {total} bytes; the first {shown} are here and"
            f" the rest was dropped (this topic's posts hold {max_post} bytes)]")


def result_parts(data: bytes, total: int, budget: int, max_post: int
                 ) -> list[tuple[list[dict], int]]:
    """Replies to try in turn (each its parts and how many output bytes it carries).

    ``data`` is what the :class:`Spool` kept of ``total`` bytes; ``budget``
    what a post's parts may take.  UTF-8 goes as text first; what is not
    UTF-8, or whose escaped text is too large, goes as a file part (base64
    is 4/3 the size, so fewer bytes fit); the last try is a note alone.
    """
    if total == 0:
        return [([{"k": "text", "text": "(no output)"}], 0)]
    tries: list[tuple[list[dict], int]] = []
    text = _text_of(data, total > len(data))
    if text is not None:
        shown = len(text.encode("utf-8"))
        parts = [{"k": "text", "text": text}]
        if shown < total:
            parts.append({"k": "text", "text": "\n" + cut_note(total, shown, max_post)})
        tries.append((parts, shown))
    n = min(len(data), max(0, budget - 200) * 3 // 4)  # 200: the part's own keys
    if n:
        chunk = data[:n]
        binary = text is None
        parts = [{"k": "file", "name": "output.bin" if binary else "output.txt",
                  "mime": "application/octet-stream" if binary else "text/plain",
                  "size": n, "data": base64.b64encode(chunk).decode()}]
        if n < total:
            parts.insert(0, {"k": "text", "text": cut_note(total, n, max_post)})
        tries.append((parts, n))
    tries.append(([{"k": "text", "text": cut_note(total, 0, max_post)}], 0))
    return tries
