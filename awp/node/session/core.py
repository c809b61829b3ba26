"""The per-connection protocol rules after the handshake, without any I/O.

Built the way h11 and wsproto are: the session is fed events (lines read,
a store job finished, the time) and answers with actions (store this, write
that, tell the engine, close) for a driver to carry out
(:mod:`awp.node.connection` with trio; the unit tests with a fake clock).
It holds no socket, no store and no clock, so every delivery rule of
SPEC.md is decided here and tested without a daemon:

* **Dispatch and runs.**  Lines are handled in arrival order.  Consecutive
  content lines (``msg``, ``state``, ``mirror``, ``private``) become one
  store job of at most ``run_lines``; consecutive acks another; any other
  line ends the run first, so nothing is reordered.
* **Ack only after durable, in arrival order.**  A content line is acked
  only once the driver reports its job durable (:meth:`Session.durable`, the
  intake journal's sync) or committed (:meth:`Session.done`).  Every job has
  a token; follow-ups (acks, replies, what the engine is told) are released
  strictly in token order, whatever order completions arrive in.  A line
  the store refused over a budget gets its err, never an ack; a job that
  failed gets ``err internal`` and the connection closes, so the peer sends
  it again on the next connection.
* **Duplicates** are the store's to find (its seen marks, in the same
  transaction); the session acks them like any stored line (seq 0), which
  is what the peer needs to drop them from its outbox.
* **Back-pressure.**  At most ``inflight_lines`` content lines wait for the
  store; past that :meth:`next_action` answers :data:`PAUSE` until a job is
  done, and the driver stops reading.
* **Resume and replay** (:class:`~awp.node.session.replay.Replay`): what we
  send comes from the outbox in ``seq`` order, from the peer's resume on (or
  ``resume_wait`` after the start, if it sends none); its resume restarts
  the scan from the start, and ``seq`` only moves forward.
* **Gaps** (:mod:`awp.node.gaps`): an ack that overtakes an older line of
  ours starts ``gap_timeout``; then the older line is sent once again.
* **Ping and idle.**  The first ping goes ``min(3 s, idle)`` after the
  start; after that one whenever nothing was read or pinged for ``idle``
  (0.9 x ``ping_interval``).  Two pings unanswered by any line close it.
* **Bye.**  After ours nothing more is sent, and the connection ends on the
  peer's bye or ``bye_linger`` later; the peer's bye is answered with ours,
  then the connection ends.

States: ``OPEN`` (resume sent, waiting for the peer's), ``RESUMED`` (the
peer's resume is applied, replay may run), ``CLOSING`` (a bye or a
refusal: no more lines are taken), ``CLOSED`` (an action said close).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ...wire import errors
from ...wire.boardline import PREFIXES as BOARD_RECS
from ...wire.boardline import parse_recs_line
from ...wire.errors import ProtocolError
from ...wire.messages import ACKED_TYPES, ack_line, ack_lines, dump, parse_line, storable
from ...wire.timefmt import format_ts, now_ms
from ..gaps import AckGaps
from . import actions as A
from .replay import Replay

OPEN, RESUMED, CLOSING, CLOSED = "open", "resumed", "closing", "closed"

#: :meth:`Session.next_action` when the store must catch up before more is taken.
PAUSE = ("pause",)

_CONTENT, _ACK, _OTHER, _BAD, _END = 0, 1, 2, 3, 4

#: Store results that mean "refused over a budget": the err, never an ack.
REFUSED = -1


class Session:
    """One connection's rules from the first line after the handshake to the end."""

    def __init__(self, ids: object, *, now: float, gap_timeout: float = 15.0,
                 ping_interval: float = 30.0, inflight_lines: int = 256, run_lines: int = 32,
                 max_depth: int = 32, first_ping: float = 3.0, resume_wait: float = 15.0,
                 bye_linger: float = 5.0,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self._next_id = ids.next  # type: ignore[attr-defined]
        self._next_run = ids.next_run  # type: ignore[attr-defined]
        self._clock_ms = clock_ms
        self.state = OPEN
        self.max_depth = max_depth
        self.run_lines = run_lines
        self.inflight_limit = max(1, inflight_lines)
        self.inflight = 0  # content lines handed to the store, not yet done
        self.gaps = AckGaps(gap_timeout)
        self.replay = Replay(self.gaps)
        self.peer_spoke = False  # any non-err line arrived (the peer took us)
        self.bye_received = False
        self.timer_dirty = False  # a deadline moved earlier: the driver's timer looks again
        self._intake_done = False  # a bad line or a bye: nothing more is taken
        self._queue: deque[tuple[int, str, dict | None, bytes]] = deque()
        self._token = 0
        self._order: deque[int] = deque()  # tokens awaiting completion, arrival order
        self._results: dict[int, tuple] = {}  # finished out of order, waiting their turn
        self._kinds: dict[int, tuple] = {}  # token -> (kind, payload) of each job in flight
        self._acked_early: set[int] = set()  # tokens whose acks left at durable()
        # ping and idle
        self.idle = ping_interval * 0.9
        self.resume_wait = resume_wait
        self.bye_linger = bye_linger
        self._bye_by: float | None = None  # our bye waits for the peer's until then
        self._resume_by = now + resume_wait
        self._first_ping_after = first_ping
        self._first_ping = now + min(first_ping, self.idle)
        self._pinged = False
        self.last_recv = now
        self._last_ping = 0.0
        self._unanswered = 0
        self._ping_sent: dict[str, float] = {}

    def start(self, now: float) -> None:
        """The handshake is done and our resume is going out: the clocks start now."""
        self._first_ping = now + min(self._first_ping_after, self.idle)
        self._resume_by = now + self.resume_wait
        self.last_recv = now

    # -- building our lines ------------------------------------------------------

    def line(self, line: dict, ident: str | None = None) -> bytes:
        """One line of ours with its envelope (id, ts) filled in."""
        full = {"t": line["t"], "id": ident or self._next_id(),
                "ts": format_ts(self._clock_ms())}
        full.update((k, v) for k, v in line.items() if k != "t")
        return dump(full)

    def ack_line(self, line: dict) -> bytes:
        return ack_line(line.get("th") or "", line["id"], id=self._next_id(),
                        ts=format_ts(self._clock_ms()))

    def ack_lines(self, lines: list[dict]) -> bytes:
        """The acks of a stored run, in order: one draw of ids and one stamp for all
        (as many calls of :meth:`ack_line` within one millisecond give)."""
        if len(lines) == 1:
            return self.ack_line(lines[0])
        return ack_lines([(line.get("th") or "", line["id"]) for line in lines],
                         self._next_run(len(lines)), format_ts(self._clock_ms()))

    # -- inbound: lines ----------------------------------------------------------

    def receive(self, raws: list[bytes], now: float) -> None:
        """Lines of one read, in order; take them out with :meth:`next_action`.

        A line that does not parse ends the intake: what came before it is
        still handled, then a refusal; nothing after it is read.
        """
        if self._intake_done or not raws:
            return
        append = self._queue.append
        depth = self.max_depth
        taken = spoke = False
        for raw in raws:
            try:
                # A board line with records is decoded once, its records' text kept
                # for the board (awp.wire.boardline); anything else the usual way.
                line = (raw.startswith(BOARD_RECS) and parse_recs_line(raw, depth)
                        or parse_line(raw, depth))
            except ProtocolError as e:
                append((_BAD, e.code, None, (e.detail or "").encode("utf-8")))
                self._intake_done = True
                self.state = CLOSING
                break
            taken = True
            t = line["t"]
            if t in ACKED_TYPES:
                spoke = True
                append((_CONTENT, t, line, storable(raw, line)))
            elif t == "ack":
                spoke = True
                append((_ACK, t, line, raw))
            else:
                if t != "err":
                    spoke = True
                append((_OTHER, t, line, raw))
                if t == "bye":  # nothing after a bye counts
                    self.bye_received = True
                    self._intake_done = True
                    break
        if taken:  # any line from the peer shows it alive
            self.last_recv = now
            self._unanswered = 0
            if spoke:
                self.peer_spoke = True

    def next_action(self, now: float) -> tuple | None:
        """The next thing to do for the lines received; None when all are handled.

        :data:`PAUSE` while ``inflight_lines`` content lines wait for the
        store: call again after :meth:`done`.
        """
        q = self._queue
        if not q:
            return None
        kind = q[0][0]
        if kind == _CONTENT:
            if self.inflight >= self.inflight_limit:
                return PAUSE
            run = []
            while q and q[0][0] == _CONTENT and len(run) < self.run_lines:
                _k, _t, line, raw = q.popleft()
                run.append((line, raw))
            self.inflight += len(run)
            return (A.STORE_RUN, self._job("run", run), run)
        if kind == _ACK:
            acks = []
            while q and q[0][0] == _ACK:
                line = q.popleft()[2]
                re = line.get("re")  # type: ignore[union-attr]
                if isinstance(re, str) and re:
                    acks.append((line.get("th") or "", re))  # type: ignore[union-attr]
                    if self.gaps.answered(re, now):
                        self.timer_dirty = True
            if not acks:
                return self.next_action(now)
            return (A.APPLY_ACKS, self._job("acks", None), acks)
        _k, t, line, raw = q.popleft()
        if kind == _BAD:
            q.clear()
            return (A.REFUSE, t, raw.decode("utf-8"))
        if kind == _END:
            self.state = CLOSED
            return (A.CLOSE, t)
        return self._other(t, line, raw, now)  # type: ignore[arg-type]

    def more_of(self, t: str, limit: int) -> list[tuple[dict, bytes]]:
        """The lines of type ``t`` queued next (another type stops it), at most
        ``limit``, taken out as ``(line, raw)``: the caller handles them now,
        in their turn, with the one :meth:`next_action` gave it.  Only for types
        that reach the caller as :data:`~awp.node.session.actions.OTHER` (the
        board's ``board-posts``: the records of several lines of one read go in
        one transaction and leave as one line per link)."""
        q = self._queue
        out: list[tuple[dict, bytes]] = []
        while q and len(out) < limit and q[0][0] == _OTHER and q[0][1] == t:
            _k, _t, line, raw = q.popleft()
            out.append((line, raw))  # type: ignore[arg-type]
        return out

    def _other(self, t: str, line: dict, raw: bytes, now: float) -> tuple | None:
        if t == "chunk":
            return (A.STORE_CHUNK, self._job("chunk", None), line, len(raw))
        if t == "grant":
            return (A.STORE_GRANT, self._job("grant", None), line, len(raw))
        if t == "introduce":
            return (A.STORE_INTRODUCE, self._job("introduce", None), line, raw)
        if t == "resume":
            seen = line.get("seen")
            clean: dict[str, str] = {}
            if isinstance(seen, dict):
                clean = {k: v for k, v in seen.items()
                         if isinstance(k, str) and isinstance(v, str)}
            return (A.APPLY_RESUME, self._job("resume", None), clean)
        if t == "ping":
            ident = line.get("id")
            return (A.SEND, self.line({"t": "pong", "re": ident} if ident else {"t": "pong"}))
        if t == "pong":
            sent = self._ping_sent.pop(line.get("re") or "", None)
            if sent is None:
                return self.next_action(now)
            return (A.RTT, (now - sent) * 1000)
        if t == "bye":
            return self._peer_bye(line)
        if t == "err":
            return self._peer_err(line, now)
        return (A.OTHER, line, raw)

    def _peer_bye(self, line: dict) -> tuple:
        self.bye_received = True
        self._queue.clear()
        if self.replay.bye_sent:
            self.state = CLOSED
            return (A.CLOSE, "bye exchanged")
        reason = line.get("reason") if isinstance(line.get("reason"), str) else ""
        reply = {"t": "bye", "reason": reason}
        if line.get("id"):
            reply["re"] = line["id"]
        self.replay.bye_sent = True
        self.state = CLOSING
        return (A.PEER_BYE, reason, self.line(reply))

    def _peer_err(self, line: dict, now: float) -> tuple:
        code = line.get("code") if isinstance(line.get("code"), str) else ""
        re = line.get("re")
        if isinstance(re, str) and self.gaps.answered(re, now):  # an answer all the same
            self.timer_dirty = True
        if code in errors.CLOSING:
            detail = line.get("detail") if isinstance(line.get("detail"), str) else ""
            self._intake_done = True
            self._queue.clear()  # the err is the last line taken; then close
            self._queue.append((_END, f"peer sent err {code}: {detail}".strip(), None, b""))
            self.state = CLOSING
        return (A.PEER_ERR, line)

    # -- inbound: the store's answers ---------------------------------------------

    def _job(self, kind: str, payload: object) -> int:
        self._token += 1
        self._order.append(self._token)
        self._kinds[self._token] = (kind, payload)
        return self._token

    @property
    def jobs_in_flight(self) -> int:
        """Store jobs handed out and not yet done (their follow-ups not released)."""
        return len(self._order)

    def durable(self, token: int) -> list[tuple]:
        """A lone run's line is durable ahead of its commit (the intake journal).

        Only the job at the head of the order may be acked this early, so
        acks never overtake an older line's; the rest of its follow-ups come
        with :meth:`done`.
        """
        kind, run = self._kinds[token]
        if kind != "run" or not self._order or self._order[0] != token:
            return []
        self._acked_early.add(token)
        return [(A.SEND, self.ack_lines([line for line, _raw in run]))]

    def done(self, token: int, result: object) -> list[tuple]:
        """Job ``token`` committed with ``result``; the follow-ups now due, in order."""
        self._results[token] = (True, result)
        return self._release()

    def failed(self, token: int) -> list[tuple]:
        """Job ``token`` failed: ``err internal`` naming its first line, then close."""
        kind, payload = self._kinds.get(token, ("", None))
        self.state = CLOSED
        re = payload[0][0].get("id") if kind == "run" and payload else None
        err = ({"t": "err", "code": errors.INTERNAL, "re": re,
                "detail": "could not store the line"} if re else
               {"t": "err", "code": errors.INTERNAL, "detail": "could not store"})
        return [(A.SEND, self.line(err)), (A.CLOSE, "store failure")]

    def _release(self) -> list[tuple]:
        out: list[tuple] = []
        order, results = self._order, self._results
        while order and order[0] in results:
            token = order.popleft()
            _ok, result = results.pop(token)
            kind, payload = self._kinds.pop(token)
            self._follow(kind, payload, result, token, out)
        return out

    def _follow(self, kind: str, payload: object, result: object, token: int,
                out: list[tuple]) -> None:
        if kind == "run":
            run: list = payload  # type: ignore[assignment]
            self.inflight -= len(run)
            early = token in self._acked_early
            if early:
                self._acked_early.discard(token)
            else:
                acked = [line for (line, _raw), r in
                         zip(run, result, strict=True)  # type: ignore[call-overload]
                         if r[0] != REFUSED]
                if acked:
                    out.append((A.SEND, self.ack_lines(acked)))
                out.append((A.FLUSH,))
            for (line, _raw), (seq, replies) in zip(run, result,  # type: ignore[call-overload]
                                                    strict=True):
                if seq == REFUSED:
                    out.extend((A.SEND, self.line(r)) for r in replies)
                    continue
                for reply in replies:
                    if isinstance(reply, dict):
                        out.append((A.SEND, self.line(reply)))
                    else:
                        out.append((A.EFFECT, reply))
                out.append((A.COMMITTED, line, seq))
        elif kind == "acks":
            out.append((A.ACKED, list(result)))  # type: ignore[call-overload]
        elif kind == "chunk":
            out.append((A.CHUNK_DONE,))
            out.extend((A.SEND, self.line(r)) for r in result)  # type: ignore[attr-defined]
        elif kind == "grant":
            out.append((A.GRANTS,))
        elif kind == "introduce":
            if result:
                out.append((A.INTRODUCED,))
        elif kind == "resume":
            acked = list(result or ())  # type: ignore[call-overload]
            if acked:
                out.append((A.ACKED, acked))
                self.gaps.forget(acked)
            self.replay.resumed()
            if self.state == OPEN:
                self.state = RESUMED
            out.append((A.RESUMED,))

    # -- time -------------------------------------------------------------------

    def next_deadline(self) -> float:
        """When :meth:`tick` has something to do next (pings, idle, gaps)."""
        self.timer_dirty = False
        d = self._first_ping if not self._pinged else \
            max(self.last_recv, self._last_ping) + self.idle
        due = self.gaps.due()
        if due is not None and not self.replay.bye_sent:
            d = min(d, due)
        if not self.replay.may_send:
            d = min(d, self._resume_by)
        if self._bye_by is not None:
            d = min(d, self._bye_by)
        return d

    def tick(self, now: float) -> list[tuple]:
        """The time is ``now``: ping, give up on a silent peer, resend a skipped line."""
        out: list[tuple] = []
        if self.state == CLOSED:
            return out
        if self._bye_by is not None and now >= self._bye_by:
            self.state = CLOSED  # the peer never answered our bye
            return [(A.CLOSE, "we said bye")]
        if not self.replay.may_send and now >= self._resume_by:
            self.replay.may_send = True  # the peer sent no resume: replay all the same
            out.append((A.REPLAY,))
        due = self.gaps.due()
        if due is not None and now >= due:
            again, given_up = self.gaps.take_overdue(now)
            if given_up:
                out.append((A.LOG, f"still has not acked {len(given_up)} line(s) sent twice;"
                                   " they wait for the next resume"))
            if again and not self.replay.bye_sent:
                out.append((A.RESEND, again))
        if not self._pinged:
            if now >= self._first_ping:
                out.append(self._ping(now))
            return out
        if now >= max(self.last_recv, self._last_ping) + self.idle:
            if self._unanswered >= 2:
                self.state = CLOSED
                out.append((A.CLOSE, "peer stopped answering pings"))
            else:
                out.append(self._ping(now))
        return out

    def _ping(self, now: float) -> tuple:
        ident = self._next_id()
        self._pinged = True
        self._ping_sent = {ident: now}
        self._last_ping = now
        self._unanswered += 1
        return (A.SEND, self.line({"t": "ping"}, ident))

    def resending(self, rows: list[tuple[str, str]]) -> tuple | None:
        """The outbox rows for a :data:`RESEND`: the bytes to write again, if any."""
        if not rows or self.replay.bye_sent:
            return None
        for ident, _text in rows:
            self.gaps.sent(ident, resent=True)
        return (A.SEND, "".join(text + "\n" for _i, text in rows).encode("utf-8"))

    # -- ending -----------------------------------------------------------------

    def send_bye(self, reason: str, now: float) -> tuple | None:
        """Our bye: nothing more is sent after it, and the connection closes
        on the peer's bye or ``bye_linger`` from now.  None when already said."""
        if self.replay.bye_sent:
            return None
        self.replay.bye_sent = True
        self._bye_by = now + self.bye_linger
        self.timer_dirty = True
        self.state = CLOSING
        return (A.SEND, self.line({"t": "bye", "reason": reason}))
