"""The board: topics, topic (create, set, show, grant, revoke, ban), subscribe,
unsubscribe, post, reply, get, edit, delete, hide.

Every command is a client of the daemon's ``/v1/board/*`` routes
(docs/local-api.md, "The board"); ``--json`` prints the route's answer as
it is (docs/cli-json.md).  Topic and post references (``alice/ops``,
``9f0c4e``) are resolved by the daemon, so they mean the same thing here,
in the hooks and in MCP.  The work queue's commands are in
:mod:`awp.cli.cmd_queue`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TextIO

import typer

from ..localapi.client import ApiFailure, LocalClient
from ..present import render_board
from ..present.render import now_ms
from . import board_files, verbs
from .common import (
    CliError,
    CliExit,
    app,
    command,
    compact,
    daemon,
    home_of,
    home_opt,
    json_opt,
    note,
    out,
    out_json,
    parse_seconds,
)

HTTP_SLACK = 30.0  # added to a server-side wait to get the HTTP timeout
POST_WAIT = 10.0  # how long the daemon waits for a topic document it does not hold yet
STREAM_WAIT = 60.0  # each long poll of a following subscribe
SUB_DOC_WAIT = 2.0  # how long subscribe waits for a topic document it does not hold

topic_app = typer.Typer(
    name="topic",
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Create and manage board topics: create, set, show, grant, revoke, ban.\n\n"
         "A topic is ed25519:OWNER/NAME, shown as OWNER-ALIAS/NAME; your own topics can"
         " be named by NAME alone.",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
app.add_typer(topic_app, name="topic",
              short_help="Create and manage board topics (create, set, show, grant, ...)")


@topic_app.callback()
def topic_group(ctx: typer.Context, home: str = home_opt()) -> None:
    """Take ``--home`` before the subcommand too (``awp --home H topic ...`` puts it there)."""
    ctx.obj = home


def group_home(ctx: typer.Context, home: str | None) -> str | None:
    """The subcommand's ``--home``, else the one given to ``awp topic``."""
    return home if home is not None else ctx.obj if isinstance(ctx.obj, str) else None


