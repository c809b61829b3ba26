"""The common verbs' work, without typer: status, peers, threads, read, tail, wait, send.

``awp status`` and friends run many times an agent turn, and importing typer
and click costs several times what the request itself does.  These bodies
run from two doors: the typer commands (``cmd_msg``, ``cmd_conn``), which
parse options, help and usage errors; and :mod:`awp.cli.fastpath`, which
parses the plain, well-formed command lines itself and calls the same
functions.  Parameters are the typer commands' own names and defaults.
"""

from __future__ import annotations

import os
import sys
import time

from ..localapi.client import LocalClient
from ..present.render import (
    budget_line,
    clip,
    lang_for,
    now_ms,
    peer_budget_cell,
    render_record,
    render_records,
    table,
    threads_table,
)
from .base import (
    CliError,
    CliExit,
    compact,
    daemon,
    home_of,
    note,
    out,
    out_json,
    parse_seconds,
)

HTTP_SLACK = 30.0  # added to a server-side wait to get the HTTP timeout

_LISTEN_SOURCES = {
    "--listen": "from --listen, remembered", "AWP_LISTEN": "from AWP_LISTEN, remembered",
    "config.json": "from config.json", "remembered": "remembered from an earlier awp up",
    "default": "the default",
}


def _quote(text: str) -> str:
    import shlex  # it imports re: only for this message

    return shlex.quote(text)


def check_thread(thread: str | None) -> None:
    if thread is not None and not thread.strip():
        raise CliError("the thread id is empty")


def echo(text: object) -> str:
    """:func:`awp.base.echo.echo`, imported by the error messages that quote an argument."""
    from ..base.echo import echo as quoted

    return quoted(text)


def _max_inline() -> int:
    """A part travels inside one line, and a line is at most 1 MiB: a bigger file
    goes as a blob (--file).  Reading stops there, so /dev/zero or a huge log
    costs a clear error, not all the memory there is.  (Imported here: only the
    commands that read a text need it.)"""
    from ..wire.framing import MAX_LINE

    return MAX_LINE


def _read_stdin() -> str:
    if sys.stdin is None:
        raise CliError("cannot read the text from stdin: there is none")
    limit = _max_inline()
    text = sys.stdin.read(limit + 1)  # a text part travels in one line
    if len(text) > limit:
        raise CliError("the text on stdin is over 1 MiB, more than a message line holds;"
                       " send it with --file")
    return text


def build_parts(text: str, code: list[str], lang: str | None, data: list[str],
                mime: str) -> list[dict]:
    """The parts of a message or board post from the command line (text, --code, --data).

    ``awp send`` and ``awp post``/``reply``/``edit`` share it, so both read
    the same flags the same way (``--data @FILE`` reads the JSON from a file).
    """
    parts: list[dict] = []
    if text.strip():
        parts.append({"k": "text", "text": text})
    for path in code:
        body = _read_text(path, f"--code {path}")
        parts.append({"k": "code", "lang": lang or lang_for(path), "text": body})
    for raw in data:
        where = ""
        if raw.startswith("@"):
            # JSON never starts with "@": "@FILE" names a file holding the JSON.
            where = f" in {raw[1:]}"
            raw = _read_data_file(raw[1:])
        try:
            # json's own messages, the ones users know; NaN and infinities are
            # refused, since no peer could read them back
            from ..wire.strictjson import loads, without_lone_surrogates

            value = without_lone_surrogates(raw, loads(raw))
        except ValueError as e:
            raise CliError(f"--data{where} is not valid JSON ({e}): {clip(raw, 60)}") from None
        parts.append({"k": "data", "mime": mime or "application/json", "data": value})
    return parts


def _read_data_file(path: str) -> str:
    return _read_text(os.path.expanduser(path), f"--data @{path}")


def _read_text(path: str, flag: str) -> str:
    """A file's text for a part; a clear error naming the flag otherwise."""
    limit = _max_inline()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(limit + 1)  # characters: at least as many bytes
        if len(text) > limit:
            raise CliError(f"{flag}: over 1 MiB, more than a message line holds; send it with"
                           " --file")
        return text
    except FileNotFoundError:
        raise CliError(f"{flag}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{flag}: is a directory") from None
    except OSError as e:
        raise CliError(f"{flag}: {e.strerror or e}") from None


