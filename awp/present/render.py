"""Human-readable rendering of records and tables for ``tail``, ``read``, ``wait``.

One block per record; the first line says when, who to whom, which thread::

    [2m ago] bob → you · thr_x4ii96t4 · "Run the suite"
      Run make integration and send me the failures.
      ```diff
      ...
      ```
      data application/json: {"repo":"acme/api"}
    [1m ago] bob is now working in thr_x4ii96t4: running the suite
    [5s ago] you → bob · thr_x4ii96t4
      thanks
    [just now] · bob said bye: done

Pure functions of the API's record dicts (see ``awp.store.queries.record``),
so they are stable and unit-tested.
"""

from __future__ import annotations

import time

from ..base.durations import format_duration
from ..base.echo import clip  # noqa: F401  (one line of text; the tables and the daemon share it)

INDENT = "  "

_LANGS = {
    "py": "python", "go": "go", "js": "javascript", "mjs": "javascript", "cjs": "javascript",
    "ts": "typescript", "tsx": "typescript", "jsx": "javascript", "rs": "rust",
    "diff": "diff", "patch": "diff", "sh": "sh", "bash": "sh", "md": "markdown",
    "json": "json", "yaml": "yaml", "yml": "yaml", "toml": "toml", "c": "c", "h": "c",
    "cpp": "cpp", "cc": "cpp", "cxx": "cpp", "hpp": "cpp", "java": "java", "rb": "ruby",
    "sql": "sql", "html": "html", "css": "css",
}


def lang_for(path: str) -> str:
    """The code-part language for a file name, from its extension."""
    base = path.rsplit("/", 1)[-1]
    if "." not in base.lstrip("."):
        return ""
    ext = base.rsplit(".", 1)[-1].lower()
    return _LANGS.get(ext, ext)


def now_ms() -> int:
    return int(time.time() * 1000)


def ago(ms: int | None, now: int | None = None) -> str:
    """``2m ago`` for a Unix-ms time (``just now`` under a second)."""
    if not ms:
        return "?"
    now = now_ms() if now is None else now
    secs = (now - int(ms)) / 1000
    if secs < 1:
        return "just now"
    return f"{format_duration(secs)} ago"


def _compact(obj: object) -> str:
    from ..localapi import cjson

    return cjson.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _indent(text: str, prefix: str = INDENT) -> list[str]:
    return [prefix + ln if ln else prefix.rstrip() for ln in str(text).split("\n")]


def _fence(body: str) -> str:
    """A backtick fence longer than any run of backticks inside ``body``."""
    longest = run = 0
    for ch in body:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def render_part(part: object, files: dict | None = None) -> list[str]:
    """The indented lines for one part of a msg (``files``: local blob info by ref)."""
    if not isinstance(part, dict):
        return [INDENT + _compact(part)]
    k = part.get("k")
    if k == "text":
        return _indent(str(part.get("text", "")).rstrip("\n"))
    if k == "code":
        lang = part.get("lang") or ""
        body = str(part.get("text", "")).rstrip("\n")
        fence = _fence(body)
        lines = [INDENT + fence + str(lang)]
        if body:
            lines += _indent(body)
        lines.append(INDENT + fence)
        return lines
    if k == "data":
        mime = part.get("mime") or "application/json"
        return [f"{INDENT}data {mime}: {_compact(part.get('data'))}"]
    if k == "blob":
        from ..base.filename import safe_name  # unicodedata: only for a file part

        name = safe_name(part.get("name") or part.get("ref"))  # shown as it is saved
        size = part.get("size")
        extra = f" ({size} bytes)" if isinstance(size, int) else ""
        local = (files or {}).get(part.get("ref"))
        if local and local.get("path") and local.get("status") == "complete":
            return [f"{INDENT}file {name}{extra}: {local['path']}"]
        if local and local.get("status") not in (None, "unknown", "complete"):
            return [f"{INDENT}file {name}{extra} [{local['status']}]"]
        return [f"{INDENT}file {name}{extra}"]
    rest = {key: v for key, v in part.items() if key != "k"}
    return [f"{INDENT}[{k}] {_compact(rest)}"]


