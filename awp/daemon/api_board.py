"""The board's local API routes (``/v1/board/...``, docs/local-api.md "The board").

Handlers turn references (``alice/ops``, a hash prefix) into topics and
records, call the board extension, and shape answers; the replication and
queue rules stay in :mod:`awp.node.board` and :mod:`awp.node.board_queue`.

Why one module: it is one table, the ``/v1/board`` endpoints of
docs/local-api.md, whose handlers share the closures ``add_board_routes``
makes once over the board (resolving ``alice/ops`` and hash prefixes, the
wait for posts); the rules themselves live in the node.  It splits when the
routes call a typed daemon facade instead of the board (issue 21).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import trio

from ..base.echo import clip, echo
from ..board import market, view
from ..board.market import Bid
from ..board.workers import lease_facts
from ..board.workers import workers as workers_of
from ..localapi.server import ApiError, Raw, Request, Router, Stream
from ..node.board import Board, TooMany
from ..node.board_queue import KEPT_OPS, OPS, NoOwner, Refused
from ..node.claim_wait import ClaimAsk
from ..node.engine import Engine
from ..store import board as sb
from ..store import board_conflicts as conflicts
from ..store import grants as grantstore
from ..store import queries
from ..store.queries import LookupFailed
from ..wire import board as wb
from ..wire.board import is_owner, owned_by
from ..wire.grants import grant_hash
from ..wire.numbers import INT64_MAX
from ..wire.timefmt import format_ts, now_ms
from .api import json_body
from .app import DaemonState
from .board_feed import NAMES_S, Arrivals, Feed
from .facade import Door

MIN_PREFIX = 6
MAX_BATCH = 1000  # posts in one request to /v1/board/post
MAX_WAIT_S = 3600.0  # a server-side wait (post, claim, wait) is cut to this
DEFAULT_GRANT_TTL_S = 30 * 86400.0
MAX_GRANT_TTL_S = 10 * 366 * 86400.0  # a board grant lasts at most ten years
POLICY_FIELDS = {  # request field -> what it must be
    "title": str, "read": str, "post": str, "keep": int, "keep_days": int, "keep_bytes": int,
    "rate": int, "max_post": int, "queue": bool, "lease_s": int, "attempts": int}


def _bad(msg: str, code: str = "bad_request", status: int = 400) -> ApiError:
    return ApiError(status, msg, code)


def _str(body: dict, key: str, default: str = "") -> str:
    v = body.get(key, default)
    if not isinstance(v, str):
        raise _bad(f"{key} must be a string")
    return v


def _int(body: dict, key: str, default: int, lo: int = 0, hi: int = INT64_MAX) -> int:
    """An integer field; SQLite holds none past ``2**63 - 1``, so none is taken."""
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(f"{key} must be an integer from {lo} to {hi}")
    return v


def _secs(body: dict, key: str, default: float) -> float:
    """A wait in seconds, cut to ``MAX_WAIT_S`` (a longer one is a caller's loop)."""
    return min(_seconds(body, key, default), MAX_WAIT_S)


def _seconds(body: dict, key: str, default: float) -> float:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:
        raise _bad(f"{key} must be a non-negative number of seconds")
    return float(v)


def _ttl(body: dict) -> float:
    """A grant's lifetime: what was asked, never cut short; past ten years an error."""
    ttl = _seconds(body, "ttl", DEFAULT_GRANT_TTL_S)
    if ttl <= 0:
        raise _bad("ttl must be positive")
    if ttl > MAX_GRANT_TTL_S:
        raise _bad(f"ttl is at most {int(MAX_GRANT_TTL_S // 86400)} days")
    return ttl


def _parts(body: dict) -> list[dict]:
    parts = body.get("parts")
    if (not isinstance(parts, list) or not parts or len(parts) > wb.MAX_PARTS
            or not all(isinstance(p, dict) and isinstance(p.get("k"), str) for p in parts)):
        raise _bad(f"parts: 1 to {wb.MAX_PARTS} objects, each with a kind k")
    return parts


def needs_field(body: dict) -> dict:
    """``{"needs": [...]}`` when the request says what a queue item needs (the market)."""
    if body.get("needs") in (None, []):
        return {}
    try:
        return {"needs": list(wb.check_tags(body["needs"], "needs"))}
    except wb.BoardError as e:
        raise _bad(str(e)) from None


# GET /v1/board/queue?compact=1: each item's row, and how much of its text it carries.
QUEUE_COLUMNS = ("id", "status", "holder", "until", "attempts", "text")
QUEUE_TEXT = 80


def text_of(parts: list) -> str:
    """The text a reader sees at a glance: text and code parts, one after another."""
    out = []
    for p in parts:
        if isinstance(p, dict) and p.get("k") in ("text", "code") and isinstance(p.get("text"),
                                                                                 str):
            out.append(p["text"])
        elif isinstance(p, dict) and p.get("k") == "file":
            out.append(f"[file {p.get('name', '?')}, {p.get('size', '?')} bytes]")
        elif isinstance(p, dict) and p.get("k") == "data":
            out.append("[data " + str(p.get("mime", "")) + "]")
    return "\n".join(out)


def add_board_routes(r: Router, engine: Engine, state: DaemonState) -> None:
    assert state.parts.board is not None, "the board routes need the board extension"
    board: Board = state.parts.board
    door = Door(engine, state.parts)
    me = engine.identity.key

    # -- references ----------------------------------------------------------------

    def _peer(c: sqlite3.Connection, ref: str) -> str:
        # Our own name is what every label of our topics shows (alice/ops on alice).
        if ref in ("me", "self", me) or ref == owner_name_me():
            return me
        try:  # a topic's owner may be a host we only heard of (two hops away)
            return queries.resolve_peer(c, ref, heard=True)
        except LookupFailed as e:
            status = 409 if e.code.startswith("ambiguous") else 404
            raise ApiError(status, str(e), e.code) from None

    def topic_in(c: sqlite3.Connection, ref: object) -> str:
        if not isinstance(ref, str) or not ref.strip():
            raise _bad("a topic is needed (NAME, PEER/NAME or ed25519:KEY/NAME)", "bad_topic")
        ref = ref.strip()
        if "/" not in ref:
            owner, name = me, ref
        else:
            who, name = ref.rsplit("/", 1)
            owner = _peer(c, who)
        try:
            return in_lineage(c, wb.topic_id(owner, name))
        except wb.BoardError as e:
            raise _bad(f"topic {echo(ref)}: {e}", "bad_topic") from None

    def in_lineage(c: sqlite3.Connection, topic: str) -> str:
        """The topic as held here: an owner that rotated its key keeps its topics
        under the key they were made with, and its current key finds them."""
        owner, name = topic.split("/", 1)
        for key in wb.former_keys(owner):
            old = f"{key}/{name}"
            if sb.topic_doc(c, old) is not None or sb.is_subscribed(c, old):
                return old
        return topic

    def topic_here(ref: object) -> str | None:
        """A full topic id, or one of ours: no lookup needed (None: one is)."""
        if isinstance(ref, str) and (ref.startswith(wb.KEY_PREFIX) or "/" not in ref):
            owner = ref.strip().rsplit("/", 1)[0] if "/" in ref else me
            if wb.former_keys(owner):
                return None  # it rotated: its topic may be held under a former key
            try:
                return wb.topic_id(*ref.strip().rsplit("/", 1)) if "/" in ref else \
                    wb.topic_id(me, ref.strip())
            except (wb.BoardError, TypeError):
                pass  # let topic_in say what is wrong
        return None

    # A read of a few indexed rows (a peer's name, one post) runs right here on the
    # trio thread: a reader thread's two hand-overs cost more than such a query, and
    # every board command makes one or two (as Arrivals.look does for a few posts).
    small_read = engine.read_sync

    async def topic_of(ref: object) -> str:
        return topic_here(ref) or small_read(lambda c: topic_in(c, ref))

    def label(c: sqlite3.Connection, topic: str) -> str:
        owner, name = topic.split("/", 1)
        who = engine.config.name or "me" if is_owner(owner, me) else queries.owner_label(c, owner)
        return f"{who}/{name}"

    def owner_name(c: sqlite3.Connection, key: str) -> str:
        return engine.config.name or "me" if key == me else queries.peer_label(c, key)

    def record_in(c: sqlite3.Connection, ref: object) -> wb.Record:
        if not isinstance(ref, str) or len(ref.strip()) < MIN_PREFIX:
            raise _bad(f"a post is named by its id (at least {MIN_PREFIX} hex characters)")
        prefix = ref.strip().lower()
        found = {r.hash: r for r in sb.record(c, prefix) if r.hash.startswith(prefix)}
        if not found:
            raise ApiError(404, f"no post {echo(ref)} here (see awp get TOPIC)", "unknown_post")
        if len(found) > 1:
            raise ApiError(409, f"{echo(ref)} names {len(found)} records: give more of its id",
                           "ambiguous_post")
        return next(iter(found.values()))

    # -- shapes --------------------------------------------------------------------

    def owner_name_me() -> str:
        return engine.config.name or "me"

    labels: dict[str, str] = {}  # our own topics' labels, which never change while we run

    async def topic_label(topic: str) -> str:
        if owned_by(topic, me):
            if topic not in labels:
                labels[topic] = f"{owner_name_me()}/{topic.split('/', 1)[1]}"
            return labels[topic]
        return await engine.read(lambda c: label(c, topic))

    def post_obj(c: sqlite3.Connection | None, p: sb.Post, names: dict[str, str]) -> dict:
        s = p.shown
        if s.author not in names:
            names[s.author] = owner_name(c, s.author)
        if p.topic not in names:
            names[p.topic] = label(c, p.topic)
        return {"hash": s.hash, "id": s.hash[:10], "kind": "post", "topic": p.topic,
                "label": names[p.topic], "author": s.author, "author_name": names[s.author],
                "mine": s.author == me, "ts": s.ts, "parent": s.parent, "parts": s.parts,
                "text": text_of(s.parts), "edited": s.edited, "replies": p.replies,
                "seq": p.seq}

    def stale_obj(c: sqlite3.Connection, topic: str) -> dict | None:
        st = board.stale(topic)
        if st is not None and st["via"]:
            st["via_name"] = owner_name(c, st["via"])
        return st

    def topic_obj(c: sqlite3.Connection, topic: str) -> dict:
        owner, name = topic.split("/", 1)
        raw = sb.topic_doc(c, topic)
        pol = None
        if raw is not None:
            doc = json.loads(raw)
            p = wb.check_policy(doc)
            pol = {"seq": p.seq, "title": p.title, "read": "open" if p.read_open else "grant",
                   "post": "open" if p.post_open else "grant", "keep": p.keep,
                   "keep_days": p.keep_days, "keep_bytes": p.keep_bytes, "rate": p.rate,
                   "max_post": p.max_post, "queue": p.queue, "lease_s": p.lease_s,
                   "attempts": p.attempts, "revoked": len(p.revoked),
                   "banned": sorted(p.banned),
                   "members": [{"key": k, "can": can, "until": until}
                               for k, (can, until) in sorted(p.members.items())]}
        subscribed = sb.is_subscribed(c, topic)
        gap = board.gap(c, topic) if not is_owner(owner, me) else None
        head = None if gap is None else {
            "ts": board.heads[topic]["ts"], "doc": board.heads[topic]["doc"],
            "policy_behind": gap.policy_behind, "missing": gap.missing, "differs": gap.differs}
        return {"topic": topic, "label": label(c, topic), "owner": owner,
                "owner_key": wb.current_owner(owner),
                "owner_name": owner_name(c, owner), "name": name, "mine": is_owner(owner, me),
                "subscribed": subscribed, "known": pol is not None, **sb.topic_stats(c, topic),
                "head": head, "stamps": board.seq.view(c, topic),
                "equivocated": conflicts.summary(c, topic), "stale": stale_obj(c, topic),
                "unread": sb.unread_count(c, topic, me) if subscribed else 0, "policy": pol}

    async def topic_answer(topic: str) -> dict:
        return await engine.read(lambda c: topic_obj(c, topic))

    # -- waiting for the topic document ----------------------------------------------

    async def await_doc(topic: str, timeout: float) -> bool:
        """True once the topic's document is here; False after ``timeout``, or at
        once when its owner said it has no such topic (``board-none``)."""
        if board.policies.get(topic) is not None:
            return True  # the common case, every post to a peer's topic: nothing to wait on
        with engine.changes.subscribe(kinds=("board",)) as events, trio.move_on_after(timeout):
            while True:
                if await board.policy(topic) is not None:
                    return True
                if topic in board.none:
                    return False
                await events.receive()  # the board caches a new document before its hint
        return await board.policy(topic) is not None

    # -- topics --------------------------------------------------------------------

    @r.route("GET", "/v1/board/topics")
    async def topics(req: Request) -> dict:
        def q(c: sqlite3.Connection) -> list[dict]:
            out = [topic_obj(c, t) for t in sb.known_topics(c)]
            out.sort(key=lambda t: (not t["mine"], t["label"]))
            return out

        return {"topics": await engine.read(q)}

    @r.route("POST", "/v1/board/topic")
    async def topic(req: Request) -> dict:
        body = json_body(req)
        name = _str(body, "name").strip()
        if "/" in name:
            owner, _, name = name.rpartition("/")
            if await engine.read(lambda c: _peer(c, owner)) != me:
                raise _bad("only the owner changes a topic", "forbidden", 403)
        try:
            wb.topic_id(me, name)
        except wb.BoardError as e:
            raise _bad(f"topic name {echo(name)}: {e}", "bad_topic") from None
        topic = await engine.read(lambda c: board.my_topic(c, name))
        changes: dict[str, Any] = {}
        for f, kind in POLICY_FIELDS.items():
            if f in body and body[f] is not None:
                v = body[f]
                if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                    raise _bad(f"{f} must be {'a string' if kind is str else kind.__name__}")
                changes[f] = v
        existed = await engine.read(lambda c: sb.topic_doc(c, topic)) is not None
        try:
            await board.publish_topic(name, changes)
        except TooMany as e:
            raise ApiError(409, str(e), "too_many") from None
        except wb.BoardError as e:
            raise _bad(f"topic {name}: {e}") from None
        return {"topic": await topic_answer(topic), "created": not existed}

    @r.route("POST", "/v1/board/subscribe")
    async def subscribe(req: Request) -> dict:
        body = json_body(req)
        topic = await topic_of(body.get("topic"))
        timeout = _secs(body, "timeout", 0)
        # "wait": then wait that long for posts past the cursor, as /v1/board/wait
        # would (`awp subscribe --once` in one request instead of two).
        wait = None if body.get("wait") is None else _secs(body, "wait", 0)
        # Where "new" starts for the subscriber, taken before it subscribes, so the
        # backlog the owner sends counts as new (a cheap indexed max, read in place).
        cursor = engine.read_sync(sb.last_seq)
        if not await subscribe_to(topic):
            await board.refresh_authority([topic])
        if timeout > 0:
            await await_doc(topic, timeout)
        if body.get("brief") is True:  # what a subscriber prints: which topic, and known
            lab = (await topic_label(topic) if owned_by(topic, me)
                   else small_read(lambda c: label(c, topic)))
            t: dict = {"topic": topic, "label": lab,
                       "known": await board.policy(topic) is not None, "subscribed": True}
        else:
            t = await topic_answer(topic)
        answer = {"topic": t, "subscribed": True, "cursor": cursor}
        if wait is not None:
            # /v1/board/wait's own answer (encoded by the feed), as an object here
            answer["wait"] = json.loads(await Arrivals(feed, [topic], cursor, False).once(wait))
        return answer

    @r.route("POST", "/v1/board/unsubscribe")
    async def unsubscribe(req: Request) -> dict:
        topic = await topic_of(json_body(req).get("topic"))
        if owned_by(topic, me):
            raise _bad("a topic's owner stays subscribed to it")
        await board.unsubscribe(topic)
        return {"topic": topic, "subscribed": False}

    # -- posting -------------------------------------------------------------------

    async def authority(topic: str, what: str = "post") -> dict:
        """Fields that let us post to ``topic`` (a grant, when it is not open)."""
        pol = await board.policy(topic)
        owner = topic.split("/", 1)[0]
        if is_owner(owner, me) or (pol is not None and (pol.post_open or pol.member(me, what, now_ms()))):
            return {}  # the owner's document already says so: no grant travels in the record
        found = await engine.read(lambda c: sb.find_authority(c, me, topic, what, now_ms(), pol))
        if found is None:
            lab = await engine.read(lambda c: label(c, topic))
            raise ApiError(403, f"no grant to post to {lab}: its owner can give one with"
                           f" `awp topic grant {topic.split('/', 1)[1]} <you>`", "forbidden")
        grant, via = found
        return {"grant": grant, **({"via": via} if via else {})}

    async def subscribe_to(topic: str) -> bool:
        try:
            return await board.subscribe(topic)
        except TooMany as e:
            raise ApiError(409, str(e), "too_many") from None

    def matching(c: sqlite3.Connection, name: str) -> list[str]:
        """Labels of the topics held here named ``name`` (for "did you mean")."""
        return sorted(label(c, t) for t in sb.known_topics(c) if t.split("/", 1)[1] == name)

    async def ready_topic(topic: str, timeout: float) -> wb.Policy | None:
        """Subscribed, with the owner's document (waiting for it up to ``timeout``).

        One of our own topics must exist: posting never creates it.  A topic
        of a peer's whose document does not come in time is an error, and the
        subscription this call made is taken back, so a failed post leaves
        nothing behind.
        """
        owner, name = topic.split("/", 1)
        if is_owner(owner, me):
            if await board.policy(topic) is None:
                others = await engine.read(lambda c: matching(c, name))
                hint = f" (topics of that name here: {', '.join(others)})" if others else ""
                raise ApiError(404, f"you have no topic {name}: create it with"
                               f" `awp topic create {name}`{hint}", "unknown_topic")
            return await board.policy(topic)
        added = await subscribe_to(topic)
        if not await await_doc(topic, timeout):
            said_none = topic in board.none  # before unsubscribing forgets it
            if added:
                await board.unsubscribe(topic)
            lab = await engine.read(lambda c: label(c, topic))
            if said_none:
                raise ApiError(404, f"{lab.split('/', 1)[0]} has no topic {name}: its owner"
                               f" can create it with `awp topic create {name}`; nothing was"
                               " posted", "unknown_topic")
            raise ApiError(404, f"no topic document for {lab} yet: its owner (or a peer that"
                           " subscribes to it) must be connected and have that topic; a relay"
                           " that may not read the topic never carries its posts",
                           "unknown_topic")
        return await board.policy(topic)

    async def sign(doc: dict) -> tuple[wb.Record, sb.Taken]:
        try:
            rec, taken = await board.sign_and_take(doc)
        except wb.BoardError as e:
            raise _bad(str(e)) from None
        if not taken.new:
            raise refusal(taken.refused[0] if taken.refused else "not kept")
        return rec, taken

    def refusal(why: str) -> ApiError:
        if "rate" in why:
            return ApiError(429, f"{why}: wait a minute", "rate")
        if "max_post" in why or "64 KiB" in why:
            return ApiError(413, why, "too_large")
        if "no topic document" in why:
            return ApiError(404, why, "unknown_topic")
        if "grant" in why or "banned" in why or "owner" in why:
            return ApiError(403, why, "forbidden")
        return ApiError(400, why, "bad_request")

    @r.route("POST", "/v1/board/post")
    async def post(req: Request) -> dict:
        body = json_body(req)
        if "posts" in body:
            return await post_many(body)
        parts = _parts(body)
        timeout = _secs(body, "timeout", 10.0)
        parent = ""
        if body.get("parent"):
            prec = await engine.read(lambda c: record_in(c, body.get("parent")))
            parent = prec.hash
            topic = prec.topic
            if body.get("topic"):
                given = await topic_of(body.get("topic"))
                if given != topic:
                    raise _bad("the parent post is in another topic")
        else:
            topic = await topic_of(body.get("topic"))
        await ready_topic(topic, timeout)
        doc: dict = {"k": "post", "topic": topic, "author": me, "parts": parts,
                     **needs_field(body)}
        if parent:
            doc["parent"] = parent
        doc.update(await authority(topic))
        rec, taken = await sign(doc)
        # A new post: no edit, no reply yet; shaped from the record, not read back.
        p = sb.Post(view.Shown(hash=rec.hash, author=me, ts=rec.ts, parent=parent,
                               parts=parts, edited=0), topic, taken.seqs.get(rec.hash, 0), 0)
        readers = await board.readers(topic)
        lab, shown = await answer_names(topic, readers)
        names = {me: owner_name_me(), topic: lab}
        return {"post": post_obj(None, p, names), "sent_to": readers, "names": shown,
                "waiting": rec.hash in taken.waiting}  # for the owner's stamp

    # (topic, readers) -> (when, the topic's label, how each reader is shown)
    shown_names: dict[tuple[str, tuple[str, ...]], tuple[float, str, dict[str, str]]] = {}

    async def answer_names(topic: str, readers: list[str]) -> tuple[str, dict[str, str]]:
        """The topic's label and how each reader is shown, in one read (none for one of
        our topics that nobody reads): a post's answer names whom it went to, so the
        CLI need not ask for the peer list.

        Kept for ``NAMES_S``, as the feed keeps the names it shows: telling
        look-alike names apart reads and folds every peer's name, which cost a
        poster more than storing its post, on every post."""
        if owned_by(topic, me) and not readers:
            return await topic_label(topic), {}
        key, now = (topic, tuple(readers)), time.monotonic()
        hit = shown_names.get(key)
        if hit is not None and now - hit[0] <= NAMES_S:
            return hit[1], dict(hit[2])

        def q(c: sqlite3.Connection) -> tuple[str, dict[str, str]]:
            labels = queries.Labels(c)
            return label(c, topic), {k: labels[k] for k in readers}

        # Read right here: a few indexed rows, where a reader thread's two hand-overs
        # cost more CPU than the query on every post (posts come a few at a time).
        lab, shown = small_read(q) if len(readers) <= 16 else await engine.read(q)
        if len(shown_names) >= 256:
            shown_names.clear()
        shown_names[key] = (now, lab, shown)
        return lab, dict(shown)

    async def post_many(body: dict) -> dict:
        """Many posts to one topic in one transaction (filling a queue, a script)."""
        items = body.get("posts")
        if not isinstance(items, list) or not 0 < len(items) <= MAX_BATCH:
            raise _bad(f"posts: a list of 1 to {MAX_BATCH} posts")
        topic = await topic_of(body.get("topic"))
        await ready_topic(topic, _secs(body, "timeout", 10.0))
        extra = {**await authority(topic), **needs_field(body)}
        docs = []
        for item in items:
            if not isinstance(item, dict):
                raise _bad("each post is an object with parts")
            doc: dict = {"k": "post", "topic": topic, "author": me, "parts": _parts(item),
                         **extra, **needs_field(item)}
            if item.get("parent"):
                prec = await engine.read(lambda c, ref=item["parent"]: record_in(c, ref))
                if prec.topic != topic:
                    raise _bad("a parent post is in another topic")
                doc["parent"] = prec.hash
            docs.append(doc)
        try:
            recs, taken = await board.sign_many(docs)
        except wb.BoardError as e:
            raise _bad(str(e)) from None
        kept = {r.hash for r in taken.new}
        if not kept:
            raise refusal(taken.refused[0] if taken.refused else "not kept")
        readers = await board.readers(topic)
        return {"posts": [{"hash": r.hash, "id": r.hash[:10], "topic": topic,
                           "kept": r.hash in kept} for r in recs],
                "refused": taken.refused, "sent_to": readers,
                "names": (await answer_names(topic, readers))[1]}

    @r.route("POST", "/v1/board/get")
    async def get(req: Request) -> dict:
        body = json_body(req)
        ref = body.get("topic")
        n = _int(body, "n", 20)
        since = _int(body, "since", 0)

        def q(c: sqlite3.Connection) -> dict:
            # the topic and the parent resolved in the same read: one thread hand-over
            topic = topic_here(ref) or topic_in(c, ref)
            parent = record_in(c, body.get("parent")).hash if body.get("parent") else ""
            names: dict[str, str] = {}
            posts = sb.visible_posts(c, topic, n, since, parent)
            return {"topic": topic_obj(c, topic), "posts": [post_obj(c, p, names) for p in posts]}

        return await engine.read(q)

    feed = Feed(engine, post_obj, board)

    @r.route("POST", "/v1/board/wait")
    async def wait(req: Request) -> dict | Stream:
        body = json_body(req)
        refs = body.get("topics") or []
        if not isinstance(refs, list):
            raise _bad("topics must be a list")
        topics = [await topic_of(t) for t in refs] or sorted(board.subs)
        timeout = _secs(body, "timeout", 300.0)
        mine = bool(body.get("mine", False))
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise _bad("stream must be true or false")
        after = body.get("after")
        if after is None:
            after = await engine.read(sb.last_seq)
        elif isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise _bad("after must be a cursor (a seq) from an earlier answer")
        watch = Arrivals(feed, topics, after, mine)
        if stream:
            return Stream(lambda out: watch.stream(timeout, out), direct=True)
        return Raw(await watch.once(timeout))

    @r.route("POST", "/v1/board/unread")
    async def unread(req: Request) -> dict:
        body = json_body(req)
        limit = min(_int(body, "limit", 50, 1), 500)

        def q(c: sqlite3.Connection) -> tuple[dict, dict[str, int]]:
            posts, more = sb.unread(c, me, limit)
            names: dict[str, str] = {}
            upto: dict[str, int] = {}
            for p in posts:
                upto[p.topic] = max(upto.get(p.topic, 0), p.seq)
            return {"posts": [post_obj(c, p, names) for p in posts], "more": more}, upto

        # Read first: the hooks ask after every tool call, and usually nothing
        # is new; the mark (a write) is only for what this answer carries.
        answer, upto = await engine.read(q)
        if body.get("mark", True) and upto:
            await door.mark_posts_read(upto)
        return answer

    # -- changing records ------------------------------------------------------------

    async def own_post(ref: object, what: str) -> wb.Record:
        rec = await engine.read(lambda c: record_in(c, ref))
        if rec.kind != "post":
            raise _bad(f"{ref} is a {rec.kind} record, not a post")
        if what != "hide" and rec.author != me:
            raise _bad(f"only its author can {what} a post", "forbidden", 403)
        if what == "hide" and not is_owner(rec.owner, me):
            raise _bad("only the topic's owner can hide a post", "forbidden", 403)
        return rec

    def changed(rec: wb.Record, of: wb.Record) -> dict:
        return {"hash": rec.hash, "of": of.hash, "topic": of.topic}

    @r.route("POST", "/v1/board/edit")
    async def edit(req: Request) -> dict:
        body = json_body(req)
        parts = _parts(body)
        of = await own_post(body.get("post"), "edit")
        doc = {"k": "edit", "topic": of.topic, "author": me, "of": of.hash, "parts": parts,
               **await authority(of.topic)}
        rec, _ = await sign(doc)
        return changed(rec, of)

    async def supersede(req: Request, kind: str) -> dict:
        """A delete (of our post) or a hide (of any post on our topic)."""
        of = await own_post(json_body(req).get("post"), kind)
        rec, _ = await sign({"k": kind, "topic": of.topic, "author": me, "of": of.hash})
        return changed(rec, of)

    @r.route("POST", "/v1/board/delete")
    async def delete(req: Request) -> dict:
        return await supersede(req, "delete")

    @r.route("POST", "/v1/board/hide")
    async def hide(req: Request) -> dict:
        return await supersede(req, "hide")

    # -- grants, revocation, bans ------------------------------------------------------

    @r.route("POST", "/v1/board/grant")
    async def grant(req: Request) -> dict:
        """Grant by key or known name, connected or not.

        One topic: the key goes into the ``members`` of the owner's document,
        which travels with the topic to every subscriber over any path of
        readers.  ``NAME/*`` (all topics) is a classic grant, handed over on
        a direct connection.
        """
        body = json_body(req)
        what = _str(body, "what", "post")
        if what not in ("read", "post"):
            raise _bad("what is read or post")
        ref = _str(body, "topic").strip()
        if ref.endswith("/*") or ref == "*":
            if what != "post":
                raise _bad("a grant over all topics (*) is a post grant")
            scope = me + "/*"
        else:
            scope = await topic_of(ref)
        if not owned_by(scope, me):
            raise _bad("grants for a topic come from its owner", "forbidden", 403)
        key = await engine.read(lambda c: _peer(c, _str(body, "peer")))
        if key == me:
            raise _bad("the owner needs no grant")
        cap = f"board:{what}:{scope}"
        ttl = _ttl(body)
        if scope.endswith("/*"):
            res = await engine.grant(key, [cap], ttl)
            return {**res, "peer": key, "cap": cap}
        until = format_ts(now_ms() + int(ttl * 1000))
        try:
            await board.add_member(scope, key, what, until)
        except wb.BoardError as e:
            raise _bad(str(e)) from None
        return {"peer": key, "cap": cap, "member": True, "until": until,
                "topic": await topic_answer(scope), "readers": await board.readers(scope)}

    async def doc_list(topic: str, field: str) -> list[dict]:
        """A list field of our current document for ``topic`` (empty when none)."""
        doc = json.loads(await engine.read(lambda c: sb.topic_doc(c, topic)) or "{}")
        v = doc.get(field, [])
        return list(v) if isinstance(v, list) else []

    async def publish(topic: str, changes: dict) -> None:
        try:
            await board.publish_topic(topic.split("/", 1)[1], changes)
        except wb.BoardError as e:
            raise _bad(str(e)) from None

    async def own_topic(body: dict, what: str) -> str:
        """The body's topic, which must be one of ours (403 otherwise)."""
        topic = await topic_of(body.get("topic"))
        if not owned_by(topic, me):
            raise _bad(f"only the owner {what}", "forbidden", 403)
        return topic

    @r.route("POST", "/v1/board/revoke")
    async def revoke(req: Request) -> dict:
        body = json_body(req)
        topic = await own_topic(body, "revokes grants for a topic")
        prefix = _str(body, "grant").strip().lower()
        who = _str(body, "peer").strip()
        peer = await engine.read(lambda c: _peer(c, who)) if who else ""
        if not prefix and not peer:
            raise _bad("name a grant (its hash prefix) or a peer")

        def find(c: sqlite3.Connection) -> list[dict]:
            out = []
            for g, h in grantstore.issued_by(c, me):
                if prefix and not h.startswith(prefix):
                    continue
                if peer and g.get("sub") != peer:
                    continue
                if any(wb.cap_covers(cap, "read", topic) for cap in g.get("caps", [])):
                    out.append(g)
            return out

        found = await engine.read(find)
        members = await doc_list(topic, "members")
        member = bool(peer) and any(e.get("key") == peer for e in members)
        if not found and not member:
            raise ApiError(404, "no board grant of ours for that topic matches", "unknown_grant")
        hashes = [grant_hash(g) for g in found]
        changes: dict = {}
        if member:
            changes["members"] = [e for e in members if e.get("key") != peer]
        if hashes:
            at = format_ts(now_ms())
            revoked = [e for e in await doc_list(topic, "revoked") if e.get("grant") not in hashes]
            revoked += [{"grant": h, "at": at} for h in hashes]
            changes["revoked"] = revoked[-wb.MAX_LIST:]
        await publish(topic, changes)
        await door.revoke_all(hashes)
        return {"revoked": hashes, "member": member,
                "topic": await topic_answer(topic)}

    @r.route("POST", "/v1/board/ban")
    async def ban(req: Request) -> dict:
        body = json_body(req)
        topic = await own_topic(body, "bans keys from a topic")
        key = await engine.read(lambda c: _peer(c, _str(body, "peer")))
        if key == me:
            raise _bad("the owner cannot ban itself")
        banned = [k for k in await doc_list(topic, "banned") if k != key]
        changes: dict = {"banned": banned}
        if not body.get("unban"):
            banned.append(key)
            changes["members"] = [e for e in await doc_list(topic, "members")
                                  if e.get("key") != key]
        if len(banned) > wb.MAX_LIST:
            raise _bad(f"a topic bans at most {wb.MAX_LIST} keys")
        await publish(topic, changes)
        return {"topic": await topic_answer(topic)}

    # -- the work queue ------------------------------------------------------------

    async def queue_topic(body: dict) -> str:
        topic = await topic_of(body.get("topic"))
        pol = await ready_topic(topic, _secs(body, "timeout", 10.0))
        if pol is None or not pol.queue:
            raise _bad("that topic is not a work queue (its owner sets --queue)")
        return topic

    async def lease_answer(topic: str, d: Any) -> dict:
        def q(c: sqlite3.Connection) -> dict:
            out: dict = {"state": d.state, "lease": d.lease, "until": d.until,
                         "holder": d.holder, "topic": topic}
            if d.item:
                p = sb.post_by_hash(c, topic, d.item)
                out["item"] = (post_obj(c, p, {}) if p
                               else {"hash": d.item, "id": d.item[:10], "topic": topic})
            return out

        return small_read(q)  # one post by its hash

    @r.route("POST", "/v1/board/claim")
    async def claim(req: Request) -> dict:
        body = json_body(req)
        try:  # every field the ask carries, before anything waits or is sent
            offers = wb.check_tags(body.get("offers", []), "offers")
            bid = Bid.check(body.get("bid"))
            req_id = wb.check_req_id(body.get("req"))
        except wb.BoardError as e:
            raise _bad(str(e)) from None
        topic = await queue_topic(body)
        timeout = _secs(body, "timeout", 10.0)
        wait = _secs(body, "wait", 0.0)
        ask = ClaimAsk(board.queue, topic, req_id or engine.ids.next(),
                       offers, bid, timeout)
        try:
            d = await ask.until_given(wait, lambda h: engine.read(
                lambda c: sb.raw_records(c, topic, [h])))
        except NoOwner:
            raise ApiError(409, "the queue's owner is not connected, nor any host subscribed"
                           " to the topic: nothing can be claimed until one is (leases already"
                           " held run on)", "no_owner") from None
        except trio.TooSlowError:
            raise ApiError(504, "the queue's owner did not answer in time (over the hosts"
                           " between, if any)", "timeout") from None
        except Refused as e:
            raise ApiError(409, f"refused: {e}", "refused") from None
        if d.state == "empty":
            return {"state": "empty", "topic": topic}
        return await lease_answer(topic, d)

    @r.route("POST", "/v1/board/lease")
    async def lease(req: Request) -> dict:
        body = json_body(req)
        op = _str(body, "op")
        if op not in OPS or op == "claim":
            raise _bad("op is one of renew, release, complete, fail")
        try:  # checked before anything is asked or kept for the owner
            lease_id = wb.check_lease_id(_str(body, "lease").strip())
        except wb.BoardError as e:
            raise _bad(str(e)) from None
        topic = await queue_topic(body)
        try:
            d, _rec = await board.queue.request(topic, op, lease=lease_id,
                                                timeout=_secs(body, "timeout", 10.0))
        except (NoOwner, trio.TooSlowError):
            if op not in KEPT_OPS:
                raise ApiError(409, "the queue's owner is not reachable: renew needs it",
                               "no_owner") from None
            until = await engine.read(lambda c: _lease_until(c, topic, lease_id))
            await board.queue.keep(topic, op, lease_id, until)
            return {"state": "queued", "queued": True, "lease": lease_id, "topic": topic,
                    "until": until}
        except Refused as e:
            raise ApiError(409, f"refused: {e}", "refused") from None
        return await lease_answer(topic, d)

    def _lease_until(c: sqlite3.Connection, topic: str, lease_id: str) -> int:
        """When our lease runs out, by the newest lease record we hold for it."""
        from ..wire.timefmt import parse_ts

        best = 0
        for raw in sb.lease_raws(c, topic, topic.split("/")[0]):
            d = json.loads(raw)
            if d.get("lease") == lease_id:
                best = parse_ts(d["until"])
        return best or now_ms() + 300_000

    @r.route("GET", "/v1/board/queue")
    async def queue(req: Request) -> dict:
        topic = await topic_of(req.query.get("topic"))
        # compact=1: the table `awp queue` prints, a row of short fields an item
        # (a queue of hundreds of items is otherwise ~0.5 KB of post object each).
        compact = req.query.get("compact") in ("1", "true")
        pol = await board.policy(topic)
        arbiter = owned_by(topic, me)
        snap, strikes = await door.queue_view(topic) if arbiter else (None, {})

        def q(c: sqlite3.Connection) -> dict:
            names: dict[str, str] = {}
            posts = {p.shown.hash: p for p in sb.visible_posts(c, topic, 0)
                     if not p.shown.parent}
            leases = sb.records(c, topic, kind="lease")
            if snap is not None:
                view = {e["item"]: e for e in snap}
            else:
                view = board.queue.lease_view(leases, pol, now_ms())
            facts = lease_facts(leases)
            done_by = {r.of: r.doc["holder"] for r in sorted(leases, key=lambda r: (r.ts, r.hash))
                       if r.doc["state"] == "done"}
            needs = {} if compact else {
                h: market.needs_of(json.loads(raw)) or [] for h, raw in c.execute(
                    "SELECT hash, raw FROM board_records WHERE topic = ? AND kind = 'post'"
                    " AND parent = '' AND raw LIKE '%\"needs\"%'", (topic,))}
            items = []
            for h, p in posts.items():
                e = view.get(h, {})
                f = facts.get(e.get("lease", ""), {}) if e.get("lease") else {}
                items.append({"item": {"hash": h} if compact else post_obj(c, p, names),
                              "status": e.get("status", "open"),
                              "holder": e.get("holder", ""), "lease": e.get("lease", ""),
                              "until": e.get("until", 0), "attempts": e.get("attempts", 0),
                              "since": f.get("since", 0), "renewals": f.get("renewals", 0),
                              "needs": list(needs.get(h, [])),
                              "done_by": done_by.get(h, "") if e.get("status") == "done"
                              else ""})
            workers = workers_of(items, leases, strikes if snap is not None else None)
            labels = queries.Labels(c)
            shown = {k: labels[k] for k in {i["holder"] for i in items}
                     | {i["done_by"] for i in items} | {w["holder"] for w in workers}
                     if k and k != me}
            answer = {"topic": topic, "items": items, "arbiter": snap is not None,
                      "workers": workers, "self": me, "names": shown}
            if compact:
                del answer["items"]
                answer["columns"] = list(QUEUE_COLUMNS)
                answer["rows"] = [
                    [i["item"]["hash"][:10], i["status"], i["holder"], i["until"],
                     i["attempts"], clip(text_of(posts[i["item"]["hash"]].shown.parts),
                                         QUEUE_TEXT)] for i in items]
            return answer

        return await engine.read(q)

    @r.route("POST", "/v1/board/waiting")
    async def waiting(req: Request) -> dict:
        """Open items on the queues this host has worked (held a lease on): the stop hook's
        hint to an idle agent."""
        def q(c: sqlite3.Connection) -> list[tuple[str, str]]:
            return [(t, label(c, t)) for (t,) in c.execute(
                "SELECT DISTINCT topic FROM board_records WHERE kind = 'lease'"
                " AND raw LIKE ?", (f'%"holder":"{me}"%',))]

        out = []
        for topic, lab in await engine.read(q):
            pol = await board.policy(topic)
            if pol is None or not pol.queue:
                continue
            snap = await door.queue_snapshot(topic) if owned_by(topic, me) else None

            def count(c: sqlite3.Connection, topic: str = topic, snap=snap, pol=pol) -> int:
                items = {p.shown.hash for p in sb.visible_posts(c, topic, 0)
                         if not p.shown.parent}
                view = ({e["item"]: e for e in snap} if snap is not None else
                        board.queue.lease_view(sb.records(c, topic, kind="lease"), pol,
                                               now_ms()))
                return sum(1 for h in items if view.get(h, {}).get("status", "open") == "open")

            out.append({"topic": topic, "label": lab, "open": await engine.read(count)})
        return {"topics": out}
