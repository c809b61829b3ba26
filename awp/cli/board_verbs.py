"""The board's commands' work, without typer: topics, topic show/grant/revoke/ban, subscribe,
unsubscribe, post, reply, get, edit, delete, hide.

Agents run ``get``, ``post`` and ``subscribe`` in loops, as they run
``send``: so, like :mod:`awp.cli.verbs`, these bodies run from two doors.
The typer commands (:mod:`awp.cli.cmd_board`) declare the options, help and
usage errors and call them; :mod:`awp.cli.fastpath` parses plain command
lines from the table generated off those declarations and calls the same
functions with the same parameter names.  Nothing here imports typer.

Every command is a client of the daemon's ``/v1/board/*`` routes
(docs/local-api.md, "The board"); ``--json`` prints the route's answer as
it is (docs/cli-json.md).  Topic and post references (``alice/ops``,
``9f0c4e``) are resolved by the daemon, so they mean the same thing here,
in the hooks and in MCP.  The work queue's are in :mod:`awp.cli.queue_verbs`.
"""

from __future__ import annotations

from io import TextIOBase

from ..localapi.client import ApiFailure, LocalClient
from ..present import render_board
from ..present.render import now_ms
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

# Typing names without importing them at run time: collections.abc brings
# collections, a few ms of every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

HTTP_SLACK = 30.0  # added to a server-side wait to get the HTTP timeout
POST_WAIT = 10.0  # how long the daemon waits for a topic document it does not hold yet
STREAM_WAIT = 60.0  # each long poll of a following subscribe
SUB_DOC_WAIT = 2.0  # how long subscribe waits for a topic document it does not hold
ONE_REQUEST_WAIT = 1.0  # subscribe --once waits in the subscribe request up to this long
ASK_OVER = 4096  # a post this big (record overhead included) asks the topic's max_post first


# -- shared ---------------------------------------------------------------------------

def client_for(home: str | None, wait: float = 0.0) -> LocalClient:
    """The daemon's client, with an HTTP timeout that covers a server-side wait."""
    return daemon(home_of(home), timeout=wait + HTTP_SLACK)


def peer_names(client: LocalClient) -> dict[str, str]:
    """Peer keys to names (or aliases), for lines that name keys."""
    try:
        rows = client.get("/v1/peers")
    except (ApiFailure, ConnectionError):
        return {}
    names: dict[str, str] = {}
    for p in rows if isinstance(rows, list) else []:
        aliases = p.get("aliases") or []
        names[p.get("key", "")] = aliases[0] if aliases else (p.get("name") or "")
    return names


def sent_to_text(keys: list[str], names: dict[str, str]) -> str:
    if not keys:
        return "no subscriber connected now: each gets it when it connects"
    return "sent to " + ", ".join(render_board.who(k, names) for k in keys)


def label_of(res: dict, fallback: str) -> str:
    t = res.get("topic")
    if isinstance(t, dict):
        return t.get("label") or t.get("topic") or fallback
    return str(t or fallback)


def parts_from(words: list[str], code: list[str], lang: str | None, data: list[str], mime: str,
               files: list[str]) -> list[dict]:
    """A post's parts from the command line: the text (``-``: stdin), then the flags'.

    Text, ``--code`` and ``--data`` are built exactly as ``awp send`` builds
    them; ``--file`` adds the file itself, inline (a board post carries it).
    """
    from . import board_files, verbs  # only the commands that post need them

    text = verbs._read_stdin() if words == ["-"] else " ".join(words)
    parts = verbs.build_parts(text, code, lang, data, mime)
    for path in files:
        try:
            parts.append(board_files.file_part(path))
        except ValueError as e:
            raise CliError(f"--file {path}: {e}") from None
    if not parts:
        raise CliError("nothing to post: give a text ('-' reads stdin), --code FILE,"
                       " --data JSON or --file FILE")
    return parts