def topic_command(name: str, **kw):
    """Register ``awp topic NAME``; failures print ``awp topic NAME: <reason>``."""
    return command(name, on=topic_app, label=f"topic {name}", **kw)


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

    Small posts fit every topic and cost no question; for others the topic's
    own figure is asked for when the topic is held, else the fixed 64 KiB.
    """
    if board_files.post_size(parts) <= board_files.MIN_MAX_POST:
        return
    limit, where = board_files.MAX_RECORD, topic or "the board"
    if topic:
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


def _post_batches(f: TextIO, source: str) -> Iterator[list[dict]]:
    """The non-empty lines of ``f`` as posts, 1,000 a batch, read as they are sent:
    a file of any length costs one batch of memory, and a line without end an error."""
    batch: list[dict] = []
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
        if len(batch) == 1000:
            yield batch
            batch = []
    if batch:
        yield batch


def post_lines(client: LocalClient, topic: str, source: str, as_json: bool) -> None:
    """Each non-empty line of ``source`` as a post, sent in batches of 1,000."""
    import sys

    posted: list[dict] = []
    res: dict = {}
    try:
        f = open(source, encoding="utf-8") if source != "-" else sys.stdin  # noqa: SIM115
    except OSError as e:
        raise CliError(f"cannot read {source}: {e}") from None
    # only the file's own errors say "cannot read": the daemon's keep their words
    with f if source != "-" else contextlib.nullcontext(f):
        for batch in _post_batches(f, source):
            res = send_post(client, {"topic": topic, "posts": batch, "timeout": POST_WAIT})
            posted.extend(res["posts"])
    if not posted:
        raise CliError(f"{source} has no non-empty line to post")
    if as_json:
        out_json({"posts": posted, "sent_to": res.get("sent_to", [])})
        return
    kept = sum(1 for p in posted if p.get("kept"))
    out(f"posted {kept} of {len(posted)} on {topic}"
        + (f"; sent to {len(res.get('sent_to', []))} peer(s)" if res.get("sent_to") else ""))


def print_posts(posts: list[dict], as_json: bool) -> None:
    """Posts as they arrive: NDJSON with ``--json``, else one labelled block each."""
    now = now_ms()
    for p in posts:
        out(compact(p) if as_json else "\n".join(render_board.post_block(p, now, label=True)))


# -- topics ---------------------------------------------------------------------------

@command("topics", short_help="List board topics: yours, subscribed, and known")
def topics_cmd(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """List the board topics this host knows: yours first, then the others by name.

    SUBSCRIBED is owner for your own topics; UNREAD counts others' posts not
    yet brought to you by the hooks.

    \b
    Example:
      awp topics
    """
    res = client_for(home).get("/v1/board/topics")
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    topics = res.get("topics") or []
    if not topics:
        note("no topics yet: awp topic create NAME, or awp subscribe PEER/NAME")
        return
    out(render_board.topics_table(topics))


# -- topic create / set ---------------------------------------------------------------

def _opt(default, *names: str, metavar: str | None = None, help: str = ""):
    return typer.Option(default, *names, metavar=metavar, help=help)


def policy_body(title: str | None, open_: bool, read: str | None, post: str | None,
                keep: int | None, keep_days: int | None, keep_bytes: str | None,
                rate: int | None, max_post: str | None, queue: bool | None,
                lease: str | None, attempts: int | None) -> dict:
    """The policy fields given on the command line, as ``/v1/board/topic`` takes them.

    Only what was given is sent: the daemon keeps the rest (a new topic gets
    the defaults).  ``--open`` is ``--read open --post open``.
    """
    from ..base.limits import parse_size

    body: dict = {}
    for flag, value in (("--read", read), ("--post", post)):
        if value is not None and value not in ("open", "grant"):
            raise CliError(f"{flag} must be open or grant, not {value!r}", 2)
    if open_:
        if "grant" in (read, post):
            raise CliError("--open means --read open --post open: leave out the other", 2)
        read = post = "open"
    if title is not None:
        body["title"] = title
    if read is not None:
        body["read"] = read
    if post is not None:
        body["post"] = post
    for field, n in (("keep", keep), ("keep_days", keep_days), ("rate", rate),
                     ("attempts", attempts)):
        if n is not None:
            body[field] = n
    for field, flag, text in (("keep_bytes", "--keep-bytes", keep_bytes),
                              ("max_post", "--max-post", max_post)):
        if text is not None:
            try:
                body[field] = parse_size(text)
            except ValueError as e:
                raise CliError(f"{flag}: {e}", 2) from None
    if queue is not None:
        body["queue"] = queue
    if lease is not None:
        secs = parse_seconds(lease, "--lease")
        if secs != int(secs) or secs < 1:
            raise CliError("--lease must be a whole number of seconds, at least 1s", 2)
        body["lease_s"] = int(secs)
    return body


def _policy_summary(t: dict) -> str:
    pol = t.get("policy") if isinstance(t.get("policy"), dict) else {}
    text = f"read {pol.get('read', '?')}, post {pol.get('post', '?')}"
    if pol.get("queue"):
        text += f", a work queue (leases of {pol.get('lease_s')}s)"
    return text


def _save_topic(name: str, body: dict, home: str | None, as_json: bool, creating: bool) -> None:
    res = client_for(home).post("/v1/board/topic", {"name": name, **body})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    t = res.get("topic") if isinstance(res.get("topic"), dict) else {}
    label = t.get("label") or name
    if res.get("created"):
        out(f"created topic {label}: {_policy_summary(t)}")
        if (t.get("policy") or {}).get("post") != "open":
            out(f"let a peer post: awp topic grant {name} PEER")
    elif creating:
        out(f"topic {label} exists already; its policy now: {_policy_summary(t)}")
    else:
        out(f"updated topic {label}: {_policy_summary(t)}")


TITLE_HELP = "a title (up to 200 characters)"
OPEN_HELP = "anyone may read and post (same as --read open --post open)"
READ_HELP = "who may read: open, or grant (the owner and grant holders)"
POST_HELP = "who may post: open, or grant"
KEEP_HELP = "records kept (default 10000)"
DAYS_HELP = "days a record is kept (default 30)"
BYTES_HELP = "bytes of records kept, e.g. 64MiB (default)"
RATE_HELP = "posts a minute per author (default 60)"
MAXPOST_HELP = "bytes a post may have, e.g. 16KiB (default and most 64KiB)"
QUEUE_HELP = "make the topic a work queue (awp claim)"
LEASE_HELP = "a queue lease's length, e.g. 5m (default)"
ATTEMPTS_HELP = "attempts an item gets before it is dead (default 3)"


def _policy_command(verb: str, short_help: str, doc: str, name_help: str) -> None:
    """``awp topic create`` and ``awp topic set``: one set of policy flags for both."""

    def cmd(
        ctx: typer.Context,
        name: str = typer.Argument(..., metavar="NAME", help=name_help),
        title: str = _opt(None, "--title", metavar="TITLE", help=TITLE_HELP),
        open_: bool = _opt(False, "--open", help=OPEN_HELP),
        read: str = _opt(None, "--read", metavar="open|grant", help=READ_HELP),
        post: str = _opt(None, "--post", metavar="open|grant", help=POST_HELP),
        keep: int = _opt(None, "--keep", metavar="N", help=KEEP_HELP),
        keep_days: int = _opt(None, "--keep-days", metavar="D", help=DAYS_HELP),
        keep_bytes: str = _opt(None, "--keep-bytes", metavar="SIZE", help=BYTES_HELP),
        rate: int = _opt(None, "--rate", metavar="N", help=RATE_HELP),
        max_post: str = _opt(None, "--max-post", metavar="SIZE", help=MAXPOST_HELP),
        queue: bool = _opt(None, "--queue/--no-queue", help=QUEUE_HELP),
        lease: str = _opt(None, "--lease", metavar="DURATION", help=LEASE_HELP),
        attempts: int = _opt(None, "--attempts", metavar="N", help=ATTEMPTS_HELP),
        home: str = home_opt(),
        as_json: bool = json_opt(),
    ) -> None:
        body = policy_body(title, open_, read, post, keep, keep_days, keep_bytes, rate,
                           max_post, queue, lease, attempts)
        creating = verb == "create"
        if not body and not creating:
            raise CliError("nothing to change: give at least one flag"
                           " (see awp topic set --help)", 2)
        _save_topic(name, body, group_home(ctx, home), as_json, creating=creating)

    cmd.__doc__ = doc  # typer reads the help from it when the command is registered
    cmd.__name__ = f"topic_{verb}"
    topic_command(verb, short_help=short_help)(cmd)


_policy_command("create", "Create one of your topics", """Create a topic you own. By default only you and the peers you grant may
    read and post; --open lets anyone whose daemon speaks board do both.

    \b
    Examples:
      awp topic create ops --title "Deploys and incidents"
      awp topic create lobby --open
      awp topic create jobs --queue --lease 10m --attempts 5
    """, "1-64 of a-z 0-9 . _ -")
_policy_command("set", "Change one of your topics' policy", """Change a topic you own: only the flags given change. The new policy
    reaches every subscriber as a new version of the topic document.

    \b
    Examples:
      awp topic set ops --read open
      awp topic set ops --rate 10 --max-post 16KiB
    """, "your topic's name")


# -- topic show / grant / revoke / ban -------------------------------------------------

@topic_command("show", short_help="Show a topic: owner, counts and policy")
def topic_show(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="PEER/NAME, NAME (yours) or ed25519:KEY/NAME"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Show a topic this host holds: its owner, counts and whole policy.

    \b
    Examples:
      awp topic show ops
      awp topic show alice/ops --json
    """
    client = client_for(group_home(ctx, home))
    res = client.post("/v1/board/get", {"topic": topic, "n": 1})
    assert isinstance(res, dict)
    t = res.get("topic") if isinstance(res.get("topic"), dict) else {}
    if as_json:
        out_json(t)
        return
    out(render_board.topic_details(t, peer_names(client)))


