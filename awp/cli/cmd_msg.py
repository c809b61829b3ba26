"""Messaging: send, state, tail, wait, read, threads."""

from __future__ import annotations

import json
import os
import sys

import typer

from .cmd_conn import _follow
from .common import (
    CliError,
    command,
    daemon,
    home_of,
    home_opt,
    json_opt,
    out,
    out_json,
    parse_seconds,
)
from .render import clip, lang_for, now_ms, render_records, since, table

HTTP_SLACK = 30.0  # added to a server-side wait to get the HTTP timeout


def _check_thread(thread: str | None) -> None:
    if thread is not None and not thread.strip():
        raise CliError("the thread id is empty")


def _read_stdin() -> str:
    if sys.stdin is None:
        raise CliError("cannot read the text from stdin: there is none")
    return sys.stdin.read()


def build_parts(text: str, code: list[str], lang: str | None, data: list[str],
                mime: str) -> list[dict]:
    """The parts of a message from the command line (text, --code, --data)."""
    parts: list[dict] = []
    if text.strip():
        parts.append({"k": "text", "text": text})
    for path in code:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                body = f.read()
        except FileNotFoundError:
            raise CliError(f"--code {path}: no such file") from None
        except IsADirectoryError:
            raise CliError(f"--code {path}: is a directory") from None
        except OSError as e:
            raise CliError(f"--code {path}: {e.strerror or e}") from None
        parts.append({"k": "code", "lang": lang or lang_for(path), "text": body})
    for raw in data:
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise CliError(f"--data is not valid JSON ({e}): {clip(raw, 60)}") from None
        parts.append({"k": "data", "mime": mime or "application/json", "data": value})
    return parts


def _delivery_line(res: dict, what: str) -> None:
    if res.get("note"):
        out(res["note"])
    out(f"{what} to {res.get('peer_name')} in {res.get('th')} ({res.get('status')})")


# -- send ----------------------------------------------------------------------------

