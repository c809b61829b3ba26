"""Capability requests of the AWP coding-agent profile (see PROFILE.md).

A request is a ``data`` part inside an ordinary ``msg`` whose mime type names
the capability. This module only recognises requests and names things; the
executors live in :mod:`awp.serve.fs` and :mod:`awp.serve.exec`.
"""

from __future__ import annotations

from typing import Any

EXEC_MIME = "application/vnd.awp.exec+json"
FS_READ_MIME = "application/vnd.awp.fs-read+json"
FS_WRITE_MIME = "application/vnd.awp.fs-write+json"
ADMIN_MIME = "application/vnd.awp.admin+json"

EXEC_RESULT_MIME = "application/vnd.awp.exec-result+json"
FS_READ_RESULT_MIME = "application/vnd.awp.fs-read-result+json"
FS_WRITE_RESULT_MIME = "application/vnd.awp.fs-write-result+json"
ADMIN_RESULT_MIME = "application/vnd.awp.admin-result+json"  # our name; the profile defines none

#: Our extension: short progress msgs while a served exec runs.
EXEC_PROGRESS_MIME = "application/vnd.awp.exec-progress+json"

CAP_EXEC = "exec"
CAP_FS_READ = "fs:read"
CAP_FS_WRITE = "fs:write"
CAP_ADMIN = "admin"

#: request mime -> capability
CAP_BY_MIME: dict[str, str] = {
    EXEC_MIME: CAP_EXEC,
    FS_READ_MIME: CAP_FS_READ,
    FS_WRITE_MIME: CAP_FS_WRITE,
    ADMIN_MIME: CAP_ADMIN,
}

#: capability -> request mime
MIME_BY_CAP: dict[str, str] = {cap: mime for mime, cap in CAP_BY_MIME.items()}

#: capability -> result mime
RESULT_MIME: dict[str, str] = {
    CAP_EXEC: EXEC_RESULT_MIME,
    CAP_FS_READ: FS_READ_RESULT_MIME,
    CAP_FS_WRITE: FS_WRITE_RESULT_MIME,
    CAP_ADMIN: ADMIN_RESULT_MIME,
}

#: Capabilities the daemon can perform itself (``--serve``). ``admin`` has no
#: request shape yet, so a granted admin request always goes to the agent.
SERVABLE: frozenset[str] = frozenset({CAP_EXEC, CAP_FS_READ, CAP_FS_WRITE})

#: Bytes of file content or command output carried inline in a result.
INLINE_LIMIT = 64 * 1024


def _norm_mime(mime: Any) -> str | None:
    if not isinstance(mime, str):
        return None
    return mime.split(";", 1)[0].strip().lower()


def cap_for_mime(mime: Any) -> str | None:
    """The capability a request mime names, or None if it is not a request."""
    m = _norm_mime(mime)
    return CAP_BY_MIME.get(m) if m else None


def request_in(parts: Any) -> tuple[str, str, Any] | None:
    """The first capability request among a msg's parts.

    Returns ``(cap, mime, data)`` where ``mime`` is the canonical request mime
    and ``data`` is the part's ``data`` value exactly as sent (it may be
    malformed: the executors answer bad input with an ``error`` result). Returns
    None when no part is a request. Never raises.
    """
    if not isinstance(parts, list):
        return None
    for part in parts:
        if not isinstance(part, dict) or part.get("k") != "data":
            continue
        m = _norm_mime(part.get("mime"))
        cap = CAP_BY_MIME.get(m) if m else None
        if cap is not None and m is not None:
            return cap, m, part.get("data")
    return None


def forbidden_detail(mime: str, cap: str) -> str:
    """Detail of the ``err forbidden`` sent for a request without a grant."""
    return f'{mime} requires a grant for capability "{cap}"'


def result_part(cap: str, result: dict) -> dict:
    """The ``data`` part carrying a result in the reply msg."""
    return {"k": "data", "mime": RESULT_MIME[cap], "data": result}


def progress_part(data: dict) -> dict:
    """The ``data`` part of an exec progress msg (``{elapsed_ms, line}``)."""
    return {"k": "data", "mime": EXEC_PROGRESS_MIME, "data": data}
