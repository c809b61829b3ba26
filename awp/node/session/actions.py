"""What a :class:`~awp.node.session.Session` asks its driver to do.

An action is a plain tuple whose first member names it, so the hot path (a
content line in, an ack out) allocates one small tuple per step and the
driver dispatches on one string compare.  The members after the name are
listed beside each constant.

The session never does any of these itself: it has no socket, no store and
no clock.  The driver carries them out in the order given and reports back
with the session's event methods (``done``, ``failed``, ``durable``,
``tick``...).
"""

from __future__ import annotations

# -- writing --------------------------------------------------------------
#: ``(SEND, data)``: write ``data`` (whole lines, newline-terminated).
SEND = "send"
#: ``(FLUSH,)``: the acks of a burst are in; write what is held unless more
#: completed work is already waiting (acks first, the rest can wait a moment).
FLUSH = "flush"
#: ``(RESEND, ids)``: fetch these of our lines from the outbox, hand the rows
#: to :meth:`Session.resending`, and write what it returns.
RESEND = "resend"

# -- storing (each carries the token its completion is reported with) ------
#: ``(STORE_RUN, token, [(line, raw), ...])``: content lines, one job; acked
#: after :meth:`Session.durable` or :meth:`Session.done` for the token.
STORE_RUN = "store_run"
#: ``(APPLY_ACKS, token, [(th, re), ...])``: the peer's acks of our lines:
#: wake each ``re``'s waiter now, then drop them from the outbox in one job.
APPLY_ACKS = "apply_acks"
#: ``(STORE_CHUNK, token, line, nbytes)``: one file chunk, never acked.
STORE_CHUNK = "store_chunk"
#: ``(STORE_GRANT, token, line, nbytes)``: a grant line, never acked.
STORE_GRANT = "store_grant"
#: ``(STORE_INTRODUCE, token, line, raw)``: an introduce line.
STORE_INTRODUCE = "store_introduce"
#: ``(APPLY_RESUME, token, seen)``: the peer's resume (``{th: last id}``).
APPLY_RESUME = "apply_resume"

# -- telling the engine ----------------------------------------------------
#: ``(ACKED, ids)``: acks (or a resume) are applied; drop them from the outbox.
ACKED = "acked"
#: ``(COMMITTED, line, seq)``: an inbound content line is durable and acked.
COMMITTED = "committed"
#: ``(EFFECT, reply)``: a store result that is not a line (work to start, a
#: mirror copy); the engine knows what it means.
EFFECT = "effect"
#: ``(CHUNK_DONE,)``: a chunk job finished (its slot is free again).
CHUNK_DONE = "chunk_done"
#: ``(GRANTS,)``: a grant line was stored.
GRANTS = "grants"
#: ``(INTRODUCED,)``: an introduce line changed what we know.
INTRODUCED = "introduced"
#: ``(RESUMED,)``: the peer's resume is applied; replay from the outbox.
RESUMED = "resumed"
#: ``(REPLAY,)``: the peer sent no resume within ``resume_wait``: send from
#: the outbox all the same.
REPLAY = "replay"
#: ``(RTT, ms)``: a pong came back.
RTT = "rtt"
#: ``(PEER_ERR, line)``: the peer sent an err (kept, shown, passed to extensions).
PEER_ERR = "peer_err"
#: ``(OTHER, line, raw)``: a line type the core does not know: the extensions'.
OTHER = "other"
#: ``(LOG, text)``: worth a line in the daemon's log.
LOG = "log"

# -- ending ----------------------------------------------------------------
#: ``(PEER_BYE, reason, reply)``: tell the engine the peer said bye, write
#: ``reply`` (our bye), half-close, read until EOF or ``bye_linger``, then
#: end with ``(CLOSE, ...)`` that follows.
PEER_BYE = "peer_bye"
#: ``(REFUSE, code, detail)``: send a closing err, half-close and drain.
REFUSE = "refuse"
#: ``(CLOSE, reason)``: end the connection now.
CLOSE = "close"
