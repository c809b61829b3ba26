"""``awp topic create`` and ``awp topic set``: a topic's policy from the command line.

Without typer, like :mod:`awp.cli.board_verbs` (which holds the other board
commands): the typer commands in :mod:`awp.cli.cmd_board` and the fast path
both call :func:`topic_create` and :func:`topic_set`.
"""

from __future__ import annotations

from ..base.echo import echo
from .base import CliError, out, out_json, parse_seconds
from .board_verbs import client_for


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
            raise CliError(f"{flag} must be open or grant, not {echo(value)}", 2)
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


def _policy_verb(creating: bool, name: str, title: str | None, open_: bool, read: str | None,
                 post: str | None, keep: int | None, keep_days: int | None,
                 keep_bytes: str | None, rate: int | None, max_post: str | None,
                 queue: bool | None, lease: str | None, attempts: int | None,
                 home: str | None, as_json: bool) -> None:
    body = policy_body(title, open_, read, post, keep, keep_days, keep_bytes, rate,
                       max_post, queue, lease, attempts)
    if not body and not creating:
        raise CliError("nothing to change: give at least one flag"
                       " (see awp topic set --help)", 2)
    _save_topic(name, body, home, as_json, creating=creating)


def topic_create(name: str, title: str | None, open_: bool, read: str | None,
                 post: str | None, keep: int | None, keep_days: int | None,
                 keep_bytes: str | None, rate: int | None, max_post: str | None,
                 queue: bool | None, lease: str | None, attempts: int | None,
                 home: str | None, as_json: bool) -> None:
    """``awp topic create``."""
    _policy_verb(True, name, title, open_, read, post, keep, keep_days, keep_bytes, rate,
                 max_post, queue, lease, attempts, home, as_json)


def topic_set(name: str, title: str | None, open_: bool, read: str | None,
              post: str | None, keep: int | None, keep_days: int | None,
              keep_bytes: str | None, rate: int | None, max_post: str | None,
              queue: bool | None, lease: str | None, attempts: int | None,
              home: str | None, as_json: bool) -> None:
    """``awp topic set``."""
    _policy_verb(False, name, title, open_, read, post, keep, keep_days, keep_bytes, rate,
                 max_post, queue, lease, attempts, home, as_json)
