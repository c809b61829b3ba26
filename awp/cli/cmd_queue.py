"""The work queue's typer commands: claim, renew, release, complete, fail, queue.

Options, help and usage errors only; what a work queue is, the exit codes
and the work itself are in :mod:`awp.cli.queue_verbs`, which the fast path
calls too.
"""

from __future__ import annotations

import typer

from . import queue_verbs
from .common import command, home_opt, json_opt

CLAIM_WAIT = "10s"


@command("claim", short_help="Take the oldest open item of a queue topic (exit 2: none)")
def claim_cmd(
    topic: str = typer.Argument(..., metavar="TOPIC", help="the queue topic (PEER/NAME)"),
    timeout: str = typer.Option(CLAIM_WAIT, "--timeout", metavar="DURATION",
                                help="how long to wait for the owner's answer"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Claim the oldest open item of a work queue: you hold it under a lease
    until the time printed. Finish with awp complete (or fail, release), and
    renew a lease that is about to run out.

    Exit status 2 when nothing was claimed: the queue is empty, the owner's
    daemon is not connected (nothing can be claimed without it), or it did
    not answer within --timeout. Try again later on 2.

    \b
    Examples:
      awp claim alice/jobs
      awp claim alice/jobs --json
    """
    queue_verbs.claim(topic, timeout, home, as_json)


def _lease_command(op: str, short: str, doc: str):
    def run(
        topic: str = typer.Argument(..., metavar="TOPIC", help="the queue topic"),
        lease: str = typer.Argument(..., metavar="LEASE", help="the lease id awp claim printed"),
        home: str = home_opt(),
        as_json: bool = json_opt(),
    ) -> None:
        getattr(queue_verbs, op)(topic, lease, home, as_json)

    run.__doc__ = doc
    run.__name__ = f"{op}_cmd"
    command(op, short_help=short)(run)


_lease_command("renew", "Extend a queue lease you hold", """Extend a lease you hold by the queue's lease length, before it runs out.

    \b
    Example:
      awp renew alice/jobs 9f0c4e0b6a3d4b1c.1
    """)
_lease_command("release", "Give a claimed item back to its queue (costs no attempt)",
               """Give an item you hold back to the queue, untouched; it costs no attempt.

    \b
    Example:
      awp release alice/jobs 9f0c4e0b6a3d4b1c.1
    """)
_lease_command("complete", "Mark a claimed queue item done", """Mark the item you hold done:
    nobody gets it again. If the owner is not connected the daemon keeps
    trying until the lease ends.

    \b
    Example:
      awp complete alice/jobs 9f0c4e0b6a3d4b1c.1
    """)
_lease_command("fail", "Give a claimed item back as failed (costs an attempt)",
               """Give the item you hold back as failed: it costs an attempt, and after
    the queue's attempts the item is dead.

    \b
    Example:
      awp fail alice/jobs 9f0c4e0b6a3d4b1c.1
    """)


@command("queue", short_help="List a queue topic's items: status, holder, lease end")
def queue_cmd(
    topic: str = typer.Argument(..., metavar="TOPIC", help="the queue topic"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """List a work queue's items, oldest first, with their status (open,
    claimed, done, dead), holder and lease end. On the owner's host this is
    the arbiter's own state; elsewhere what its lease records say.

    \b
    Example:
      awp queue alice/jobs
    """
    queue_verbs.queue(topic, home, as_json)
