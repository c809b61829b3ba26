"""Serving ``fs:read`` and ``fs:write`` requests, confined to a root.

Both functions are synchronous (plain file I/O); the engine runs them with
``trio.to_thread.run_sync`` or through :func:`awp.serve.serve_request`. They
never raise for bad input: every failure is a result ``{"error": ..., "path"?}``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
import tempfile

from awp.serve.fsroot import FsError, display, open_for_read, open_for_write
from awp.serve.requests import INLINE_LIMIT

_COPY_CHUNK = 1024 * 1024
#: at most this many directory entries are listed (``entries_truncated`` beyond)
MAX_ENTRIES = 10_000


def mode_string(st_mode: int) -> str:
    """Permission bits as a 4-digit octal string: ``"0644"``, ``"0755"``, ``"4755"``."""
    return format(stat.S_IMODE(st_mode), "04o")


def blob_name(comps: list[str]) -> str:
    """The name a read's blob travels under: the file's own name, sanitised."""
    base = comps[-1] if comps else "file"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", base)[:120]
    if not name or name.startswith("."):
        name = "b_" + name
    return name


def _error(msg: str, path: object) -> dict:
    out: dict = {"error": msg}
    if isinstance(path, str):
        out["path"] = path
    return out


def _int_field(data: dict, key: str, default: int | None) -> int | None:
    v = data.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise FsError(f"{key} must be a non-negative integer")
    return v


def _bool_field(data: dict, key: str) -> bool:
    v = data.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise FsError(f"{key} must be true or false")
    return v


def fs_read(
    root: str,
    data: object,
    *,
    scratch_dir: str | None = None,
    max_blob: int | None = None,
) -> tuple[dict, str | None]:
    """Serve an ``fs:read`` request ``{path, offset?, length?}``.

    Returns ``(result, blob_path)``:

    * file, at most 64 KiB selected: ``{path, size, offset, length, mode,
      encoding, content}``, ``blob_path`` None;
    * file, more selected: ``{path, size, offset, length, mode, blob}`` and
      ``blob_path`` is a temporary copy (in ``scratch_dir``) of exactly those
      bytes, to be attached as a blob named ``result["blob"]``; the caller owns
      and removes it;
    * directory: ``{path, size, offset, length, mode, dir: true, entries}``;
    * failure: ``{"error": ..., "path"?}``, ``blob_path`` None.

    ``length`` absent means "to the end of the file". ``max_blob``, when given,
    refuses a read whose blob would be larger.
    """
    path = data.get("path") if isinstance(data, dict) else None
    try:
        if not isinstance(data, dict):
            raise FsError("request data must be an object")
        offset = _int_field(data, "offset", 0) or 0
        length = _int_field(data, "length", None)
        fd, st, comps = open_for_read(root, path)
        try:
            if stat.S_ISDIR(st.st_mode):
                return _list_dir(fd, st, path), None
            return _read_file(fd, st, path, comps, offset, length, scratch_dir, max_blob)
        finally:
            os.close(fd)
    except FsError as e:
        return _error(str(e), path), None
    except OSError as e:
        return _error(e.strerror or str(e), path), None
    except Exception as e:  # never raise for a request
        return _error(f"{type(e).__name__}: {e}", path), None


def _list_dir(fd: int, st: os.stat_result, path: object) -> dict:
    names: list[str] = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            names.append(entry.name + "/" if is_dir else entry.name)
    names.sort()
    out = {
        "path": path,
        "size": len(names),
        "offset": 0,
        "length": min(len(names), MAX_ENTRIES),
        "mode": mode_string(st.st_mode),
        "dir": True,
        "entries": names[:MAX_ENTRIES],
    }
    if len(names) > MAX_ENTRIES:
        out["entries_truncated"] = True
    return out


def _read_file(
    fd: int,
    st: os.stat_result,
    path: object,
    comps: list[str],
    offset: int,
    length: int | None,
    scratch_dir: str | None,
    max_blob: int | None,
) -> tuple[dict, str | None]:
    size = st.st_size
    start = min(offset, size)
    want = size - start if length is None else min(length, size - start)
    base = {"path": path, "size": size, "offset": offset, "mode": mode_string(st.st_mode)}
    if want <= INLINE_LIMIT:
        buf = _pread_all(fd, want, start)
        try:
            text = buf.decode("utf-8")
            enc, content = "utf-8", text
        except UnicodeDecodeError:
            enc, content = "base64", base64.b64encode(buf).decode("ascii")
        return {**base, "length": len(buf), "encoding": enc, "content": content}, None
    if max_blob is not None and want > max_blob:
        raise FsError(
            f"{display(comps)}: {want} bytes exceed the blob limit of {max_blob};"
            " read a smaller range with offset and length"
        )
    tmp_fd, tmp_path = tempfile.mkstemp(prefix="fsread-", suffix=".blob", dir=scratch_dir)
    copied = 0
    try:
        with os.fdopen(tmp_fd, "wb") as out:
            while copied < want:
                chunk = os.pread(fd, min(_COPY_CHUNK, want - copied), start + copied)
                if not chunk:
                    break
                out.write(chunk)
                copied += len(chunk)
    except BaseException:
        _unlink(tmp_path)
        raise
    return {**base, "length": copied, "blob": blob_name(comps)}, tmp_path


def _pread_all(fd: int, n: int, start: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < n:
        chunk = os.pread(fd, n - got, start + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _unlink(p: str) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def fs_write(root: str, data: object, *, max_bytes: int | None = None) -> dict:
    """Serve an ``fs:write`` request ``{path, content, encoding?, append?, mkdir?}``.

    ``encoding`` is ``utf-8`` (default) or ``base64``. Returns ``{path, written}``
    (bytes written) or ``{"error": ..., "path"?}``. Writes never follow a
    symlink and never leave the root.
    """
    path = data.get("path") if isinstance(data, dict) else None
    try:
        if not isinstance(data, dict):
            raise FsError("request data must be an object")
        content = data.get("content")
        if not isinstance(content, str):
            raise FsError("content is required (a string)")
        encoding = data.get("encoding") or "utf-8"
        if not isinstance(encoding, str) or encoding.lower() not in ("utf-8", "utf8", "base64"):
            raise FsError('encoding must be "utf-8" or "base64"')
        if encoding.lower() == "base64":
            try:
                raw = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise FsError("content is not valid base64") from None
        else:
            raw = content.encode("utf-8", "surrogatepass")
        if max_bytes is not None and len(raw) > max_bytes:
            raise FsError(f"content of {len(raw)} bytes exceeds the limit of {max_bytes}")
        append = _bool_field(data, "append")
        mkdir = _bool_field(data, "mkdir")
        fd, _comps = open_for_write(root, path, append=append, mkdir=mkdir)
        try:
            view = memoryview(raw)
            written = 0
            while written < len(raw):
                written += os.write(fd, view[written:])
        finally:
            os.close(fd)
        return {"path": path, "written": written}
    except FsError as e:
        return _error(str(e), path)
    except OSError as e:
        return _error(e.strerror or str(e), path)
    except Exception as e:  # never raise for a request
        return _error(f"{type(e).__name__}: {e}", path)
