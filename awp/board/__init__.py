"""The board (extension ``board``, draft): the pure parts, free of I/O.

* :mod:`awp.wire.board` checks and signs records.
* :mod:`.perms` decides who may read and post a topic.
* :mod:`.retention` decides, the same on every host, which records a topic keeps.
* :mod:`.view` turns a topic's records into what readers see (edits, deletes, hides).
* :mod:`.sync` reconciles two hosts' copies of a topic, moving only what is missing.
* :mod:`.queue` is the work-queue arbiter: leases as a pure function of its log.
* :mod:`.heads` compares a copy of a topic with its owner's signed head (what a relay withheld).

None of it is wired into the daemon yet; SPEC.md ("The board") has the wire shapes.
"""
