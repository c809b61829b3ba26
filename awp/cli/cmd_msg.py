"""Messaging: send, state, tail, wait, read, threads."""

from __future__ import annotations

import typer

from . import verbs
from .common import (
    command,
    home_opt,
    json_opt,
)

HTTP_SLACK = 30.0  # added to a server-side wait to get the HTTP timeout










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
    verbs.send(args=args, subject=subject, thread=thread, to=to, re_id=re_id, code=code, lang=lang,
               data=data, mime=mime, files=files, wait_ack=wait_ack, home=home, as_json=as_json)




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
    verbs.state(args, note_text, wait_ack, home, as_json)


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
    verbs.tail(once=once, all_=all_, mark=mark, peer=peer, thread=thread, home=home,
               as_json=as_json)


# -- wait ----------------------------------------------------------------------------



@command("wait", short_help="Block until a message or a state arrives (exit 2 on timeout)")
def wait(
    thread: str = typer.Option(None, "-t", "--thread", metavar="THREAD", help="only this thread"),
    peer: str = typer.Option(None, "-p", "--peer", metavar="PEER", help="only this peer"),
    states: str = typer.Option(
        None, "--state", metavar="LIST",
        help="wait for the peer's state on --thread to be one of these, e.g. done,failed"),
    timeout: str = typer.Option("5m", "--timeout", metavar="DURATION", help="give up after this long"),
    any_: bool = typer.Option(
        False, "--any", help="with --state, exit 0 on anything arriving in the thread, as"
                             " without --state (not 3 when the state did not come)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Block until unread messages arrive, print them and mark them read.

    With --state, wait until the peer's state on the thread is one of the
    given states; a message or state arriving in that thread ends the wait
    too, followed by a line saying where the state stands. Exit status: 0
    when something arrived (with --state: when the state came), 3 with
    --state when something else arrived in the thread first (wait again;
    --any makes that 0 too), 2 on timeout. So `awp wait --state done && next`
    runs next only once the peer is done. Keep --timeout under your shell
    tool's own limit and wait again on 2 or 3.

    \b
    Examples:
      awp wait --timeout 2m
      awp wait --thread thr_cj66nrqv --state done,failed --timeout 10m
    """
    verbs.wait(thread=thread, peer=peer, states=states, timeout=timeout, home=home,
               as_json=as_json, any_=any_)




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
    verbs.read(target=target, last=last, peer=peer, no_mark=no_mark, home=home, as_json=as_json)




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
    verbs.threads(open_only=open_only, wide=wide, peer=peer, home=home, as_json=as_json)