def check_fits(client: LocalClient, topic: str | None, parts: list[dict]) -> None:
    """Refuse, before the daemon does, a post bigger than the topic's ``max_post``.

    Worth a question to the daemon only for a post carrying a file or over
    :data:`ASK_OVER` bytes, where this can say which file is too big and by
    how much; a plain text post goes straight to the daemon, whose 413
    :func:`send_post` words as clearly.  Over the fixed 64 KiB every topic
    refuses without a question.
    """
    from . import board_files

    size = board_files.post_size(parts)
    limit, where = board_files.MAX_RECORD, topic or "the board"
    if size <= limit and not (size > ASK_OVER or any(p.get("k") == "file" for p in parts)):
        return
    if topic and size <= limit:
        try:
            res = client.post("/v1/board/get", {"topic": topic, "n": 1})
        except ApiFailure:
            res = None  # not held yet, or unknown: the post itself will say
        t = res.get("topic") if isinstance(res, dict) else None
        pol = t.get("policy") if isinstance(t, dict) else None
        if isinstance(pol, dict) and isinstance(pol.get("max_post"), int):
            limit = min(limit, pol["max_post"])
            where = t.get("label") or topic
    why = board_files.too_big(parts, limit, where)
    if why:
        raise CliError(why)


def send_post(client: LocalClient, body: dict) -> dict:
    """POST /v1/board/post; a 413 says what the limit is about."""
    try:
        res = client.request("POST", "/v1/board/post", body, timeout=POST_WAIT + HTTP_SLACK)
    except ApiFailure as e:
        if e.code == "too_large":
            raise CliError(f"{e.message} (a post, files included, must fit the topic's"
                           " max_post: send big files with awp send --file)") from None
        raise
    assert isinstance(res, dict)
    return res


MAX_LINE_CHARS = 64 * 1024  # a post is one record, and a record is at most 64 KiB


def _post_batches(f: TextIOBase, source: str) -> Iterator[tuple[list[dict], list[int]]]:
    """The non-empty lines of ``f`` as posts, 1,000 a batch with their line numbers,
    read as they are sent: a file of any length costs one batch of memory, and a
    line without end an error."""
    batch: list[dict] = []
    numbers: list[int] = []
    n = 0
    while True:
        try:
            line = f.readline(MAX_LINE_CHARS + 1)
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"cannot read {source}: {e}") from None
        if not line:
            break
        n += 1
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            raise CliError(f"{source}: line {n} is over 64 KiB, more than a post holds")
        if line.strip():
            batch.append({"parts": [{"k": "text", "text": line.rstrip("\r\n")}]})
            numbers.append(n)
        if len(batch) == 1000:
            yield batch, numbers
            batch, numbers = [], []
    if batch:
        yield batch, numbers


