"""The web process's live view of the daemon: State, activity, event fan-out.

One task follows the daemon: it reads a snapshot, then the daemon's change
hints, and after each burst of hints (or every few seconds) re-reads the
snapshot and the log past its cursors. What changed goes out to every event
stream client through its own bounded queue: a client that stops reading is
dropped once its queue is full (it reconnects with ``Last-Event-ID`` and gets
what it missed), so no client ever holds up the daemon, this task or the
other clients.

Board hints (a post, an edit, a new topic document) do not change the State:
they go out as ``board`` events naming the topic, at most one per topic per
quarter second, and the page re-reads what it shows of that topic.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import trio

from ..wire.canonical import compact_json
from ..wire.timefmt import now_ms
from . import activity, model
from .daemon import DaemonDown, DaemonError, DaemonLink

log = logging.getLogger("awp.web")

#: Activity items kept for /api/activity and replay.
ACTIVITY_KEEP = 2000
#: Activity items read from the log when the web process starts.
ACTIVITY_SEED = 300
#: Events queued per stream client before it is dropped as stalled.
CLIENT_QUEUE = 256
#: Re-read the snapshot at least this often (staleness is a matter of time).
REFRESH_EVERY = 5.0
#: Let a burst of change hints settle this long before re-reading.
SETTLE = 0.08
#: Never re-read more often than this.
MIN_GAP = 0.25
#: Wait this long between attempts while no daemon answers.
RETRY_EVERY = 1.0


def sse(event: str, data: Any, ident: int | None = None) -> bytes:
    """One server-sent event. JSON never contains a raw newline, so one data line."""
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {compact_json(data)}\n\n".encode()


def blob_url(peer: str, direction: str, ref: str) -> str:
    from urllib.parse import urlencode

    return "/api/blob?" + urlencode({"peer": peer, "dir": direction, "ref": ref})


class Client:
    """One event stream reader: a bounded queue the hub never waits on."""

    def __init__(self) -> None:
        self.send, self.recv = trio.open_memory_channel[bytes](CLIENT_QUEUE)
        self.dropped = False

    def push(self, chunk: bytes) -> bool:
        try:
            self.send.send_nowait(chunk)
            return True
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self.dropped = True
            self.send.close()
            return False


class Hub:
    def __init__(self, link: DaemonLink) -> None:
        self.link = link
        self.state: dict | None = None
        self.state_event: bytes = b""
        self.state_json: bytes = b""
        self.error = "starting"
        self.activity: deque[dict] = deque(maxlen=ACTIVITY_KEEP)
        self.seq = 0
        self.clients: set[Client] = set()
        self.self_key = ""
        self._log_after: int | None = None
        self._mirror_after: int | None = None
        self._board_after = 0  # the board records' seq the feed has read up to
        self._subjects: dict[str, str] = {}
        self._dirty = trio.Event()
        self._hints: list[dict] = []
        self._board_topics: set[str] = set()
        self._board_dirty = trio.Event()
        self.ready = trio.Event()  # set once the first attempt (either way) is over

    # -- clients ---------------------------------------------------------------------

    def subscribe(self) -> Client:
        c = Client()
        self.clients.add(c)
        return c

    def unsubscribe(self, c: Client) -> None:
        self.clients.discard(c)
        c.send.close()

    def broadcast(self, chunk: bytes) -> None:
        for c in list(self.clients):
            if not c.push(chunk):
                self.clients.discard(c)

    def replay_after(self, seq: int) -> list[dict]:
        """Activity a client that saw ``seq`` missed (all we have if it is from an
        earlier run of the web process)."""
        if seq > self.seq:
            return list(self.activity)
        return [a for a in self.activity if a["seq"] > seq]

    def recent(self, limit: int, after: int | None) -> list[dict]:
        items = [a for a in self.activity if after is None or a["seq"] > after]
        return items[-limit:] if limit else []

    # -- activity --------------------------------------------------------------------

    def _add_activity(self, items: list[dict], *, announce: bool = True) -> None:
        for item in items:
            if item is None:
                continue
            self.seq += 1
            item = {"seq": self.seq, **item}
            self.activity.append(item)
            if announce:
                self.broadcast(sse("activity", item, self.seq))

    def _set_state(self, state: dict) -> None:
        state = {**state, "activity_seq": self.seq}
        old = self.state
        self.state = state
        self.error = ""
        self.state_json = compact_json(state).encode()
        # Unchanged apart from the clock: no event.
        if old is not None and _stable(old) == _stable(state):
            return
        self.state_event = sse("state", state)
        self.broadcast(self.state_event)

    def _set_down(self, reason: str) -> None:
        if self.state is not None or self.error != reason:
            log.info("daemon not reachable: %s", reason)
            self.broadcast(sse("down", {"error": reason}))
        self.state = None
        self.state_event = b""
        self.state_json = b""
        self.error = reason

    # -- following the daemon --------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except Exception as e:
                known = _daemon_failure(e)
                if known is None:  # a bug: report it on the page, keep trying
                    log.exception("following the daemon failed")
                    self._set_down(f"internal error: {type(e).__name__}: {e}")
                else:
                    self._set_down(str(known))
            self.ready.set()
            await trio.sleep(RETRY_EVERY)

    async def _follow(self) -> None:
        lost: list[str] = []
        async with trio.open_nursery() as nursery:
            stream_ready = trio.Event()
            nursery.start_soon(self._read_changes, stream_ready, nursery.cancel_scope, lost)
            nursery.start_soon(self._announce_board)
            with trio.move_on_after(5):
                await stream_ready.wait()
            await self._catch_up(first=True)
            self.ready.set()
            last = trio.current_time()
            while True:
                with trio.move_on_after(REFRESH_EVERY):
                    await self._dirty.wait()
                    await trio.sleep(SETTLE)
                gap = trio.current_time() - last
                if gap < MIN_GAP:
                    await trio.sleep(MIN_GAP - gap)
                self._dirty = trio.Event()
                last = trio.current_time()
                await self._catch_up()
        raise DaemonDown(lost[0] if lost else "the daemon closed the change stream")

    async def _read_changes(self, ready: trio.Event, scope: trio.CancelScope,
                            lost: list[str]) -> None:
        try:
            async for hint in self.link.stream("/v1/web/changes"):
                ready.set()
                if not isinstance(hint, dict):
                    continue
                kind = hint.get("kind")
                if kind == "hello":
                    self.self_key = hint.get("self", "")
                    continue
                if kind == "tick":
                    continue
                if kind == "board":
                    if isinstance(hint.get("topic"), str):
                        self._board_topics.add(hint["topic"])
                        self._board_dirty.set()
                    continue
                if kind in ("peer", "presence"):
                    self._hints.append(hint)
                self._dirty.set()
        except (DaemonDown, DaemonError) as e:
            lost.append(str(e))
        # The daemon went away: end the follow loop (run() reports and retries).
        scope.cancel()

    async def _announce_board(self) -> None:
        """One ``board`` event per changed topic, after a burst settles, at most every MIN_GAP."""
        while True:
            await self._board_dirty.wait()
            await trio.sleep(SETTLE)
            self._board_dirty = trio.Event()
            topics, self._board_topics = self._board_topics, set()
            for topic in sorted(topics):
                self.broadcast(sse("board", {"topic": topic}))
            await trio.sleep(MIN_GAP - SETTLE)

    async def _catch_up(self, *, first: bool = False) -> None:
        now = now_ms()
        snap = await self.link.get("/v1/web/state")
        state = model.build_state(snap, at_ms=now)
        self.self_key = state["self"]
        hints, self._hints = self._hints, []
        items: list[dict | None] = []
        if self._log_after is None:
            # First contact: seed the feed from the newest records, silently.
            got = await self.link.get("/v1/web/log", {"tail": ACTIVITY_SEED})
            self._subjects.update(got.get("subjects") or {})
            seeded = [activity.activity_from_record(r, self.self_key, self._subject(r))
                      for r in got.get("records") or []]
            seeded += [activity.activity_from_mirror(m) for m in got.get("mirrors") or []]
            seeded += [activity.activity_from_board(b) for b in got.get("board") or []]
            seeded = [x for x in seeded if x]
            seeded.sort(key=lambda x: x.get("at") or "")
            self._add_activity(seeded, announce=False)
            self._log_after = int(got.get("log_max") or 0)
            self._mirror_after = int(got.get("mirror_max") or 0)
            self._board_after = int(got.get("board_max") or 0)
        else:
            await self._read_log(items)
        for hint in hints:
            items.append(activity.activity_from_hint(hint, state, now))
        items.extend(activity.activity_from_diff(self.state, state, now))
        self._add_activity([x for x in items if x])
        self._set_state(state)

    def _subject(self, rec: dict) -> str:
        return self._subjects.get(f"{rec.get('peer')} {rec.get('th')}", "")

    async def _read_log(self, items: list) -> None:
        while True:
            got = await self.link.get("/v1/web/log", {"after": self._log_after,
                                                      "mafter": self._mirror_after,
                                                      "bafter": self._board_after})
            self._subjects.update(got.get("subjects") or {})
            if len(self._subjects) > 20_000:
                self._subjects.clear()
            records = got.get("records") or []
            mirrors = got.get("mirrors") or []
            for r in records:
                items.append(activity.activity_from_record(r, self.self_key, self._subject(r)))
                if r.get("th") and r.get("t") in ("msg", "state", "grant", "introduce",
                                                  "err", "notice"):
                    msg = model.message_from_record(r, self.self_key, blob_url)
                    self.broadcast(sse("message", {"peer": r["peer"], "th": r["th"],
                                                   "message": msg}))
                self._log_after = max(self._log_after or 0, int(r["seq"]))
            for m in mirrors:
                items.append(activity.activity_from_mirror(m))
                self.broadcast(sse("message", {"peer": m["sharer"], "th": m["th"],
                                               "message": model.message_from_mirror(m)}))
                self._mirror_after = max(self._mirror_after or 0, int(m["seq"]))
            # A daemon whose store was replaced starts its counters again.
            if int(got.get("log_max") or 0) < (self._log_after or 0):
                self._log_after = int(got.get("log_max") or 0)
            if int(got.get("mirror_max") or 0) < (self._mirror_after or 0):
                self._mirror_after = int(got.get("mirror_max") or 0)
            board = got.get("board") or []
            for b in board:
                items.append(activity.activity_from_board(b))
            # fewer than a batch: nothing more to show up to board_max (stamps, renewals)
            board_max = int(got.get("board_max") or 0)
            self._board_after = (int(board[-1]["seq"]) if len(board) >= 500
                                 else board_max)
            if len(records) < 500 and len(mirrors) < 500 and len(board) < 500:
                return


def _daemon_failure(exc: BaseException) -> Exception | None:
    """The DaemonDown/DaemonError in ``exc`` (possibly inside exception groups)."""
    if isinstance(exc, DaemonDown | DaemonError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _daemon_failure(inner)
            if found is not None:
                return found
    return None


def _stable(state: dict) -> dict:
    """A State without what changes with the clock alone (for "did it change?")."""
    agents = [{**a, "seen": None} if a.get("status") in ("self", "connected") else a
              for a in state.get("agents") or []]
    return {**state, "at": None, "activity_seq": None, "agents": agents}
