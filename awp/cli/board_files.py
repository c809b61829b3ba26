"""Board posts on the command line: file parts, the size a post will have, saving files.

A board post is one signed record that every subscriber stores, so a file
travels inside it, base64-encoded, rather than as a blob fetched later; and
the whole record must fit the topic's ``max_post``.  Checking that here,
before asking the daemon, lets ``awp post`` say which file is too big and by
how much instead of surfacing a bare 413.

Saving goes the other way: file parts of posts written into a directory the
user names.  Their names come from other hosts, so every name is reduced to
one plain file name inside that directory, and an existing file is never
replaced.  Pure functions and small file operations, unit-tested.
"""

from __future__ import annotations

import os

from ..base.echo import echo
from ..base.filename import safe_name

#: A record's fixed bound (SPEC.md section 14), and each topic's default ``max_post``.
MAX_RECORD = 64 * 1024
#: The smallest ``max_post`` a topic may set: posts under it never need the topic's figure.
MIN_MAX_POST = 1024
#: What a post record adds around its parts: topic, author, ts, parent, signature and
#: the author's grant (about 600 bytes when the topic is not open to post).
RECORD_OVERHEAD = 1024



def file_part(path: str, mime: str | None = None) -> dict:
    """The part carrying a file inline: ``{"k":"file","name","mime","size","data"}``.

    ``data`` is standard base64 with padding.  Raises ``ValueError`` with a
    message fit for ``awp post: --file PATH: ...``.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        raise ValueError("is a directory: post files one by one")
    try:
        with open(full, "rb") as f:
            # Read one byte past the bound so a huge file is neither loaded nor encoded.
            body = f.read(MAX_RECORD + 1)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    name = os.path.basename(full.rstrip("/")) or "file"
    if mime is None:
        import mimetypes

        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if len(body) > MAX_RECORD:
        # Its size is all the caller needs to refuse it; no data to encode.
        return {"k": "file", "name": name, "mime": mime, "size": max(size, len(body)),
                "data": None}
    return {"k": "file", "name": name, "mime": mime, "size": len(body),
            "data": _b64().b64encode(body).decode("ascii")}


def encoded_size(parts: list[dict]) -> int:
    """Bytes the parts take in the record (compact JSON); a file not loaded counts in full."""
    from ..localapi import cjson

    total = 0
    for p in parts:
        if p.get("k") == "file" and p.get("data") is None:
            total += (int(p.get("size") or 0) + 2) // 3 * 4 + 100
            continue
        total += len(cjson.dumps(p, ensure_ascii=False, separators=(",", ":")).encode())
    return total + len(parts)  # the commas between them


def post_size(parts: list[dict]) -> int:
    """About how many bytes a post made of ``parts`` will be, signature and grant included."""
    return encoded_size(parts) + RECORD_OVERHEAD


def too_big(parts: list[dict], limit: int, where: str) -> str | None:
    """Why a post of ``parts`` cannot go to ``where`` (whose ``max_post`` is ``limit``), or None."""
    size = post_size(parts)
    if size <= limit:
        return None
    from ..present.render import size as fmt_size

    files = [p for p in parts if p.get("k") == "file"]
    what = "the post"
    if files:
        big = max(files, key=lambda p: int(p.get("size") or 0))
        what = f"--file {big.get('name')} ({fmt_size(int(big.get('size') or 0))})"
    hint = " (files go base64-encoded, a third larger)" if files else ""
    return (f"{what}: the post would be about {fmt_size(size)}, over the"
            f" {fmt_size(limit)} a post on {where} may have{hint};"
            " send big files with awp send --file instead")


def _candidates(name: str):
    """``name``, then ``name-1.ext``, ``name-2.ext``, ...: never an existing file's name."""
    yield name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    for i in range(1, 10_000):
        yield f"{stem}-{i}.{ext}" if ext else f"{stem}-{i}"


def save_bytes(directory: str, name: object, data: bytes) -> str:
    """Write ``data`` as a new file in ``directory``; its path.

    The file is created exclusively and without following a symbolic link,
    so nothing already there (a file, or a link placed to redirect the
    write) is replaced: a taken name gets ``-1``, ``-2``... before its
    extension.
    """
    base = safe_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for candidate in _candidates(base):
        path = os.path.join(directory, candidate)
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    raise OSError(f"{directory}: too many files named like {base}")


def save_files(posts: list[dict], directory: str) -> list[dict]:
    """Write the file parts of ``posts`` into ``directory`` (created if missing).

    Returns one entry a part: ``{"post", "name", "path"}``, or ``error``
    instead of ``path`` when its data is not valid base64.
    """
    os.makedirs(directory, exist_ok=True)
    saved: list[dict] = []
    for p in posts:
        for part in p.get("parts") or []:
            if not isinstance(part, dict) or part.get("k") != "file":
                continue
            entry = {"post": p.get("hash") or p.get("id") or "", "name": str(part.get("name") or "")}
            try:
                data = _b64().b64decode(str(part.get("data") or ""), validate=True)
            except ValueError:
                saved.append({**entry, "error": "its data is not valid base64"})
                continue
            saved.append({**entry, "path": save_bytes(directory, part.get("name"), data)})
    return saved


def parse_since(text: str, now_ms: int) -> int:
    """Milliseconds since the epoch for ``--since``: a duration back from now, or RFC 3339."""
    from ..base.durations import parse_duration

    try:
        return now_ms - int(parse_duration(text) * 1000)
    except ValueError:
        pass
    from ..wire.timefmt import parse_ts

    try:
        return parse_ts(text.strip())
    except ValueError:
        raise ValueError(f"{echo(text)} is neither a duration (30m, 2h, 7d) nor an RFC 3339 time"
                         " (2026-09-21T14:00:00Z)") from None


def _b64():
    """The base64 module, imported only for posts with files: it imports ``re``,
    which costs a bare ``awp get`` more than its request does."""
    import base64

    return base64