@topic_command("grant", short_help="Let a peer post to (or read) one of your topics")
def topic_grant(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="your topic (NAME, or NAME/* for all)"),
    peer: str = typer.Argument(..., metavar="PEER", help="the peer (name, alias or key prefix)"),
    read: bool = typer.Option(False, "--read", help="reading only"),
    post: bool = typer.Option(False, "--post", help="posting and reading (the default)"),
    ttl: str = typer.Option("30d", "--ttl", metavar="DURATION", help="how long it is valid"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Grant a key or known peer the right to post to one of your topics (which
    includes reading it), or with --read to read it only, until the ttl runs
    out. The peer need not be connected: the grant is written into the topic's
    document, which reaches every subscriber over any path of hosts that may
    read the topic (NAME/* grants go on a direct connection).

    \b
    Examples:
      awp topic grant ops builder
      awp topic grant ops auditor --read --ttl 7d
      awp topic grant 'ops/*' builder       # every topic of yours
    """
    if read and post:
        raise CliError("--read or --post, not both", 2)
    what = "read" if read else "post"
    res = client_for(group_home(ctx, home)).post("/v1/board/grant", {
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


@topic_command("revoke", short_help="Revoke a peer's grants on one of your topics")
def topic_revoke(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="your topic"),
    peer: str = typer.Argument(None, metavar="[PEER]", help="revoke every grant given to this peer"),
    grant: str = typer.Option(None, "--grant", metavar="HASH", help="revoke this grant only (a prefix)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Revoke a peer's membership and board grants on one of your topics, or
    one grant by its hash. Every host that learns of it (the topic's document
    travels to every subscriber) refuses their new records, whatever time
    they claim; posts already taken stay.

    \b
    Examples:
      awp topic revoke ops builder
      awp topic revoke ops --grant 3f2a9c
    """
    if (peer is None) == (grant is None):
        raise CliError("name the peer, or --grant HASH (one of them)", 2)
    body: dict = {"topic": topic, **({"peer": peer} if peer else {"grant": grant})}
    res = client_for(group_home(ctx, home)).post("/v1/board/revoke", body)
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


@topic_command("ban", short_help="Ban (or --unban) a key from one of your topics")
def topic_ban(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="your topic"),
    peer: str = typer.Argument(..., metavar="PEER", help="a peer or a key"),
    unban: bool = typer.Option(False, "--unban", help="lift the ban"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Ban a key from one of your topics: its records are refused and not
    served by any host, whatever grant it holds. --unban lifts it.

    \b
    Examples:
      awp topic ban ops mallory
      awp topic ban ops mallory --unban
    """
    res = client_for(group_home(ctx, home)).post(
        "/v1/board/ban", {"topic": topic, "peer": peer, "unban": unban})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"{'unbanned' if unban else 'banned'} {peer} {'on' if unban else 'from'}"
        f" {label_of(res, topic)}")


# -- subscribe / unsubscribe ----------------------------------------------------------

@command("subscribe", short_help="Subscribe to topics and print new posts (--once: wait once)")
def subscribe_cmd(
    topics: list[str] = typer.Argument(..., metavar="TOPIC...", help="PEER/NAME, NAME or ed25519:KEY/NAME"),
    once: bool = typer.Option(False, "--once", help="wait for new posts once, print them, exit"),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION",
                                help="with --once, give up after this long"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Subscribe to topics, then print the posts others make there as they
    arrive, until interrupted. Posts already on the topic come in too as
    this host catches up.

    With --once, wait for the first new posts, print them and exit: status 0
    when something arrived, 2 on timeout (as awp wait). --json prints one post
    object a line. Subscribing again is harmless.

    \b
    Examples:
      awp subscribe alice/ops
      awp subscribe alice/ops alice/jobs --once --timeout 2m
    """
    secs = parse_seconds(timeout, "--timeout")
    client = client_for(home, secs if once else STREAM_WAIT)
    # The cursor first: whatever arrives from the subscription on, the backlog
    # the owner sends included, is after it.
    start = client.post("/v1/board/wait", {"topics": [], "timeout": 0})
    assert isinstance(start, dict)
    cursor = start.get("cursor")
    refs = []
    for topic in topics:
        # A moment for the owner's document, when a connected peer holds it.
        res = client.post("/v1/board/subscribe", {"topic": topic, "timeout": SUB_DOC_WAIT})
        assert isinstance(res, dict)
        t = res.get("topic") if isinstance(res.get("topic"), dict) else {}
        refs.append(t.get("topic") or topic)
        if not t.get("known"):
            note(f"subscribed to {label_of(res, topic)} (its topic document has not arrived yet:"
                 " it comes from a connected peer that holds it)")
        else:
            note(f"subscribed to {label_of(res, topic)}")
    body: dict = {"topics": refs, "after": cursor}
    if once:
        res = client.request("POST", "/v1/board/wait", {**body, "timeout": secs},
                             timeout=secs + HTTP_SLACK)
        assert isinstance(res, dict)
        print_posts(res.get("posts") or [], as_json)
        if res.get("timed_out") or not res.get("posts"):
            note(f"nothing new after {timeout.strip()}")
            raise CliExit(2)
        return
    try:
        while True:
            res = client.request("POST", "/v1/board/wait", {**body, "timeout": STREAM_WAIT},
                                 timeout=STREAM_WAIT + HTTP_SLACK)
            assert isinstance(res, dict)
            print_posts(res.get("posts") or [], as_json)
            if res.get("cursor") is not None:
                body["after"] = res["cursor"]
    except KeyboardInterrupt:
        raise CliExit(0) from None


@command("unsubscribe", short_help="Stop receiving a topic")
def unsubscribe_cmd(
    topics: list[str] = typer.Argument(..., metavar="TOPIC...", help="topics to leave"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Stop receiving topics. What is held stays until retention drops it;
    nothing more arrives. Your own topics cannot be left.

    \b
    Example:
      awp unsubscribe alice/ops
    """
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


# -- post / reply ---------------------------------------------------------------------

def _part_options():
    """The part flags of post, reply and edit (as awp send's, plus --file inline)."""
    return {
        "code": typer.Option([], "--code", metavar="FILE",
                             help="attach a file's contents as a code part (repeatable)"),
        "lang": typer.Option(None, "--lang", metavar="LANG",
                             help="language of --code parts (default: extension)"),
        "data": typer.Option([], "--data", metavar="JSON|@FILE",
                             help="attach JSON (inline, or @FILE) as a data part (repeatable)"),
        "mime": typer.Option("application/json", "--mime", metavar="MIME",
                             help="mime type of --data parts"),
        "files": typer.Option([], "-f", "--file", metavar="FILE",
                              help="attach a file inline (repeatable; the post must fit the"
                                   " topic's max_post, 64KiB by default)"),
    }


_P = _part_options()


def _posted_line(client: LocalClient, res: dict, verb: str) -> str:
    p = res.get("post") if isinstance(res.get("post"), dict) else {}
    where = p.get("label") or p.get("topic") or "?"
    what = f"{verb} {p.get('id') or str(p.get('hash', ''))[:10]}"
    if p.get("parent"):
        what += f" to {str(p['parent'])[:10]}"
    return (f"{what} on {where}; "
            f"{sent_to_text(list(res.get('sent_to') or []), peer_names(client))}")


@command("post", short_help="Post to a topic (text, stdin, --code, --data, --file)")
def post_cmd(
    args: list[str] = typer.Argument(..., metavar="TOPIC [TEXT|-]",
                                     help="the topic, then the text ('-' reads stdin)"),
    code: list[str] = _P["code"],
    lang: str = _P["lang"],
    data: list[str] = _P["data"],
    mime: str = _P["mime"],
    files: list[str] = _P["files"],
    lines: str = typer.Option("", "--lines", metavar="FILE|-",
                              help="one post per non-empty line of FILE ('-': stdin),"
                                   " in one go: how a queue is filled"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Post to a topic; prints the post's id and who it was sent to.

    Posting to someone else's topic subscribes you to it. It needs a grant
    from the owner unless the topic is open to post. A file goes inside the
    post, so the whole post must fit the topic's max_post (64KiB unless the
    owner set less); send bigger files with awp send --file.

    \b
    Examples:
      awp post alice/ops "deploy 42 is green"
      awp post ops --data '{"build":42,"ok":true}' "build result"
      git diff | awp post alice/reviews - --file notes.md
      awp post jobs --lines tasks.txt
    """
    topic, words = args[0], list(args[1:])
    if lines:
        if words or code or data or files:
            raise CliError("--lines takes each line as a post's text: give nothing else")
        post_lines(client_for(home, POST_WAIT), topic, lines, as_json)
        return
    parts = parts_from(words, code, lang, data, mime, files)
    client = client_for(home, POST_WAIT)
    check_fits(client, topic, parts)
    res = send_post(client, {"topic": topic, "parts": parts, "timeout": POST_WAIT})
    if as_json:
        out_json(res)
        return
    out(_posted_line(client, res, "posted"))


@command("reply", short_help="Reply to a post (the reply goes to its topic)")
def reply_cmd(
    args: list[str] = typer.Argument(..., metavar="POST_ID [TEXT|-]",
                                     help="the post's id (6+ characters), then the text"),
    code: list[str] = _P["code"],
    lang: str = _P["lang"],
    data: list[str] = _P["data"],
    mime: str = _P["mime"],
    files: list[str] = _P["files"],
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Reply to a post, in its topic. Takes the same parts as awp post.

    \b
    Examples:
      awp reply 9f0c4e "on it"
      awp reply 9f0c4e --code fix.diff "this fixes it"
    """
    parent, words = args[0], list(args[1:])
    parts = parts_from(words, code, lang, data, mime, files)
    client = client_for(home, POST_WAIT)
    check_fits(client, None, parts)
    res = send_post(client, {"parent": parent, "parts": parts, "timeout": POST_WAIT})
    if as_json:
        out_json(res)
        return
    out(_posted_line(client, res, "replied"))


# -- get ------------------------------------------------------------------------------

@command("get", short_help="Print a topic's posts, oldest first, replies under their parent")
def get_cmd(
    topic: str = typer.Argument(..., metavar="TOPIC", help="PEER/NAME, NAME or ed25519:KEY/NAME"),
    n: int = typer.Option(20, "-n", "--last", metavar="N", help="how many posts, newest (0: all)"),
    since: str = typer.Option(None, "--since", metavar="DURATION|TIME",
                              help="only posts from then on: 2h, 7d, or 2026-09-21T14:00:00Z"),
    thread: str = typer.Option(None, "--thread", metavar="POST_ID",
                               help="only this post and its replies"),
    save: str = typer.Option(None, "--save", metavar="DIR",
                             help="write the files of the posts shown into DIR"),
    wait: str = typer.Option(None, "--wait", metavar="DURATION",
                             help="when there is nothing to show, wait this long for a post"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Print a topic's posts held here, oldest first: id, author, age, parts.
    A reply sits under its parent when both are shown; edited posts say so.

    --save writes the file parts of the posts shown into DIR (names made
    safe; an existing file is never replaced). --wait: when nothing matches,
    wait for the first new post by someone else (exit 2 on timeout).

    \b
    Examples:
      awp get alice/ops
      awp get alice/ops -n 0 --since 2h
      awp get alice/ops --thread 9f0c4e --save ./in
      awp get alice/ops --since 10m --wait 5m
    """
    if n < 0:
        raise CliError("-n/--last must be 0 (all) or more", 2)
    body: dict = {"topic": topic, "n": n}
    if since is not None:
        try:
            body["since"] = board_files.parse_since(since, now_ms())
        except ValueError as e:
            raise CliError(f"--since: {e}", 2) from None
    if thread is not None:
        body["parent"] = thread
    wait_s = parse_seconds(wait, "--wait") if wait is not None else None
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
    saved = board_files.save_files(posts, save) if save is not None else None
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
    if timed_out:
        note(f"nothing new on {label_of(res, topic)} after {wait.strip() if wait else ''}")
        raise CliExit(2)
    if not posts and not as_json:
        note(f"no posts on {label_of(res, topic)}" + (" matching" if since or thread else ""))


# -- edit / delete / hide -------------------------------------------------------------

def _change(cmd: str, body: dict, home: str | None, as_json: bool, verb: str) -> None:
    res = client_for(home).post(f"/v1/board/{cmd}", body)
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"{verb} {str(res.get('of') or body['post'])[:10]}"
        f" (record {str(res.get('hash', ''))[:10]})")


@command("edit", short_help="Replace the parts of one of your posts")
def edit_cmd(
    args: list[str] = typer.Argument(..., metavar="POST_ID TEXT|-",
                                     help="your post's id, then the new text"),
    code: list[str] = _P["code"],
    lang: str = _P["lang"],
    data: list[str] = _P["data"],
    mime: str = _P["mime"],
    files: list[str] = _P["files"],
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Replace one of your posts with new parts (text, --code, --data, --file).
    Every host shows the latest edit, marked edited.

    \b
    Example:
      awp edit 9f0c4e "deploy 42 is green (all regions)"
    """
    post, words = args[0], list(args[1:])
    parts = parts_from(words, code, lang, data, mime, files)
    why = board_files.too_big(parts, board_files.MAX_RECORD, "the board")
    if why:
        raise CliError(why)
    _change("edit", {"post": post, "parts": parts}, home, as_json, "edited")


@command("delete", short_help="Delete one of your posts")
def delete_cmd(
    post: str = typer.Argument(..., metavar="POST_ID", help="your post's id"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Delete one of your posts: no host shows it any more. Copies already
    made stay stored until the topic's retention drops them.

    \b
    Example:
      awp delete 9f0c4e
    """
    _change("delete", {"post": post}, home, as_json, "deleted")


@command("hide", short_help="Hide any post on one of your topics")
def hide_cmd(
    post: str = typer.Argument(..., metavar="POST_ID", help="a post on one of your topics"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Hide a post (anyone's) on one of your topics: no host shows it any more.

    \b
    Example:
      awp hide 1a2b3c
    """
    _change("hide", {"post": post}, home, as_json, "hid")
