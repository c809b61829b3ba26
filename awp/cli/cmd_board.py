"""The board: topics, topic (create, set, show, grant, revoke, ban), subscribe,
unsubscribe, post, reply, get, edit, delete, hide.

Every command is a client of the daemon's ``/v1/board/*`` routes
(docs/local-api.md, "The board"); ``--json`` prints the route's answer as
it is (docs/cli-json.md).  Topic and post references (``alice/ops``,
``9f0c4e``) are resolved by the daemon, so they mean the same thing here,
in the hooks and in MCP.  The work queue's commands are in
:mod:`awp.cli.cmd_queue`.

Only the declarations live here (options, help, usage errors): the work is in
:mod:`awp.cli.board_verbs`, which the typer-free fast path calls too.
"""

from __future__ import annotations

import typer

from . import board_policy, board_verbs
from .common import app, command, home_opt, json_opt

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
    board_verbs.topics(home, as_json)


# -- topic create / set ---------------------------------------------------------------

def _opt(default, *names: str, metavar: str | None = None, help: str = ""):
    return typer.Option(default, *names, metavar=metavar, help=help)


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
        run = board_policy.topic_create if verb == "create" else board_policy.topic_set
        run(name, title, open_, read, post, keep, keep_days, keep_bytes, rate, max_post, queue,
            lease, attempts, group_home(ctx, home), as_json)

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
    board_verbs.topic_show(topic, group_home(ctx, home), as_json)


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
    board_verbs.topic_grant(topic, peer, read, post, ttl, group_home(ctx, home), as_json)


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
    one grant by its hash. You stamp every other author's record before any
    host keeps it, so from now on nothing new of theirs is stamped, whatever
    time it claims, and no host keeps it; posts you stamped before stay.

    \b
    Examples:
      awp topic revoke ops builder
      awp topic revoke ops --grant 3f2a9c
    """
    board_verbs.topic_revoke(topic, peer, grant, group_home(ctx, home), as_json)


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
    board_verbs.topic_ban(topic, peer, unban, group_home(ctx, home), as_json)


# -- subscribe / unsubscribe ----------------------------------------------------------

@command("subscribe", short_help="Subscribe to topics and print new posts (--once: wait once)")
def subscribe_cmd(
    topics: list[str] = typer.Argument(..., metavar="TOPIC...", help="PEER/NAME, NAME or ed25519:KEY/NAME"),
    once: bool = typer.Option(False, "--once", help="wait for new posts once, print them, exit"),
    timeout: str = typer.Option(None, "--timeout", metavar="DURATION",
                                help="stop after this long (with --once: 5m unless given)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Subscribe to topics, then print the posts others make there as they
    arrive, until interrupted or --timeout. Posts already on the topic come
    in too as this host catches up.

    With --once, wait for the first new posts, print them and exit: status 0
    when something arrived, 2 on timeout (as awp wait). Following with
    --timeout ends after that long: 0 when something arrived, 2 when nothing
    did. --json prints one post object a line. Subscribing again is harmless.

    \b
    Examples:
      awp subscribe alice/ops
      awp subscribe alice/ops alice/jobs --once --timeout 2m
    """
    board_verbs.subscribe(topics, once, timeout, home, as_json)


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
    board_verbs.unsubscribe(topics, home, as_json)


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
    needs: str = typer.Option("", "--needs", metavar="TAGS",
                              help="on a queue: what a worker must offer to get this item"
                                   " (gpu,claude,...)"),
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
      awp post jobs --needs gpu,claude "train the small model"
    """
    board_verbs.post(args, code, lang, data, mime, files, lines, home, as_json, needs)


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
    board_verbs.reply(args, code, lang, data, mime, files, home, as_json)


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
    wait: bool = typer.Option(False, "--wait",
                              help="when there is nothing to show, wait for a post"),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION",
                                help="with --wait, give up after this long"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Print a topic's posts held here, oldest first: id, author, age, parts.
    A reply sits under its parent when both are shown; edited posts say so.

    --save writes the file parts of the posts shown into DIR (names made
    safe; an existing file is never replaced). --wait: when nothing matches,
    wait up to --timeout for the first new post by someone else (exit 2 on
    timeout), as awp wait and awp subscribe --once do.

    \b
    Examples:
      awp get alice/ops
      awp get alice/ops -n 0 --since 2h
      awp get alice/ops --thread 9f0c4e --save ./in
      awp get alice/ops --since 10m --wait --timeout 5m
    """
    board_verbs.get(topic, n, since, thread, save, wait, timeout, home, as_json)


# -- edit / delete / hide -------------------------------------------------------------

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
    board_verbs.edit(args, code, lang, data, mime, files, home, as_json)


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
    board_verbs.delete(post, home, as_json)


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
    board_verbs.hide(post, home, as_json)