def line_ranges(numbers: list[int]) -> str:
    """``3, 7-9, 12``: line numbers, runs joined."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def post_lines(client: LocalClient, topic: str, source: str, as_json: bool,
               needs: list[str] | None = None) -> None:
    """Each non-empty line of ``source`` as a post, sent in batches of 1,000.

    Posting stops at the first batch the topic did not take whole (its rate,
    most often): the lines not posted are named, with why, and the exit
    status is 1, so a script can post them again later.
    """
    import sys

    posted: list[dict] = []
    left: list[int] = []  # line numbers not posted
    why = ""
    res: dict = {}
    try:
        f = open(source, encoding="utf-8") if source != "-" else sys.stdin  # noqa: SIM115
    except OSError as e:
        raise CliError(f"cannot read {source}: {e}") from None
    # only the file's own errors say "cannot read": the daemon's keep their words
    try:
        for batch, numbers in _post_batches(f, source):
            if left:
                left += numbers  # after a refusal, nothing more is sent
                continue
            try:
                body = {"topic": topic, "posts": batch, "timeout": POST_WAIT}
                if needs:
                    body["needs"] = needs  # every line's item needs them
                res = send_post(client, body)
            except ApiFailure as e:
                if not posted or e.code not in ("rate", "too_large", "forbidden"):
                    raise
                left, why = list(numbers), e.message
                continue
            posted.extend(res["posts"])
            refused = [n for n, p in zip(numbers, res["posts"], strict=False)
                       if not p.get("kept")]
            if refused:
                left, why = refused, "; ".join(res.get("refused") or []) or "refused"
    finally:
        if f is not sys.stdin:
            f.close()
    if not posted:
        raise CliError(f"{source} has no non-empty line to post")
    kept = sum(1 for p in posted if p.get("kept"))
    if as_json:
        out_json({"posts": posted, "sent_to": res.get("sent_to", []),
                  **({"not_posted": left, "why": why} if left else {})})
    else:
        out(f"posted {kept} of {kept + len(left)} on {topic}"
            + (f"; sent to {len(res.get('sent_to', []))} peer(s)" if res.get("sent_to") else ""))
    if left:
        raise CliError(f"lines not posted: {line_ranges(left)} of {source} ({why});"
                       " post them again later")


def print_posts(posts: list[dict], as_json: bool) -> None:
    """Posts as they arrive: NDJSON with ``--json``, else one labelled block each."""
    now = now_ms()
    for p in posts:
        out(compact(p) if as_json else "\n".join(render_board.post_block(p, now, label=True)))



# -- the commands: parameters are the typer commands' own names ----------------------

def topics(home: str | None, as_json: bool) -> None:
    """``awp topics``."""
    res = client_for(home).get("/v1/board/topics")
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    rows = res.get("topics") or []
    if not rows:
        note("no topics yet: awp topic create NAME, or awp subscribe PEER/NAME")
        return
    out(render_board.topics_table(rows))


def topic_show(topic: str, home: str | None, as_json: bool) -> None:
    """``awp topic show``."""
    client = client_for(home)
    res = client.post("/v1/board/get", {"topic": topic, "n": 1})
    assert isinstance(res, dict)
    t = res.get("topic") if isinstance(res.get("topic"), dict) else {}
    if as_json:
        out_json(t)
        return
    pol = t.get("policy") if isinstance(t.get("policy"), dict) else {}
    # Names are only shown for banned keys: the peer list is asked for only then.
    out(render_board.topic_details(t, peer_names(client) if pol.get("banned") else {}))


def topic_grant(topic: str, peer: str, read: bool, post: bool, ttl: str, home: str | None,
                as_json: bool) -> None:
    """``awp topic grant``."""
    if read and post:
        raise CliError("--read or --post, not both", 2)
    what = "read" if read else "post"
    res = client_for(home).post("/v1/board/grant", {
        "topic": topic, "peer": peer, "what": what, "ttl": parse_seconds(ttl, "--ttl")})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    if res.get("member"):
        n = len(res.get("readers") or [])
        out(f"granted {what} on {topic} to {peer} until {res.get('until', '?')}: it travels"
            f" with the topic to every subscriber over any path of readers ({n} linked now;"
            " a relay that may not read the topic never carries it)")
        return
    grant = res.get("grant") if isinstance(res.get("grant"), dict) else {}
    how = "delivered" if res.get("delivered") else "it gets it on its next connection"
    out(f"granted {what} on {topic} to {peer} until {grant.get('exp', '?')} ({how});"
        f" hash {str(res.get('hash', ''))[:12]}")


def topic_revoke(topic: str, peer: str | None, grant: str | None, home: str | None,
                 as_json: bool) -> None:
    """``awp topic revoke``."""
    if (peer is None) == (grant is None):
        raise CliError("name the peer, or --grant HASH (one of them)", 2)
    body: dict = {"topic": topic, **({"peer": peer} if peer else {"grant": grant})}
    res = client_for(home).post("/v1/board/revoke", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    revoked = res.get("revoked") or []
    if res.get("member"):
        more = f" and {len(revoked)} grant(s): {', '.join(h[:12] for h in revoked)}" if revoked else ""
        out(f"revoked {peer} on {label_of(res, topic)}{more}; nothing new of theirs is taken,"
            " whatever time it claims")
        return
    if not revoked:
        raise CliError(f"no board grant on {topic} to revoke"
                       + (f" for {peer}" if peer else f" with hash {grant}"))
    out(f"revoked {len(revoked)} grant{'s' if len(revoked) != 1 else ''} on"
        f" {label_of(res, topic)}: {', '.join(h[:12] for h in revoked)}")


def topic_ban(topic: str, peer: str, unban: bool, home: str | None, as_json: bool) -> None:
    """``awp topic ban``."""
    res = client_for(home).post(
        "/v1/board/ban", {"topic": topic, "peer": peer, "unban": unban})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"{'unbanned' if unban else 'banned'} {peer} {'on' if unban else 'from'}"
        f" {label_of(res, topic)}")


def subscribe(topics: list[str], once: bool, timeout: str | None, home: str | None,
              as_json: bool) -> None:
    """``awp subscribe``."""
    until = None  # following: for ever, unless --timeout
    if timeout is None and once:
        timeout = "5m"
    secs = parse_seconds(timeout, "--timeout") if timeout is not None else STREAM_WAIT
    if not once and timeout is not None:
        import time

        until = time.monotonic() + secs
    client = client_for(home, secs if once else STREAM_WAIT)
    # The first subscribe's answer carries the cursor taken before it subscribed:
    # whatever arrives from the subscription on, the backlog the owner sends
    # included, is after it.  One topic and a short --once wait: the subscribe
    # waits too (one request; its note then comes after at most ONE_REQUEST_WAIT).
    one = once and len(topics) == 1 and secs <= ONE_REQUEST_WAIT
    cursor = None
    refs = []
    waited = None
    for topic in topics:
        # A moment for the owner's document, when a connected peer holds it.
        ask: dict = {"topic": topic, "timeout": SUB_DOC_WAIT, "brief": True}
        if one:
            ask["wait"] = secs
        res = client.post("/v1/board/subscribe", ask)
        assert isinstance(res, dict)
        if not refs:
            cursor = res.get("cursor")
            if cursor is None:  # an older daemon's answer: from now on, then
                start = client.post("/v1/board/wait", {"topics": [], "timeout": 0})
                cursor = start.get("cursor") if isinstance(start, dict) else None
        if isinstance(res.get("wait"), dict):
            waited = res["wait"]
        t = res.get("topic") if isinstance(res.get("topic"), dict) else {}
        refs.append(t.get("topic") or topic)
        if not t.get("known"):
            note(f"subscribed to {label_of(res, topic)} (its topic document has not arrived yet:"
                 " it comes from a connected peer that holds it)")
        else:
            note(f"subscribed to {label_of(res, topic)}")
    body: dict = {"topics": refs, "after": cursor}
    if once:
        res = waited or client.request("POST", "/v1/board/wait", {**body, "timeout": secs},
                                       timeout=secs + HTTP_SLACK)
        assert isinstance(res, dict)
        print_posts(res.get("posts") or [], as_json)
        if res.get("timed_out") or not res.get("posts"):
            note(f"nothing new after {timeout.strip()}")
            raise CliExit(2)
        return
    got = 0
    try:
        while True:
            step = STREAM_WAIT
            if until is not None:
                import time

                step = min(STREAM_WAIT, until - time.monotonic())
                if step <= 0:
                    break
            res = client.request("POST", "/v1/board/wait", {**body, "timeout": step},
                                 timeout=step + HTTP_SLACK)
            assert isinstance(res, dict)
            got += len(res.get("posts") or [])
            print_posts(res.get("posts") or [], as_json)
            if res.get("cursor") is not None:
                body["after"] = res["cursor"]
    except KeyboardInterrupt:
        raise CliExit(0) from None
    if not got:
        note(f"nothing new after {str(timeout).strip()}")
        raise CliExit(2)


def unsubscribe(topics: list[str], home: str | None, as_json: bool) -> None:
    """``awp unsubscribe``."""
    client = client_for(home)
    answers = []
    for topic in topics:
        res = client.post("/v1/board/unsubscribe", {"topic": topic})
        assert isinstance(res, dict)
        answers.append(res)
        if not as_json:
            out(f"unsubscribed from {topic}")
    if as_json:
        out_json(answers[0] if len(answers) == 1 else answers)


def _posted_line(client: LocalClient, res: dict, verb: str) -> str:
    p = res.get("post") if isinstance(res.get("post"), dict) else {}
    where = p.get("label") or p.get("topic") or "?"
    what = f"{verb} {p.get('id') or str(p.get('hash', ''))[:10]}"
    if p.get("parent"):
        what += f" to {str(p['parent'])[:10]}"
    keys = list(res.get("sent_to") or [])
    names = res.get("names")  # the daemon names them; an older one did not
    if keys and not isinstance(names, dict):
        names = peer_names(client)
    return f"{what} on {where}; {sent_to_text(keys, names or {})}"


def post(args: list[str], code: list[str], lang: str | None, data: list[str], mime: str,
         files: list[str], lines: str, home: str | None, as_json: bool,
         needs: str = "") -> None:
    """``awp post``; ``needs``: a queue item's tags (the market), comma-separated."""
    topic, words = args[0], list(args[1:])
    need_tags = [t.strip().lower() for t in needs.split(",") if t.strip()]
    if lines:
        if words or code or data or files:
            raise CliError("--lines takes each line as a post's text: give nothing else", 2)
        post_lines(client_for(home, POST_WAIT), topic, lines, as_json, need_tags)
        return
    parts = parts_from(words, code, lang, data, mime, files)
    client = client_for(home, POST_WAIT)
    check_fits(client, topic, parts)
    body = {"topic": topic, "parts": parts, "timeout": POST_WAIT}
    if need_tags:
        body["needs"] = need_tags
    res = send_post(client, body)
    if as_json:
        out_json(res)
        return
    out(_posted_line(client, res, "posted"))


