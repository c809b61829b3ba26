"""What a :class:`~awp.board.replica.Replica` asks its driver to do.

As in :mod:`awp.node.session.actions`, an action is a plain tuple whose first
member names it; the members after the name are listed beside each
constant.  The replica never does any of these itself: it has no socket, no
store and no clock.  The driver (the daemon's trio code in
:mod:`awp.node.board`, or the simulator in ``bench/sim.py``) carries them out
in the order given and reports back with the replica's event methods.

A ``key`` is a peer's public key: the link to it.  A list of keys is the
links an action goes to, already chosen by the replica's rules (never the
link a record came from).
"""

from __future__ import annotations

# -- to links -----------------------------------------------------------------------------
#: ``(SUB, keys, topics, drop)``: send our ``board-sub`` for ``topics`` (each with
#: the grant we hold for it, which the store knows) and ``drop`` to each link.
SUB = "sub"
#: ``(FORWARD, topic, raws, hops, keys)``: send the records (their exact text, as
#: received) in ``board-posts`` lines carrying ``hops`` to each link that may read.
FORWARD = "forward"
#: ``(HEAD, topic, head, hops, keys)``: send the owner's signed head on.
HEAD = "head"
#: ``(DOC, key, topic)``: send the topic document we hold to one link.
DOC = "doc"
#: ``(OPEN, key, topic)``: open a digest exchange of ``topic`` with one link
#: (the store summarises what we hold).
OPEN = "open"
#: ``(RESYNC, key, topics)``: open a fresh digest exchange of ``topics`` with one
#: link once its queue lets us (anti-entropy: what a live push lost).
RESYNC = "resync"
#: ``(DIGEST, key, topic, body)``: answer a digest exchange with ``body``.
DIGEST = "digest"
#: ``(WANT, key, topic, ids)``: ask one link for these records.
WANT = "want"
#: ``(FORWARD_DOC, topic, raw, hops, keys)``: send a new topic document on.
FORWARD_DOC = "forward_doc"
#: ``(NONE, key, topic)``: tell one link that we own no such topic.
NONE = "none"

# -- to the store -------------------------------------------------------------------------
#: ``(KEEP_HEAD, head)``: keep the newest head across a restart.
KEEP_HEAD = "keep_head"
#: ``(SIGN_HEAD, topic)``: sign a new head of one of our topics (the store
#: summarises what we hold) and hand it to :meth:`Replica.signed_head`.
SIGN_HEAD = "sign_head"
#: ``(CHECK_GAP, topic, head)``: compare our copy with ``head`` (the one the
#: check began with) and report with :meth:`Replica.gap_checked`.
CHECK_GAP = "check_gap"

# -- to the driver's clock ----------------------------------------------------------------
#: ``(WAIT_GAP, topic, delay)``: call :meth:`Replica.gap_due` for ``topic``
#: ``delay`` seconds from now.
WAIT_GAP = "wait_gap"

# -- to the engine ------------------------------------------------------------------------
#: ``(HEARD, key, topics, dropped)``: the link now lists these topics we hold, and
#: no longer lists ``dropped`` (business with peers, the sequencer's paths).
HEARD = "heard"
#: ``(EXPLAINED, topic, head)``: a gap check found our copy holds what ``head``
#: names (the sequencer's holes it named are explained).
EXPLAINED = "explained"
#: ``(STALE, topic, st)``: the owner's heads of ``topic`` stopped coming
#: (``st``: since, via, heads overdue); say so once.
STALE = "stale"
#: ``(STAT, name)``: count one of the board's statistics.
STAT = "stat"
