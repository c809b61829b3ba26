"""The work queue's commands' work, without typer: claim, renew, release,
complete, fail, queue (declared in :mod:`awp.cli.cmd_queue`).

A topic created with ``--queue`` is a work queue: its top-level posts are
the items, and the owner's daemon hands them out one lease at a time
(SPEC.md section 14, "Work queue").  ``claim`` exits 2, as ``awp wait``
does on a timeout, whenever nothing was handed out (the queue is empty, the
owner is unreachable, or it did not answer in time), so a worker loop can
tell "try later" from a real error.  The lease commands all take the topic
and the lease id that ``claim`` printed: ``awp complete TOPIC LEASE``.
"""

from __future__ import annotations

from ..localapi.client import ApiFailure
from ..present import render_board
from ..present.render import INDENT, ago, now_ms, table
from .base import CliError, CliExit, note, out, out_json, parse_seconds
from .board_verbs import HTTP_SLACK, client_for, peer_names

# op -> the past tense shown
OPS = {"renew": "renewed", "release": "released", "complete": "completed", "fail": "failed"}


def _item_lines(item: dict) -> list[str]:
    lines: list[str] = []
    for part in item.get("parts") or []:
        lines += render_board.part_lines(part)
    return lines


def claim(topic: str, timeout: str, home: str | None, as_json: bool) -> None:
    """``awp claim``."""
    secs = parse_seconds(timeout, "--timeout")
    client = client_for(home, secs)
    try:
        res = client.request("POST", "/v1/board/claim", {"topic": topic, "timeout": secs},
                             timeout=secs + HTTP_SLACK)
    except ApiFailure as e:
        if e.code == "no_owner":
            raise CliError(f"{e.message}; try again later", 2) from None
        if e.status == 504 or e.code == "timeout":
            raise CliError(f"the owner of {topic} did not answer within {timeout.strip()}"
                           " (try again later)", 2) from None
        raise
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        if res.get("state") != "claimed":
            raise CliExit(2)
        return
    if res.get("state") != "claimed":
        raise CliError(f"the queue {topic} has no open item", 2)
    item = res.get("item") if isinstance(res.get("item"), dict) else {}
    lease = res.get("lease", "?")
    out(f"claimed {item.get('id') or str(item.get('hash', ''))[:10]}"
        f" (posted by {render_board.author(item)}): lease {lease},"
        f" until {render_board.until_text(res.get('until'))}")
    out("\n".join(_item_lines(item)))
    out(f"{INDENT}when done: awp complete {topic} {lease}  (or fail, release; renew for more"
        " time)")


def lease_op(op: str, topic: str, lease: str, home: str | None, as_json: bool) -> None:
    """``renew``, ``release``, ``complete`` or ``fail`` a lease we hold."""
    res = client_for(home).post("/v1/board/lease", {"topic": topic, "lease": lease, "op": op})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    item = res.get("item") if isinstance(res.get("item"), dict) else {}
    what = item.get("id") or str(item.get("hash", ""))[:10] or lease
    if res.get("queued"):
        out(f"{op} of lease {lease} queued: the owner is not connected; the daemon retries"
            f" until the lease ends at {render_board.until_text(res.get('until'))}")
    elif op == "renew":
        out(f"renewed {what}: lease {res.get('lease', lease)},"
            f" until {render_board.until_text(res.get('until'))}")
    else:
        out(f"{OPS[op]} {what} (lease {lease})")



def renew(topic: str, lease: str, home: str | None, as_json: bool) -> None:
    """``awp renew``."""
    lease_op("renew", topic, lease, home, as_json)


def release(topic: str, lease: str, home: str | None, as_json: bool) -> None:
    """``awp release``."""
    lease_op("release", topic, lease, home, as_json)


def complete(topic: str, lease: str, home: str | None, as_json: bool) -> None:
    """``awp complete``."""
    lease_op("complete", topic, lease, home, as_json)


def fail(topic: str, lease: str, home: str | None, as_json: bool) -> None:
    """``awp fail``."""
    lease_op("fail", topic, lease, home, as_json)


def queue(topic: str, home: str | None, as_json: bool) -> None:
    """``awp queue``: the table asks for the compact answer, ``--json`` the full one."""
    client = client_for(home)
    if as_json:
        out_json(client.get("/v1/board/queue", topic=topic))
        return
    res = client.get("/v1/board/queue", topic=topic, compact=1)
    assert isinstance(res, dict)
    rows = res.get("rows")
    if not isinstance(rows, list):  # an older daemon: the full answer
        rows = render_board.queue_rows(res.get("items") or [])
    if not rows:
        note(f"no items on {topic}")
        return
    me, names = res.get("self"), res.get("names")
    if not isinstance(me, str) or not isinstance(names, dict):  # an older daemon's answer
        st = client.get("/v1/status")
        me = st.get("key", "") if isinstance(st, dict) else ""
        names = peer_names(client)
    out(render_board.queue_table(rows, names, me, now_ms()))
    workers = [w for w in res.get("workers") or [] if isinstance(w, dict)]
    if workers:
        out("")
        out(workers_table(workers, names, me))
    if not res.get("arbiter"):
        note("(as this host sees it from the lease records it holds; the owner's daemon decides)")


def workers_table(workers: list[dict], names: dict, me: str) -> str:
    """Each key that held an item: what it holds now, since when, renewals, results."""
    strikes = any("strikes" in w for w in workers)
    head = ["WORKER", "HOLDS", "SINCE", "RENEWALS", "DONE", "FAILED", "EXPIRED"]
    rows = []
    for w in workers:
        holds = w.get("holds") or []
        shown = ",".join(h[:10] for h in holds[:3])
        if len(holds) > 3:
            shown += f" +{len(holds) - 3}"
        row = [render_board.who(w.get("holder", ""), names, me), shown or "-",
               ago(w.get("since")) if holds else "-", w.get("renewals", 0), w.get("done", 0),
               w.get("failed", 0), w.get("expired", 0)]
        if strikes:
            row.append(w.get("strikes", 0))
        rows.append(row)
    return table(head + (["STRIKES"] if strikes else []), rows)
