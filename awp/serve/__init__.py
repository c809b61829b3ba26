"""The AWP coding-agent profile: recognising and serving capability requests.

Independent of the engine. The engine finds a request with
:func:`request_in`, decides on grants, and for a served capability calls
:func:`serve_request` (or the executors directly), then replies in the thread
with :func:`result_part` and any blobs. See PROFILE.md.
"""

from __future__ import annotations

import trio

from awp.serve.exec import DEFAULT_MAX_BLOB, ProgressFn, run_exec, summary
from awp.serve.fs import fs_read, fs_write
from awp.serve.journal import INTERRUPTED, interrupted_result
from awp.serve.requests import (
    CAP_ADMIN,
    CAP_BY_MIME,
    CAP_EXEC,
    CAP_FS_READ,
    CAP_FS_WRITE,
    EXEC_PROGRESS_MIME,
    INLINE_LIMIT,
    MIME_BY_CAP,
    RESULT_MIME,
    SERVABLE,
    cap_for_mime,
    forbidden_detail,
    progress_part,
    request_in,
    result_part,
)

__all__ = [
    "CAP_ADMIN",
    "CAP_BY_MIME",
    "CAP_EXEC",
    "CAP_FS_READ",
    "CAP_FS_WRITE",
    "EXEC_PROGRESS_MIME",
    "INLINE_LIMIT",
    "INTERRUPTED",
    "MIME_BY_CAP",
    "RESULT_MIME",
    "SERVABLE",
    "cap_for_mime",
    "describe",
    "forbidden_detail",
    "fs_read",
    "fs_write",
    "interrupted_result",
    "progress_part",
    "request_in",
    "result_part",
    "run_exec",
    "serve_request",
    "summary",
]


async def serve_request(
    cap: str,
    root: str,
    data: object,
    *,
    scratch_dir: str,
    on_progress: ProgressFn | None = None,
    progress_every: float = 10.0,
    max_blob: int = DEFAULT_MAX_BLOB,
) -> tuple[dict, list[tuple[str, str]]]:
    """Perform one granted, served request. Returns ``(result, blobs)``.

    ``blobs`` is a list of ``(name, path)`` files in ``scratch_dir`` to attach
    to the result msg (the caller owns and removes them). ``fs:*`` run in a
    worker thread. A capability with no served shape (``admin``) gets an
    ``error`` result. Never raises for bad input; cancellation propagates.
    """
    if cap == CAP_EXEC:
        return await run_exec(
            root,
            data,
            on_progress=on_progress,
            progress_every=progress_every,
            scratch_dir=scratch_dir,
            max_blob=max_blob,
        )
    if cap == CAP_FS_READ:
        result, path = await trio.to_thread.run_sync(
            lambda: fs_read(root, data, scratch_dir=scratch_dir, max_blob=max_blob)
        )
        return result, ([(result["blob"], path)] if path else [])
    if cap == CAP_FS_WRITE:
        result = await trio.to_thread.run_sync(lambda: fs_write(root, data, max_bytes=max_blob))
        return result, []
    return {"error": f"{cap} requests are not served by this daemon"}, []


def describe(cap: str, data: object, result: dict) -> str:
    """One line for the result msg's text and the serve log.

    ``exec``: ``exit 0 in 8.1s: make test``; ``fs:read``: ``read src/a.py (120
    bytes)`` / ``listed src/ (4 entries)``; ``fs:write``: ``wrote 12 bytes to
    notes/todo.md``; any error: ``<cap> <path>: <error>``.
    """
    if cap == CAP_EXEC:
        return summary(result, data.get("cmd") if isinstance(data, dict) else None)
    path = result.get("path")
    if path is None and isinstance(data, dict) and isinstance(data.get("path"), str):
        path = data["path"]
    shown = path if isinstance(path, str) else "?"
    if result.get("error"):
        return f"{cap} {shown}: {result['error']}"
    if cap == CAP_FS_READ:
        if result.get("dir"):
            return f"listed {shown} ({result.get('size')} entries)"
        where = " as a blob" if result.get("blob") else ""
        return f"read {shown} ({result.get('length')} bytes{where})"
    if cap == CAP_FS_WRITE:
        return f"wrote {result.get('written')} bytes to {shown}"
    return f"{cap}: done"
