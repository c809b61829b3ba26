"""``awp work TOPIC -- COMMAND [ARGS...]``: take a queue's items and run a command on each.

The loop itself is :mod:`awp.work.worker`; this module only reads the
command line.
"""

from __future__ import annotations

import typer

from . import board_files
from .board_verbs import client_for
from .common import CliError, command, home_of, home_opt, note, parse_seconds

DOC_WAIT = 10.0  # how long to wait for the topic's document on a first subscribe


@command("work", short_help="Work a queue topic: claim items and run a command on each")
def work_cmd(
    topic: str = typer.Argument(..., metavar="TOPIC", help="the queue topic (PEER/NAME)"),
    cmd: list[str] = typer.Argument(None, metavar="-- COMMAND [ARGS]...",
                                    help="what runs for each item"),
    concurrency: int = typer.Option(1, "--concurrency", "-c", min=1, max=256,
                                    help="items worked at once"),
    max_items: int = typer.Option(0, "--max-items", min=0,
                                  help="stop after this many items (0: no limit)"),
    once: bool = typer.Option(False, "--once", help="work one item and exit (exit 2: none)"),
    timeout: str = typer.Option(None, "--timeout", metavar="DURATION",
                                help="stop a command that runs longer, and fail its item"),
    grace: str = typer.Option("0s", "--grace", metavar="DURATION",
                              help="on SIGTERM, let running commands finish this long"
                                   " before their items are released"),
    offers: str = typer.Option("", "--offers", metavar="TAGS",
                               help="what this worker offers (gpu,claude,...): it gets items"
                                    " whose needs these cover"),
    bid: int = typer.Option(None, "--bid", min=0, help="price asked per item (lower wins)"),
    eta: str = typer.Option(None, "--eta", metavar="DURATION",
                            help="expected time per item (shorter wins at equal price)"),
    workdir: str = typer.Option(None, "--workdir", metavar="DIR",
                                help="where each item's directory is made (default: temp)"),
    keep_dirs: bool = typer.Option(False, "--keep-dirs", help="keep item directories"),
    home: str = home_opt(),
) -> None:
    """Claim items of a work queue one after another and run COMMAND on each:
    the item's text on its stdin, its files in a fresh directory, and
    AWP_TOPIC, AWP_ITEM, AWP_LEASE, AWP_ITEM_DIR, AWP_POSTED_BY in its
    environment. The lease is renewed while it runs. Exit 0 posts its
    stdout as a reply to the item and completes it; anything else (or
    --timeout) replies with the exit status and the end of stderr and fails
    it. SIGTERM stops claiming and releases what is held (after --grace).

    \b
    Examples:
      awp work alice/jobs -- ./run-job.sh
      awp work alice/jobs --concurrency 4 --offers gpu,linux -- claude -p
      awp work alice/jobs --once --timeout 10m -- codex exec -
    """
    from ..board.market import parse_tags
    from ..wire.board import BoardError
    from ..work.job import Options
    from ..work.worker import Settings, Worker

    if not cmd:
        raise CliError("give the command after --: awp work TOPIC -- COMMAND [ARGS]...", 2)
    try:
        tags = parse_tags(offers, "--offers")
    except BoardError as e:
        raise CliError(str(e), 2) from None
    bid_doc: dict = {}
    if bid is not None:
        bid_doc["price"] = bid
    if eta is not None:
        bid_doc["ms"] = int(parse_seconds(eta, "--eta") * 1000)
    h = home_of(home)
    res = client_for(h, DOC_WAIT).post("/v1/board/subscribe",
                                       {"topic": topic, "timeout": DOC_WAIT})
    t = res.get("topic") if isinstance(res, dict) else None
    pol = t.get("policy") if isinstance(t, dict) else None
    if not isinstance(pol, dict):
        raise CliError(f"no topic document for {topic} yet: its owner (or a peer that"
                       " subscribes to it) must be connected")
    if not pol.get("queue"):
        raise CliError(f"{topic} is not a work queue (its owner sets --queue)")
    opts = Options(command=list(cmd),
                   timeout=parse_seconds(timeout, "--timeout") if timeout else 0.0,
                   workdir=workdir or "", keep_dirs=keep_dirs,
                   max_post=int(pol.get("max_post") or 65536),
                   save_bytes=board_files.save_bytes)
    s = Settings(topic=t.get("topic") or topic, home=h, job=opts, concurrency=concurrency,
                 max_items=max_items, once=once, grace=parse_seconds(grace, "--grace"),
                 offers=tags, bid=bid_doc, say=lambda line: print(line, flush=True))
    w = Worker(s)
    w.install_signals()
    note(f"working {t.get('label') or topic} with {concurrency} at a time:"
         f" {' '.join(cmd)}")
    code = w.run()
    if code == 3:
        raise CliError("stopped: the daemon was stopped (awp down)", code)
    if code:
        raise CliError(f"the queue {topic} has no open item", code)