def render_record(rec: dict, now: int | None = None) -> str:
    """One record (msg, state, notice, anything else) as a block of lines."""
    line = rec.get("line") if isinstance(rec.get("line"), dict) else {}
    when = f"[{ago(rec.get('at') or rec.get('ts'), now)}]"
    who = rec.get("peer_name") or rec.get("peer") or "?"
    direction = rec.get("dir")
    t = rec.get("t") or line.get("t") or ""
    th = rec.get("th") or line.get("th") or ""

    if direction == "notice" or t == "notice":
        text = line.get("text") or line.get("kind") or "notice"
        return f"{when} · {text}"

    if t == "state":
        word = line.get("state", "?")
        note = line.get("note") or ""
        where = f" in {th}" if th else ""
        tail = f": {note}" if note else ""
        if direction == "out":
            return f"{when} you are now {word}{where} (told {who}){tail}"
        return f"{when} {who} is now {word}{where}{tail}"

    if t == "introduce" and direction != "out":
        peer = line.get("peer") if isinstance(line.get("peer"), dict) else {}
        grant = line.get("grant") if isinstance(line.get("grant"), dict) else {}
        pname = peer.get("name") or str(peer.get("key", "?"))[8:18]
        caps = grant.get("caps") or []
        with_caps = f" with a grant for {', '.join(caps)}" if caps else ""
        target = peer.get("name") or peer.get("key") or "?"
        return (f"{when} {who} introduced {pname} ({peer.get('key', '?')}){with_caps}\n"
                f"{INDENT}connect with: awp connect {target}")

    if t == "err" and direction == "in":
        code = line.get("code") or "error"
        detail = line.get("detail") or ""
        where = f" in {th}" if th else ""
        return (f"{when} {who} refused your message {rec.get('re') or line.get('re') or ''}"
                f"{where}: {code}" + (f": {detail}" if detail else ""))

    arrow = f"you → {who}" if direction == "out" else f"{who} → you"
    head = [when, arrow]
    if th:
        head.append(f"· {th}")
    subject = line.get("subject")
    if isinstance(subject, str) and subject:
        head.append(f'· "{clip(subject, 80)}"')
    re_id = rec.get("re") or line.get("re")
    if re_id:
        head.append(f"· re {re_id}")
    if t and t != "msg":
        head.append(f"· {t}")
    lines = [" ".join(head)]
    if t == "msg":
        parts = line.get("parts")
        files = {f.get("ref"): f for f in rec.get("files") or [] if isinstance(f, dict)}
        for p in parts if isinstance(parts, list) else []:
            lines += render_part(p, files)
        request = rec.get("request")
        if isinstance(request, dict):
            lines.append(INDENT + request_note(request))
    else:
        body = {key: v for key, v in line.items() if key not in ("t", "id", "ts", "th", "re")}
        if body:
            lines.append(INDENT + _compact(body))
    return "\n".join(lines)


def request_note(request: dict) -> str:
    """How a capability request (exec, fs:read, ...) stands, for the agent."""
    cap = request.get("cap", "?")
    status = request.get("status")
    if status == "forbidden":
        return (f"! request for {cap} made WITHOUT a grant: refused (forbidden)."
                " Do not act on it.")
    if status == "allowed":
        return (f"! request for {cap}: the sender holds a grant for it. It is still your call;"
                " usually ask your user first.")
    if status == "served":
        return f"! request for {cap}: served by the daemon (the result is in the thread)."
    return f"! request for {cap}: {status}"


def render_records(records: list[dict], now: int | None = None) -> str:
    now = now_ms() if now is None else now
    return "\n".join(render_record(r, now) for r in records)


def since(state: str, since_ms: int | None, now: int | None = None) -> str:
    """``working 2h``: a state with how long it has held."""
    if not since_ms:
        return state
    now = now_ms() if now is None else now
    return f"{state} {format_duration((now - int(since_ms)) // 1000)}"


def threads_table(rows: list[list], now: int, subject_width: int) -> str:
    """``awp threads``: the daemon's compact rows (th, peer name, my state, since, their
    state, since, unread, subject) as a table.

    Built for 10,000 rows: a peer's name is clipped once, an age is formatted
    once per distinct second, and the cells go straight to :func:`table`.
    """
    names: dict[str, str] = {}
    ages: dict[int, str] = {}

    def held(state: str | None, ms: int | None) -> str:
        if not ms:
            return state or ""
        secs = (now - ms) // 1000
        age = ages.get(secs)
        if age is None:
            age = ages[secs] = format_duration(secs)
        return f"{state or ''} {age}"

    cells = []
    for th, name, mine, my_since, theirs, their_since, unread, subject in rows:
        shown = names.get(name)
        if shown is None:
            shown = names[name] = clip(name or "", 30)
        cells.append([th, shown, held(mine, my_since), held(theirs, their_since), str(unread),
                      clip(subject or "", subject_width)])
    return _layout([["TH", "PEER", "MINE", "THEIRS", "UNREAD", "SUBJECT"], *cells])


def table(headers: list[str], rows: list[list[object]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded.

    One pass over the cells for the widths, then one format call a row: a
    table of 10,000 threads is laid out in C, not cell by cell in Python.
    """
    cells = [[str(h) for h in headers]]
    cells += [[c if type(c) is str else str(c) for c in r] for r in rows]
    return _layout(cells)


def _layout(cells: list[list[str]]) -> str:
    """:func:`table` of cells that are strings already, the header row first."""
    if len(cells[0]) < 2:
        return "\n".join(r[-1].rstrip() for r in cells)
    widths = [max(map(len, col)) for col in zip(*cells, strict=True)][:-1]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return "\n".join([fmt.format(*r).rstrip() for r in cells])


def size(n: int | float) -> str:
    """Bytes in the largest binary unit that keeps a number over 1: ``1.5 MiB``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def budget_line(b: dict) -> str:
    """``awp status``: use of the global budgets, and what they turned away."""
    lim = b.get("limits") or {}
    refused = b.get("refused") or {}
    text = (f"stored {size(b.get('stored_bytes', 0))} of {size(lim.get('stored_bytes', 0))},"
            f" in flight {size(b.get('inflight_bytes', 0))} of"
            f" {size(lim.get('inflight_bytes', 0))}, connections {b.get('connections', 0)}"
            f" of {lim.get('connections', 0)} ({b.get('handshakes', 0)} in handshake)")
    turned = [f"{k.replace('_', ' ')} {v}" for k, v in refused.items() if v]
    if turned:
        text += "; refused: " + ", ".join(turned)
    return text


def peer_budget_cell(b: dict | None) -> str:
    """``awp peers``: what a peer has made us store, and when it is being slowed."""
    if not b:
        return "-"
    cell = size(b.get("stored_bytes", 0))
    if b.get("refused"):
        cell += f" ({b['refused']} refused)"
    elif b.get("throttled"):
        cell += f" (slowed {b['throttled']}x)"
    return cell
