"""The ``interrupted`` result.

A served request always gets exactly one final result. Guaranteeing that across
a daemon crash is the engine's job: it records the request as pending (in the
same transaction that accepts it) before running it, and on restart answers
every request still pending with :func:`interrupted_result` instead of running
it again (a command may have had side effects; re-running is not safe).
"""

from __future__ import annotations

from awp.serve.requests import CAP_EXEC

INTERRUPTED = "interrupted: the daemon stopped while serving this request"


def interrupted_result(cap: str, data: object = None) -> dict:
    """The final result for a request the daemon stopped while serving.

    ``exec``: the full exec result shape with ``exit: -1``. ``fs:*`` and others:
    ``{"error": ..., "path"?}`` (the path when ``data`` is the request's data and
    names one).
    """
    if cap == CAP_EXEC:
        return {
            "exit": -1,
            "duration_ms": 0,
            "stdout": "",
            "stderr": "",
            "stdout_truncated": False,
            "stderr_truncated": False,
            "error": INTERRUPTED,
        }
    out: dict = {"error": INTERRUPTED}
    if isinstance(data, dict) and isinstance(data.get("path"), str):
        out["path"] = data["path"]
    return out