def delivery_line(res: dict, what: str) -> None:
    if res.get("note"):
        out(res["note"])
    out(f"{what} to {res.get('peer_name')} in {res.get('th')} ({res.get('status')})")


def post_delivery(home: str | None, path: str, body: dict, wait_ack: str | None,
                   as_json: bool) -> dict | None:
    """Post a send or state with its --wait-ack; the response, or None once printed as JSON."""
    wait_s = 1.0
    if wait_ack is not None:
        wait_s = parse_seconds(wait_ack, "--wait-ack")
        body["wait_ack"] = wait_s
    res = daemon(home_of(home), timeout=wait_s + 60).post(path, body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return None
    return res


def _state_line(th: str, peer_name: str, theirs: str | None, note: str, matched: bool,
                states: list[str]) -> str:
    if theirs is None:
        return f"{peer_name} has not said anything in {th} yet (waiting for {','.join(states)})"
    tail = f": {note}" if note else ""
    if matched:
        return f"{peer_name} is {theirs} in {th}{tail}"
    return f"{peer_name}'s state in {th}: {theirs}{tail} (waiting for {','.join(states)})"


def _thread_row(client, th: str, peer: str | None) -> dict | None:
    """The thread (peer, th) as ``/v1/threads`` lists it; ``peer`` is a key or reference."""
    query = {"peer": peer} if peer else None
    try:
        rows = client.request("GET", "/v1/threads", query=query)
    except Exception:  # noqa: BLE001 - only for the label of the state line
        return None
    for r in rows if isinstance(rows, list) else []:
        if r.get("th") == th:
            return r
    return None


def _is_peer(client, ref: str) -> bool:
    """Whether ``ref`` names a known peer (or several: that is reported by the read)."""
    from ..localapi.client import ApiFailure

    try:
        client.post("/v1/resolve", {"peer": ref})
    except ApiFailure as e:
        return e.status != 404
    return True


def _is_thread(client, ref: str) -> bool:
    rows = client.get("/v1/threads")
    return any(r.get("th") == ref for r in rows) if isinstance(rows, list) else False


def printed(client: LocalClient, records: object) -> None:
    """Mark read what was just printed (``POST /v1/seen``), never before it is out.

    The daemon answers records unmarked; a command killed before printing
    leaves them unread. A confirm that fails leaves them unread too (shown
    again later: a duplicate, never a loss).
    """
    from ..localapi.client import ApiFailure
    from ..present.text import unread_seqs

    seqs = unread_seqs(records if isinstance(records, list) else [])
    if not seqs:
        return
    try:
        client.post("/v1/seen", {"seqs": seqs})
    except (ApiFailure, ConnectionError, TimeoutError, OSError):
        pass


def follow(client: LocalClient, query: dict, text: bool, mark: bool = False) -> None:
    """Copy the daemon's event stream to stdout until interrupted.

    With ``mark``, each record is marked read once it is printed (through its
    own connection: the stream holds the first).
    """
    confirm = LocalClient(client.sock_path, client.timeout) if mark else None
    try:
        with client.stream("GET", "/v1/events", query=query) as events:
            for rec in events:
                if text and isinstance(rec, dict):
                    out(render_record(rec))
                else:
                    out(compact(rec))
                if confirm is not None:
                    printed(confirm, [rec])
    except KeyboardInterrupt:
        raise CliExit(0) from None
    finally:
        if confirm is not None:
            confirm.close()
    raise CliError("the awp daemon ended the stream (did it stop?)")


def short(key: str) -> str:
    return key.split(":", 1)[-1][:10] if key else ""


def _peer_name(p: dict) -> str:
    name = p.get("name") or short(p.get("key", ""))
    if p.get("lookalike"):
        name += " (look-alike)"  # another key claims this name or one drawn like it
    aliases = p.get("aliases") or []
    return f"{name} ({', '.join(aliases)})" if aliases else name


def no_address_reason(st: dict) -> str:
    if st.get("tailcat_error"):
        return f"tailcat: {st['tailcat_error']}"
    errors = st.get("listen_errors") or {}
    if errors:
        k, v = next(iter(errors.items()))
        return f"{k}: {v}"
    if not (st.get("listen") or {}).get("configured"):
        return "no listener configured: awp up --listen tcp:HOST:PORT, or listen in config.json"
    return "no address yet"


def send(args: list[str] | None, subject: str | None, thread: str | None, to: str | None,
         re_id: str | None, code: list[str], lang: str | None, data: list[str], mime: str,
         files: list[str], wait_ack: str | None, home: str | None, as_json: bool) -> None:
    """``awp send``: see its typer command for the options."""
    pos = list(args or [])
    check_thread(thread)
    peer = to
    if peer is None and pos and (thread is None or len(pos) >= 2):
        peer = pos.pop(0)
    if not peer and thread is None:
        raise CliError("name a peer (awp send PEER TEXT) or a --thread to reply in")
    text = _read_stdin() if pos == ["-"] else " ".join(pos)
    parts = build_parts(text, code, lang, data, mime)
    paths = [os.path.abspath(os.path.expanduser(f)) for f in files]
    for f, p in zip(files, paths, strict=True):
        if os.path.isdir(p):
            raise CliError(f"--file {f} is a directory: attach files one by one, or an archive"
                           f" of it (tar czf {os.path.basename(p.rstrip('/')) or 'dir'}.tgz {f})")
        if not os.path.isfile(p):
            raise CliError(f"--file {f}: no such file")
    if not parts and not paths:
        if peer and to is None and thread is None and args:
            # One positional word: it was taken as the peer, so there is no text.
            raise CliError(f"only one argument ({echo(peer)}), taken as the peer: name the peer,"
                           f" then the text (awp send PEER {_quote(peer)})", code=2)
        raise CliError("nothing to send: give a text, --code FILE, --data JSON or --file FILE")
    body: dict = {"parts": parts}
    if paths:
        body["files"] = paths
    if peer:
        body["peer"] = peer
    if thread is not None:
        body["th"] = thread
    if subject is not None:
        body["subject"] = subject
    if re_id:
        body["re"] = re_id
    res = post_delivery(home, "/v1/send", body, wait_ack, as_json)
    if res is not None:
        delivery_line(res, f"sent {res.get('id')}")


def state(args: list[str], note_text: str | None, wait_ack: str | None, home: str | None,
          as_json: bool) -> None:
    """``awp state``: see its typer command for the options."""
    if len(args) == 2:
        peer, th, word = None, args[0], args[1]
    elif len(args) == 3:
        peer, th, word = args
    else:
        raise CliError("give THREAD STATE, or PEER THREAD STATE", 2)
    check_thread(th)
    if not word.strip():
        raise CliError("the state word is empty")
    body: dict = {"th": th, "state": word}
    if peer:
        body["peer"] = peer
    if note_text:
        body["note"] = note_text
    res = post_delivery(home, "/v1/state", body, wait_ack, as_json)
    if res is not None:
        delivery_line(res, f"state {res.get('state') or word} sent")


def tail(once: bool, all_: bool, mark: bool, peer: str | None, thread: str | None,
         home: str | None, as_json: bool) -> None:
    """``awp tail``: see its typer command for the options."""
    check_thread(thread)
    client = daemon(home_of(home))
    if once:
        body: dict = {"mark": False}  # marked once printed
        if peer:
            body["peer"] = peer
        if thread:
            body["th"] = thread
        res = client.post("/v1/inbox", body)
        assert isinstance(res, dict)
        records = res.get("records") or []
        if as_json:
            from . import shapes

            out_json(shapes.with_events(res))
        elif records:
            out(render_records(records))
        else:
            sys.stderr.write("no unread messages\n")
        printed(client, records)
        return
    query: dict[str, object] = {"from": "now"}
    if all_:
        query["all"] = "1"
    if peer:
        query["peer"] = peer
    if thread:
        query["th"] = thread
    follow(client, query, text=not as_json, mark=mark)


NOT_YET = 3  # ``awp wait --state``: something else came first, the state did not


def wait(thread: str | None, peer: str | None, states: str | None, timeout: str,
         home: str | None, as_json: bool, any_: bool = False) -> None:
    """``awp wait``: see its typer command for the options."""
    check_thread(thread)
    secs = parse_seconds(timeout, "--timeout")
    wanted = [s.strip() for s in (states or "").split(",") if s.strip()]
    if states is not None and not wanted:
        raise CliError("--state needs at least one state word, e.g. done,failed")
    if wanted and not thread:
        raise CliError("--state needs --thread")
    body: dict = {"timeout": secs, "mark": False}  # marked once printed
    if thread:
        body["th"] = thread
    if peer:
        body["peer"] = peer
    if wanted:
        body["states"] = wanted
    client = daemon(home_of(home), timeout=secs + HTTP_SLACK)
    res = client.post("/v1/wait", body)
    assert isinstance(res, dict)
    if as_json:
        from . import shapes

        out_json(shapes.with_events(res))
        printed(client, res.get("records"))
        if res.get("timed_out"):
            raise CliExit(2)
        if wanted and not any_ and not res.get("matched"):
            raise CliExit(NOT_YET)
        return
    records = res.get("records") or []
    if records:
        out(render_records(records))
        printed(client, records)
    if wanted:
        row = _thread_row(client, thread or "", res.get("peer") or peer)
        name = (row or {}).get("peer_name") or peer or "the peer"
        out(_state_line(thread or "", name, res.get("state"), (row or {}).get("their_note", ""),
                        bool(res.get("matched")), wanted))
    if res.get("timed_out"):
        sys.stderr.write(f"nothing new after {timeout.strip()}\n")
        raise CliExit(2)
    if wanted and not any_ and not res.get("matched"):
        raise CliExit(NOT_YET)


def read(target: str | None, last: int, peer: str | None, no_mark: bool, home: str | None,
         as_json: bool) -> None:
    """``awp read``: see its typer command for the options."""
    if last < 1:
        raise CliError("-n/--last must be at least 1")
    client = daemon(home_of(home))
    th = None
    if target is not None:
        if not target.strip():
            raise CliError("the peer or thread is empty")
        if target.startswith("thr_"):
            th = target
        elif peer:
            if not _is_thread(client, target):
                raise CliError(f"{echo(target)} is not a known thread, and -p names the peer"
                               " already")
            th = target
        elif _is_thread(client, target):
            # Thread ids are any string a peer picks: one spelled like a peer never shadows it.
            if _is_peer(client, target):
                raise CliError(f"{echo(target)} is both a peer and a thread id here: awp read -p"
                               f" {target} for the peer, awp read {target} -p PEER for the"
                               " thread")
            th = target
        else:
            peer = target
    body: dict = {"n": last, "mark": False}  # marked once printed, unless --no-mark
    if peer:
        body["peer"] = peer
    if th:
        body["th"] = th
    res = client.post("/v1/read", body)
    assert isinstance(res, dict)
    records = res.get("records") or []
    if not no_mark:
        from ..present.text import unread_seqs

        res["marked"] = len(unread_seqs(records))  # what printing it marks
    if as_json:
        from . import shapes

        out_json(shapes.with_events(res))
    elif records:
        out(render_records(records))
    else:
        sys.stderr.write("nothing to show\n")
    if not no_mark:
        printed(client, records)


def threads(open_only: bool, wide: bool, peer: str | None, home: str | None,
            as_json: bool) -> None:
    """``awp threads``: see its typer command for the options."""
    query: dict = {}
    if peer:
        query["peer"] = peer
    if open_only:
        query["open"] = "1"
    client = daemon(home_of(home))
    if as_json:
        from . import shapes

        rows = client.request("GET", "/v1/threads", query=query or None)
        out_json(shapes.threads(rows if isinstance(rows, list) else []))
        return
    # The table needs eight fields a thread: ask for bare rows, not full objects.
    res = client.request("GET", "/v1/threads", query={**query, "compact": "1"})
    assert isinstance(res, dict)
    rows = res["rows"]
    if not rows:
        out("no open threads" if open_only else "no threads yet")
        return
    out(threads_table(rows, now_ms(), 0 if wide else 50))


def status(home: str | None, as_json: bool) -> None:
    """``awp status``: see its typer command for the options."""
    from ..localapi.daemonctl import status_if_running

    found = status_if_running(home_of(home))
    if found is None:
        raise CliError("daemon not running (start it with awp up)", code=3)
    st = found[1]
    if as_json:
        out_json(st)
        return
    lines = [f"{st.get('name')} ({st.get('key')})"]
    up_for = ""
    if st.get("started"):
        from ..base.durations import format_duration

        up_for = f", up {format_duration(time.time() - st['started'] / 1000)}"
    lines.append(f"  daemon   pid {st.get('pid')}{up_for}, awp {st.get('version')}")
    lines.append(f"  address  {st.get('address') or 'none yet (' + no_address_reason(st) + ')'}")
    addrs = st.get("addresses") or []
    lst = st.get("listen") or {}
    source = _LISTEN_SOURCES.get(lst.get("source", ""), lst.get("source", ""))
    shown = ", ".join(addrs) or ", ".join(lst.get("configured") or []) or "nothing"
    lines.append(f"  listen   {shown}" + (f"  ({source})" if source else ""))
    others = [a for a in st.get("reachable") or [] if a != st.get("address")]
    if others:
        lines.append(f"  also     {', '.join(others)}")
    if st.get("multi_address"):  # the key and every endpoint in one text
        lines.append(f"  all      {st['multi_address']}")
    if st.get("tailcat_error"):
        lines.append(f"  tailcat  {st['tailcat_error']}")
    for k, v in (st.get("listen_errors") or {}).items():
        if k.strip().lower() != "tailcat":
            lines.append(f"  cannot listen on {k}: {v}")
    lines.append(f"  unread {st.get('unread', 0)}, {st.get('notices', 0)} notices,"
                 f" queued {st.get('queued', 0)}")
    if st.get("budgets"):
        lines.append(f"  budgets  {budget_line(st['budgets'])}")
    out("\n".join(lines))
    peers = st.get("peers") or []
    out()
    if not peers:
        out("no peers yet: awp connect ADDRESS")
        return
    rows = [[_peer_name(p), short(p.get("key", "")), p.get("state", ""), p.get("queued", 0),
             p.get("unread", 0)] for p in peers]
    out(table(["NAME", "KEY", "STATE", "QUEUED", "UNREAD"], rows))


def _link_cell(sealed: object) -> str:
    """``sealed`` or ``plain`` for a live link (wire/seal.py), ``-`` for none."""
    if sealed is None:
        return "-"
    return "sealed" if sealed else "plain"


def peers(home: str | None, as_json: bool) -> None:
    """``awp peers``: see its typer command for the options."""
    rows = daemon(home_of(home)).get("/v1/peers")
    assert isinstance(rows, list)
    if as_json:
        from . import shapes

        out_json(shapes.peers(rows))
        return
    if not rows:
        out("no peers yet: awp connect ADDRESS")
        return
    out(table(
        ["NAME", "KEY", "STATE", "LINK", "QUEUED", "OPEN", "UNREAD", "GRANTED", "STORED"],
        [[clip(_peer_name(p), 40), p.get("short") or short(p.get("key", "")),
          p.get("state", ""), _link_cell(p.get("sealed")), p.get("queued", 0), p.get("open_threads", 0), p.get("unread", 0),
          ",".join(p.get("granted") or []) or "-", peer_budget_cell(p.get("budget"))]
         for p in rows]))
    _identity_lines(rows)


def _identity_lines(rows: list) -> None:
    """Below the table: rotations, verified peers, and loudly, a verified key that changed."""
    for p in rows:
        who = clip(_peer_name(p), 40)
        for old in p.get("rotated_from") or []:
            out(f"{who}: rotated from {old}")
        verified = p.get("verified") or ""
        if verified:
            out(f"{who}: verified" + ("" if verified == p.get("key") else
                                      f" as {verified}, carried over by a valid rotation"))
        op = p.get("operator")
        if op:
            out(f"{who}: device of operator {op['op']}" + (f" ({op['name']})" if op["name"] else "")
                + f", {op['status']} until {op['exp']}")
        if p.get("linked"):
            out(f"{who}: one identity with " + ", ".join(p["linked"]) + " (linked keys)")
        if p.get("warning"):
            note(f"WARNING: {who}: {p['warning']}")