@command("send", short_help="Send a message (starts a thread unless --thread)")
def send(
    args: list[str] = typer.Argument(
        None, metavar="PEER TEXT",
        help="the peer (name, alias, key prefix or address), then the text ('-' reads stdin)"),
    subject: str = typer.Option(None, "-s", "--subject", metavar="SUBJECT", help="subject for a new thread"),
    thread: str = typer.Option(None, "-t", "--thread", metavar="THREAD", help="thread id to reply in"),
    to: str = typer.Option(None, "--to", metavar="PEER", help="peer (instead of the positional)"),
    re_id: str = typer.Option(None, "--re", metavar="ID", help="id of the message this replies to"),
    code: list[str] = typer.Option(
        [], "--code", metavar="FILE", help="attach a file's contents as a code part (repeatable)"),
    lang: str = typer.Option(None, "--lang", metavar="LANG", help="language of --code parts (default: extension)"),
    data: list[str] = typer.Option(
        [], "--data", metavar="JSON", help="attach inline JSON as a data part (repeatable)"),
    mime: str = typer.Option("application/json", "--mime", metavar="MIME", help="mime type of --data parts"),
    files: list[str] = typer.Option(
        [], "-f", "--file", metavar="FILE", help="attach a file as a blob (repeatable)"),
    wait_ack: str = typer.Option(
        None, "--wait-ack", metavar="DURATION",
        help="wait this long for the peer's ack (default 1s when connected; 0 skips)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Send a message. Without --thread it starts a new thread and prints its id.

    Never fails because the peer is away: the message is queued and delivered
    on reconnect. The status at the end is delivered, delivering, or queued
    until the peer is reachable. With --thread the peer can be left out.

    \b
    Examples:
      awp send w --subject "Run the integration suite" --data '{"repo":"acme/api"}' \\
          "Run make integration and send me the failures."
      awp send --thread thr_cj66nrqv "40 of 42 pass" --code fix.diff
      git diff | awp send w -
    """
    pos = list(args or [])
    _check_thread(thread)
    peer = to
    if peer is None and pos and (thread is None or len(pos) >= 2):
        peer = pos.pop(0)
    if not peer and thread is None:
        raise CliError("name a peer (awp send PEER TEXT) or a --thread to reply in")
    text = _read_stdin() if pos == ["-"] else " ".join(pos)
    parts = build_parts(text, code, lang, data, mime)
    paths = [os.path.abspath(os.path.expanduser(f)) for f in files]
    for f, p in zip(files, paths, strict=True):
        if not os.path.isfile(p):
            raise CliError(f"--file {f}: no such file")
    if not parts and not paths:
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
    res = _post_delivery(home, "/v1/send", body, wait_ack, as_json)
    if res is not None:
        _delivery_line(res, f"sent {res.get('id')}")


def _post_delivery(home: str | None, path: str, body: dict, wait_ack: str | None,
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


# -- state ---------------------------------------------------------------------------

@command("state", short_help="Tell the peer your state on a thread (working, done, ...)")
def state(
    args: list[str] = typer.Argument(..., metavar="[PEER] THREAD STATE",
                                     help="optional peer, the thread id, and the state word"),
    note_text: str = typer.Option(None, "-n", "--note", metavar="NOTE", help="a short note: what, or why"),
    wait_ack: str = typer.Option(
        None, "--wait-ack", metavar="DURATION", help="wait this long for the peer's ack"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Tell the peer your state on a thread: open, working, waiting, done, failed or closed.

    Other words are allowed. The peer can be left out when the thread id is
    unique.

    \b
    Examples:
      awp state thr_9k2abcd working --note "running tests"
      awp state thr_9k2abcd failed -n "the staging database is down"
      awp state thr_9k2abcd closed
    """
    if len(args) == 2:
        peer, th, word = None, args[0], args[1]
    elif len(args) == 3:
        peer, th, word = args
    else:
        raise typer.BadParameter("give THREAD STATE, or PEER THREAD STATE",
                                 param_hint="'[PEER] THREAD STATE'")
    _check_thread(th)
    if not word.strip():
        raise CliError("the state word is empty")
    body: dict = {"th": th, "state": word}
    if peer:
        body["peer"] = peer
    if note_text:
        body["note"] = note_text
    res = _post_delivery(home, "/v1/state", body, wait_ack, as_json)
    if res is not None:
        _delivery_line(res, f"state {word} sent")


# -- tail ----------------------------------------------------------------------------

@command("tail", short_help="Print unread messages (--once) or follow new ones")
def tail(
    once: bool = typer.Option(False, "--once", help="print unread messages, mark them read, exit"),
    all_: bool = typer.Option(False, "--all", help="include sent messages and connection events"),
    mark: bool = typer.Option(False, "--mark", help="when following, mark printed messages read"),
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    thread: str = typer.Option(None, "-t", "--thread", metavar="THREAD", help="only this thread"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Print inbound messages: the unread ones with --once, else follow until interrupted.

    'awp tail --once' is what an agent calls at natural checkpoints.

    \b
    Examples:
      awp tail --once
      awp tail -p builder
    """
    _check_thread(thread)
    client = daemon(home_of(home))
    if once:
        body: dict = {"mark": True}
        if peer:
            body["peer"] = peer
        if thread:
            body["th"] = thread
        res = client.post("/v1/inbox", body)
        assert isinstance(res, dict)
        records = res.get("records") or []
        if as_json:
            out_json(res)
        elif records:
            out(render_records(records))
        else:
            sys.stderr.write("no unread messages\n")
        return
    query: dict[str, object] = {"from": "now"}
    if all_:
        query["all"] = "1"
    if mark:
        query["mark"] = "1"
    if peer:
        query["peer"] = peer
    if thread:
        query["th"] = thread
    _follow(client, query, text=not as_json)


# -- wait ----------------------------------------------------------------------------

def _state_line(th: str, peer_name: str, theirs: str | None, note: str, matched: bool,
                states: list[str]) -> str:
    if theirs is None:
        return f"{peer_name} has not said anything in {th} yet (waiting for {','.join(states)})"
    tail = f": {note}" if note else ""
    if matched:
        return f"{peer_name} is {theirs} in {th}{tail}"
    return f"{peer_name}'s state in {th}: {theirs}{tail} (waiting for {','.join(states)})"


@command("wait", short_help="Block until a message or a state arrives (exit 2 on timeout)")
def wait(
    thread: str = typer.Option(None, "-t", "--thread", metavar="THREAD", help="only this thread"),
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    states: str = typer.Option(
        None, "--state", metavar="LIST",
        help="wait for the peer's state on --thread to be one of these, e.g. done,failed"),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION", help="give up after this long"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Block until unread messages arrive, print them and mark them read.

    With --state, wait until the peer's state on the thread is one of the
    given states; a message or state arriving in that thread ends the wait
    too, followed by a line saying where the state stands. Exit status: 0
    when something arrived, 2 on timeout. Keep --timeout under your shell
    tool's own limit and wait again on 2.

    \b
    Examples:
      awp wait --timeout 2m
      awp wait --thread thr_cj66nrqv --state done,failed --timeout 10m
    """
    _check_thread(thread)
    secs = parse_seconds(timeout, "--timeout")
    wanted = [s.strip() for s in (states or "").split(",") if s.strip()]
    if states is not None and not wanted:
        raise CliError("--state needs at least one state word, e.g. done,failed")
    if wanted and not thread:
        raise CliError("--state needs --thread")
    body: dict = {"timeout": secs}
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
        out_json(res)
        if res.get("timed_out"):
            raise typer.Exit(2)
        return
    records = res.get("records") or []
    if records:
        out(render_records(records))
    if wanted:
        row = _thread_row(client, thread or "", res.get("peer") or peer)
        name = (row or {}).get("peer_name") or peer or "the peer"
        out(_state_line(thread or "", name, res.get("state"), (row or {}).get("their_note", ""),
                        bool(res.get("matched")), wanted))
    if res.get("timed_out"):
        sys.stderr.write(f"nothing new after {timeout.strip()}\n")
        raise typer.Exit(2)


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


# -- read ----------------------------------------------------------------------------

@command("read", short_help="Show a conversation, both directions, and mark it read")
def read(
    target: str = typer.Argument(None, metavar="PEER_OR_THREAD",
                                 help="a thread id (thr_...) or a peer"),
    last: int = typer.Option(50, "-n", "--last", metavar="N", help="how many records"),
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    no_mark: bool = typer.Option(False, "--no-mark", help="leave what is shown unread"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Show a conversation, both directions, oldest first, and mark it read.

    One thread, one peer, or everything recent. Marks what it shows as read
    (even through grep or head) unless --no-mark. A thread is one peer's: when
    several peers used the same thread id, name the peer with -p.

    \b
    Examples:
      awp read thr_9k2abcd
      awp read thr_9k2abcd -p builder
      awp read builder
      awp read -n 200
    """
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
                raise CliError(f"{target!r} is not a known thread, and -p names the peer"
                               " already")
            th = target
        elif _is_thread(client, target):
            # Thread ids are any string a peer picks: one spelled like a peer never shadows it.
            if _is_peer(client, target):
                raise CliError(f"{target!r} is both a peer and a thread id here: awp read -p"
                               f" {target} for the peer, awp read {target} -p PEER for the"
                               " thread")
            th = target
        else:
            peer = target
    body: dict = {"n": last, "mark": not no_mark}
    if peer:
        body["peer"] = peer
    if th:
        body["th"] = th
    res = client.post("/v1/read", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    records = res.get("records") or []
    if records:
        out(render_records(records))
    else:
        sys.stderr.write("nothing to show\n")


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


# -- threads -------------------------------------------------------------------------

@command("threads", short_help="List threads with both sides' states")
def threads(
    open_only: bool = typer.Option(False, "--open", help="only threads not done, failed or closed"),
    wide: bool = typer.Option(False, "--wide", help="print subjects in full"),
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """List threads, most recently active first, with both sides' states.

    MINE and THEIRS show each side's state and how long it has held it, e.g.
    'working 2h'.

    \b
    Examples:
      awp threads --open
      awp threads -p builder --wide
    """
    query: dict = {}
    if peer:
        query["peer"] = peer
    if open_only:
        query["open"] = "1"
    client = daemon(home_of(home))
    if as_json:
        out_json(client.request("GET", "/v1/threads", query=query or None))
        return
    # The table needs eight fields a thread: ask for bare rows, not full objects.
    res = client.request("GET", "/v1/threads", query={**query, "compact": "1"})
    assert isinstance(res, dict)
    rows = res["rows"]
    if not rows:
        out("no open threads" if open_only else "no threads yet")
        return
    now = now_ms()
    out(table(
        ["TH", "PEER", "MINE", "THEIRS", "UNREAD", "SUBJECT"],
        [[th, clip(name or "", 30), since(mine or "", my_since, now),
          since(theirs or "", their_since, now), unread, clip(subject or "", 0 if wide else 50)]
         for th, name, mine, my_since, theirs, their_since, unread, subject in rows]))