def reply(args: list[str], code: list[str], lang: str | None, data: list[str], mime: str,
          files: list[str], home: str | None, as_json: bool) -> None:
    """``awp reply``."""
    parent, words = args[0], list(args[1:])
    parts = parts_from(words, code, lang, data, mime, files)
    client = client_for(home, POST_WAIT)
    check_fits(client, None, parts)
    res = send_post(client, {"parent": parent, "parts": parts, "timeout": POST_WAIT})
    if as_json:
        out_json(res)
        return
    out(_posted_line(client, res, "replied"))


def get(topic: str, n: int, since: str | None, thread: str | None, save: str | None,
        wait: bool, timeout: str, home: str | None, as_json: bool) -> None:
    """``awp get`` (``wait``: when nothing matches, wait up to ``timeout`` for a post)."""
    if n < 0:
        raise CliError("-n/--last must be 0 (all) or more", 2)
    body: dict = {"topic": topic, "n": n}
    if since is not None:
        try:
            from . import board_files

            body["since"] = board_files.parse_since(since, now_ms())
        except ValueError as e:
            raise CliError(f"--since: {e}", 2) from None
    if thread is not None:
        body["parent"] = thread
    wait_s = parse_seconds(timeout, "--timeout") if wait else None
    client = client_for(home, wait_s or 0.0)
    cursor = None
    if wait_s is not None:
        # Where "new" starts, taken before the read so no post falls in between.
        start = client.post("/v1/board/wait", {"topics": [topic], "timeout": 0})
        cursor = start.get("cursor") if isinstance(start, dict) else None
    res = client.post("/v1/board/get", body)
    assert isinstance(res, dict)
    posts = list(res.get("posts") or [])
    timed_out = False
    if not posts and wait_s is not None:
        w = client.request("POST", "/v1/board/wait",
                           {"topics": [topic], "after": cursor, "timeout": wait_s},
                           timeout=wait_s + HTTP_SLACK)
        assert isinstance(w, dict)
        posts = list(w.get("posts") or [])
        timed_out = not posts
        res = {**res, "posts": posts}
    saved = None
    if save is not None:
        from . import board_files

        saved = board_files.save_files(posts, save)
    if as_json:
        out_json({**res, "saved": saved} if saved is not None else res)
    elif posts:
        by_post: dict[str, dict[str, str]] = {}
        for s in saved or []:
            if s.get("path"):
                by_post.setdefault(s["post"], {})[s["name"]] = s["path"]
        out(render_board.render_posts(posts, saved=by_post))
        for s in saved or []:
            if s.get("error"):
                note(f"not saved: {s['name']} of {s['post'][:10]}: {s['error']}")
    if not as_json and isinstance(res.get("topic"), dict):
        for w in render_board.trust_warnings(res["topic"]):
            note(f"warning: {label_of(res, topic)}: {w}")
    if timed_out:
        note(f"nothing new on {label_of(res, topic)} after {timeout.strip()}")
        raise CliExit(2)
    if not posts and not as_json:
        note(f"no posts on {label_of(res, topic)}" + (" matching" if since or thread else ""))


def _change(cmd: str, body: dict, home: str | None, as_json: bool, verb: str) -> None:
    res = client_for(home).post(f"/v1/board/{cmd}", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"{verb} {str(res.get('of') or body['post'])[:10]}"
        f" (record {str(res.get('hash', ''))[:10]})")


def edit(args: list[str], code: list[str], lang: str | None, data: list[str], mime: str,
         files: list[str], home: str | None, as_json: bool) -> None:
    """``awp edit``."""
    post_id, words = args[0], list(args[1:])
    parts = parts_from(words, code, lang, data, mime, files)
    from . import board_files

    why = board_files.too_big(parts, board_files.MAX_RECORD, "the board")
    if why:
        raise CliError(why)
    _change("edit", {"post": post_id, "parts": parts}, home, as_json, "edited")


def delete(post: str, home: str | None, as_json: bool) -> None:
    """``awp delete``."""
    _change("delete", {"post": post}, home, as_json, "deleted")


def hide(post: str, home: str | None, as_json: bool) -> None:
    """``awp hide``."""
    _change("hide", {"post": post}, home, as_json, "hid")
