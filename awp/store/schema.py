"""The SQLite schema, as an ordered list of migrations.

``PRAGMA user_version`` records how many migrations a file has had.  A
migration is appended, never edited, once it has shipped: later issues add
tables (blobs, grants, presence, mirrors) as new entries.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: the core protocol engine.
    """
    CREATE TABLE meta (
        k TEXT PRIMARY KEY,
        v TEXT NOT NULL
    );
    CREATE TABLE peers (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL DEFAULT '',
        about TEXT NOT NULL DEFAULT '',
        caps TEXT NOT NULL DEFAULT '[]',
        shares TEXT,
        first_seen INTEGER NOT NULL,
        last_seen INTEGER NOT NULL DEFAULT 0,
        parked INTEGER NOT NULL DEFAULT 0,
        bye_reason TEXT NOT NULL DEFAULT '',
        last_error TEXT NOT NULL DEFAULT '',
        last_error_at INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE aliases (
        alias TEXT PRIMARY KEY,
        key TEXT NOT NULL
    );
    CREATE TABLE addresses (
        peer TEXT NOT NULL,
        addr TEXT NOT NULL,
        source TEXT NOT NULL,
        added_at INTEGER NOT NULL,
        last_success INTEGER NOT NULL DEFAULT 0,
        last_error TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (peer, addr)
    );
    CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        peer TEXT NOT NULL,
        id TEXT NOT NULL,
        t TEXT NOT NULL,
        th TEXT NOT NULL DEFAULT '',
        ref TEXT NOT NULL DEFAULT '',
        line TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE INDEX outbox_peer ON outbox (peer, seq);
    CREATE INDEX outbox_peer_th ON outbox (peer, th, id);
    CREATE INDEX outbox_peer_th_t ON outbox (peer, th, t, seq);
    CREATE UNIQUE INDEX outbox_id ON outbox (peer, id);
    CREATE INDEX outbox_created ON outbox (created);
    CREATE TABLE log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        peer TEXT NOT NULL,
        dir TEXT NOT NULL,
        t TEXT NOT NULL,
        id TEXT NOT NULL,
        th TEXT NOT NULL DEFAULT '',
        re TEXT NOT NULL DEFAULT '',
        ts INTEGER NOT NULL,
        at INTEGER NOT NULL,
        line TEXT NOT NULL,
        read INTEGER NOT NULL DEFAULT 0,
        acked INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX log_dedup ON log (peer, dir, id);
    CREATE INDEX log_thread ON log (peer, th, seq);
    CREATE INDEX log_unread ON log (read, dir) WHERE read = 0;
    CREATE TABLE seen (
        peer TEXT NOT NULL,
        th TEXT NOT NULL,
        last_id TEXT NOT NULL,
        updated INTEGER NOT NULL,
        PRIMARY KEY (peer, th)
    );
    CREATE TABLE threads (
        peer TEXT NOT NULL,
        th TEXT NOT NULL,
        subject TEXT NOT NULL DEFAULT '',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        mine TEXT NOT NULL DEFAULT 'open',
        my_note TEXT NOT NULL DEFAULT '',
        my_since INTEGER NOT NULL,
        theirs TEXT NOT NULL DEFAULT 'open',
        their_note TEXT NOT NULL DEFAULT '',
        their_since INTEGER NOT NULL,
        private INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (peer, th)
    );
    CREATE INDEX threads_updated ON threads (updated);
    CREATE INDEX threads_th ON threads (th);
    """,
    # 2: files, grants, served requests.
    """
    CREATE TABLE blobs (
        peer TEXT NOT NULL,
        dir TEXT NOT NULL,
        ref TEXT NOT NULL,
        th TEXT NOT NULL DEFAULT '',
        name TEXT NOT NULL DEFAULT '',
        mime TEXT NOT NULL DEFAULT '',
        size INTEGER NOT NULL DEFAULT -1,
        status TEXT NOT NULL,
        path TEXT NOT NULL DEFAULT '',
        received INTEGER NOT NULL DEFAULT 0,
        next_n INTEGER NOT NULL DEFAULT 0,
        last_seen INTEGER NOT NULL DEFAULT 0,
        msg_id TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        PRIMARY KEY (peer, dir, ref)
    );
    CREATE INDEX blobs_msg ON blobs (peer, msg_id);
    CREATE TABLE grants (
        hash TEXT NOT NULL,
        kind TEXT NOT NULL,
        iss TEXT NOT NULL,
        sub TEXT NOT NULL,
        aud TEXT NOT NULL DEFAULT '',
        caps TEXT NOT NULL,
        exp INTEGER NOT NULL,
        grant TEXT NOT NULL,
        via TEXT NOT NULL DEFAULT '',
        created INTEGER NOT NULL,
        PRIMARY KEY (hash, kind)
    );
    CREATE INDEX grants_sub ON grants (sub);
    CREATE TABLE served (
        peer TEXT NOT NULL,
        req_id TEXT NOT NULL,
        th TEXT NOT NULL,
        cap TEXT NOT NULL,
        status TEXT NOT NULL,
        started INTEGER NOT NULL,
        PRIMARY KEY (peer, req_id)
    );
    ALTER TABLE log ADD COLUMN request TEXT NOT NULL DEFAULT ''
    """,
    # 3: the network view: presence documents and mirrored conversations.
    """
    CREATE TABLE presence (
        origin TEXT PRIMARY KEY,
        name TEXT NOT NULL DEFAULT '',
        seq INTEGER NOT NULL,
        doc TEXT NOT NULL,
        doc_ts INTEGER NOT NULL,
        received INTEGER NOT NULL,
        via TEXT NOT NULL DEFAULT '',
        hops INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX presence_received ON presence (received);
    CREATE TABLE mirrors (
        sharer TEXT NOT NULL,
        id TEXT NOT NULL,
        th TEXT NOT NULL,
        of TEXT NOT NULL DEFAULT '',
        of_name TEXT NOT NULL DEFAULT '',
        subject TEXT NOT NULL DEFAULT '',
        dir TEXT NOT NULL DEFAULT '',
        line TEXT NOT NULL,
        at INTEGER NOT NULL,
        PRIMARY KEY (sharer, id)
    );
    CREATE INDEX mirrors_thread ON mirrors (sharer, th, at)
    """,
    # 4: grants looked up from the keys we honor (issuer, then subject), bounded per
    # sender; grants a key gave itself are no longer kept (they confer nothing).
    """
    DROP INDEX grants_sub;
    CREATE INDEX grants_sub_iss ON grants (sub, iss, exp);
    CREATE INDEX grants_iss ON grants (iss, exp);
    CREATE INDEX grants_via ON grants (via, kind, created);
    CREATE INDEX grants_kind ON grants (kind, exp);
    DELETE FROM grants WHERE kind IN ('held', 'presented') AND iss = sub
    """,
    # 5: what each peer has made us store, kept as it arrives (budgets).  The
    # first fill reads the whole inbound log once; after that, every job that
    # stores a peer's bytes adds them here in its own transaction.
    """
    CREATE TABLE usage (
        peer TEXT PRIMARY KEY,
        log_bytes INTEGER NOT NULL DEFAULT 0,
        blob_bytes INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO usage (peer, log_bytes, blob_bytes)
        SELECT peer, SUM(l), SUM(b) FROM (
            SELECT peer, length(CAST(line AS BLOB)) AS l, 0 AS b FROM log WHERE dir = 'in'
            UNION ALL SELECT sharer, length(CAST(line AS BLOB)), 0 FROM mirrors
            UNION ALL SELECT peer, 0, 256 + CASE WHEN status IN ('pending', 'received',
                'complete') THEN received ELSE 0 END FROM blobs WHERE dir = 'in'
        ) GROUP BY peer
    """,
    # 6: the board (SPEC.md section 14): topic documents, subscriptions with a read
    # mark, records in their signers' exact bytes (``seq`` is arrival order, a cursor
    # for waiters), the queue arbiter's log, and lease operations waiting for the owner.
    """
CREATE TABLE board_topics (
    topic TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    doc TEXT NOT NULL,
    received INTEGER NOT NULL
);
CREATE TABLE board_subs (
    topic TEXT PRIMARY KEY,
    since INTEGER NOT NULL,
    grant TEXT NOT NULL DEFAULT '',
    via TEXT NOT NULL DEFAULT '',
    read_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE board_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    ts INTEGER NOT NULL,
    of TEXT NOT NULL DEFAULT '',
    parent TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL,
    raw TEXT NOT NULL,
    received INTEGER NOT NULL,
    via TEXT NOT NULL DEFAULT '',
    hops INTEGER NOT NULL DEFAULT 0,
    UNIQUE (topic, hash)
);
CREATE INDEX board_records_ts ON board_records (topic, ts, hash);
CREATE TABLE board_queue_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX board_queue_log_topic ON board_queue_log (topic, seq);
CREATE INDEX board_records_hash ON board_records (hash);
CREATE INDEX board_records_of ON board_records (topic, of);
CREATE INDEX board_records_author ON board_records (topic, author, ts);
CREATE INDEX board_records_parent ON board_records (topic, parent);
CREATE TABLE board_usage (
    topic TEXT PRIMARY KEY,
    n INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER board_usage_in AFTER INSERT ON board_records BEGIN
    INSERT INTO board_usage (topic, n, bytes) VALUES (new.topic, 1, new.size)
        ON CONFLICT (topic) DO UPDATE SET n = n + 1, bytes = bytes + new.size;
END;
CREATE TRIGGER board_usage_out AFTER DELETE ON board_records BEGIN
    UPDATE board_usage SET n = n - 1, bytes = bytes - old.size WHERE topic = old.topic;
END;
CREATE TABLE board_pending (
    lease TEXT PRIMARY KEY,
    topic TEXT NOT NULL,
    op TEXT NOT NULL,
    until INTEGER NOT NULL
);
""",
    # 7: which neighbour carries which of our topics (awp/store/links.py): kept so
    # that a relay's link is redialled after a drop or a restart of either side.
    """
CREATE TABLE peer_topics (
    peer TEXT NOT NULL,
    topic TEXT NOT NULL,
    heard INTEGER NOT NULL,
    PRIMARY KEY (peer, topic)
);
CREATE INDEX peer_topics_heard ON peer_topics (heard);
CREATE INDEX peers_last_seen ON peers (last_seen);
""",
    # 8: the topic owner as sequencer (SPEC.md section 14, "The owner stamps"): a
    # record of another author is kept with the owner's stamp (``stamp``, its
    # ``seq``; ``ts`` is then the stamp's time), our own waits for it
    # (``waiting``), and the owner's next seq per topic is kept apart from the
    # records, so that retention can never make it go back.
    """
ALTER TABLE board_records ADD COLUMN sseq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE board_records ADD COLUMN stamp TEXT NOT NULL DEFAULT '';
ALTER TABLE board_records ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
CREATE INDEX board_records_waiting ON board_records (waiting) WHERE waiting = 1;
CREATE TABLE board_stamp_seq (
    topic TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    ts INTEGER NOT NULL
);
""",
    # 9: an ack costs less (issue 21).  A line we log keeps its text in the log
    # alone: its outbox row holds '' and the sender reads the text from the log
    # (``ops.fetch_outbox``), so deleting the acked row touches a few narrow
    # pages instead of a kilobyte a line.  Nor is the log row written again
    # to flag it acked: ``log.acked`` 0 now means "up to the outbox row" for
    # the acked types, and what left the outbox unacked before is marked -1
    # (see ``ops._ACKED_SQL``).  Two indexes every queued row paid
    # for go: the retention sweep (once a minute) scans the outbox instead of
    # keeping it sorted by time, and the cumulative drop of chunks and
    # introductions uses an index of those rows only.
    """
DROP INDEX outbox_created;
DROP INDEX outbox_peer_th_t;
CREATE INDEX outbox_cumulative ON outbox (peer, th, seq) WHERE t IN ('chunk', 'introduce');
UPDATE outbox SET line = '' WHERE line != '' AND EXISTS (SELECT 1 FROM log
    WHERE log.peer = outbox.peer AND log.dir = 'out' AND log.id = outbox.id
    AND log.line = outbox.line);
UPDATE log SET acked = -1 WHERE dir = 'out' AND acked = 0
    AND t IN ('mirror', 'msg', 'private', 'state') AND NOT EXISTS (SELECT 1 FROM outbox
    WHERE outbox.peer = log.peer AND outbox.id = log.id);
""",
    # 10: a board record costs fewer index entries (issue 24).  Every host stores
    # every post, and each index a row is in is another page written to the WAL at
    # commit (then copied back by a checkpoint).  ``board_records_hash`` goes: the
    # only lookup by hash alone (a prefix, from tools) walks the (topic, hash)
    # unique index topic by topic instead.  ``of`` and ``parent`` are '' for
    # nearly every record (a post that is not a reply), so their indexes keep only
    # the records that name another; every query using them says ``of != ''``
    # (or ``parent != ''``), which SQLite needs to use a partial index.
    """
DROP INDEX board_records_hash;
DROP INDEX board_records_of;
DROP INDEX board_records_parent;
CREATE INDEX board_records_of ON board_records (topic, of) WHERE of != '';
CREATE INDEX board_records_parent ON board_records (topic, parent) WHERE parent != '';
""",
    # 11: invites (awp/store/invites.py, issue 33).  ``verifier`` is the BLAKE2b
    # hash of the secret (awp/wire/invite.py), never the secret; each redemption
    # is a row of ``invite_uses``, written in the transaction that spends the
    # use.  ``addresses.hs_ms``: how long the endpoint that last won a dial took
    # from the dial to the peer's resume.
    """
CREATE TABLE invites (
    id TEXT PRIMARY KEY,
    verifier TEXT NOT NULL,
    uses INTEGER NOT NULL,
    uses_left INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    caps TEXT NOT NULL DEFAULT '[]',
    topics TEXT NOT NULL DEFAULT '[]',
    grant_ttl INTEGER NOT NULL,
    created INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX invites_live ON invites (revoked, expires);
CREATE TABLE invite_uses (
    invite TEXT NOT NULL,
    peer TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (invite, peer)
);
ALTER TABLE addresses ADD COLUMN hs_ms INTEGER NOT NULL DEFAULT 0;
""",
    # 12: an owner's statements that cannot both be true (issue 34): two records
    # stamped with one seq, one record stamped twice, two documents with one seq.
    # Both signed statements are kept as evidence (awp/store/board_conflicts.py).
    # The seq index serves the one lookup a stamped record costs: who else holds
    # its seq.  The owner's newest signed head is kept, so that a relay cannot
    # hand an older one to a host that restarted.
    """
CREATE TABLE board_conflicts (
    topic TEXT NOT NULL,
    kind TEXT NOT NULL,
    ref TEXT NOT NULL,
    a TEXT NOT NULL,
    b TEXT NOT NULL,
    found INTEGER NOT NULL,
    PRIMARY KEY (topic, kind, ref)
);
CREATE INDEX board_records_sseq ON board_records (topic, sseq) WHERE sseq > 0;
CREATE TABLE board_heads (
    topic TEXT PRIMARY KEY,
    ts INTEGER NOT NULL,
    doc TEXT NOT NULL
);
""",
    # 13: key rotation (issue 35, awp/store/rotations.py).  ``rotations``: every
    # record we took of a peer's key moving (one per old key: a second is a
    # conflict, kept in ``rotation_conflicts``); ``rotation_owed``: peers that
    # have not yet taken our own newest record.  On ``peers``: the key the peer
    # committed to rotate to next (announced in auth), the key it rotated from,
    # and the key the user checked the safety number of (``awp verify --mark``).
    """
CREATE TABLE rotations (
    old TEXT PRIMARY KEY,
    new TEXT NOT NULL,
    seq INTEGER NOT NULL,
    next TEXT NOT NULL,
    rec TEXT NOT NULL,
    received INTEGER NOT NULL
);
CREATE INDEX rotations_new ON rotations (new);
CREATE TABLE rotation_conflicts (
    old TEXT NOT NULL,
    a TEXT NOT NULL,
    b TEXT NOT NULL,
    found INTEGER NOT NULL,
    PRIMARY KEY (old, b)
);
CREATE TABLE rotation_owed (
    peer TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
ALTER TABLE peers ADD COLUMN next_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE peers ADD COLUMN rotated_from TEXT NOT NULL DEFAULT '';
ALTER TABLE peers ADD COLUMN verified TEXT NOT NULL DEFAULT '';
ALTER TABLE peers ADD COLUMN verified_at INTEGER NOT NULL DEFAULT 0;
""",
    # 14: operator keys (issue 35, awp/store/operators.py).  ``operators``: the
    # operator keys the user trusts (``awp trust``); ``op_revocations``: the
    # newest revocation we hold of each (operator, device), trusted or not, so
    # that we pass it on; on ``peers``: the certificate it showed at its last
    # handshake, as canonical JSON.
    """
CREATE TABLE operators (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    added INTEGER NOT NULL
);
CREATE TABLE op_revocations (
    op TEXT NOT NULL,
    device TEXT NOT NULL,
    ts INTEGER NOT NULL,
    rec TEXT NOT NULL,
    received INTEGER NOT NULL,
    PRIMARY KEY (op, device)
);
ALTER TABLE peers ADD COLUMN opcert TEXT NOT NULL DEFAULT '';
""",
    # 15: bulk transfer (issue 36, awp/store/bulk.py).  One row per file sent or
    # received the bulk way, beside its ``blobs`` row: the piece size, the piece
    # hashes and root it is checked against, which pieces are verified on disk
    # (``have``, one bit a piece), and what crossed: pieces served or asked for,
    # refetched after a failed check, and side-connection bytes.
    """
CREATE TABLE bulk (
    peer TEXT NOT NULL,
    dir TEXT NOT NULL,
    ref TEXT NOT NULL,
    size INTEGER NOT NULL,
    piece INTEGER NOT NULL,
    root TEXT NOT NULL,
    hashes BLOB NOT NULL,
    have BLOB NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    served INTEGER NOT NULL DEFAULT 0,
    refetched INTEGER NOT NULL DEFAULT 0,
    wire INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    PRIMARY KEY (peer, dir, ref)
);
""",
    # 15: key links, statements that several keys are one identity (awp/store/keylinks.py)
    """
CREATE TABLE IF NOT EXISTS keylinks (
    id TEXT PRIMARY KEY,
    keys TEXT NOT NULL,
    ts INTEGER NOT NULL,
    raw TEXT NOT NULL,
    mine INTEGER NOT NULL DEFAULT 0,
    created INTEGER NOT NULL
);
""",
]

BOARD_MIGRATION = 5  # index in MIGRATIONS of the board's tables
STAMP_MIGRATION = 7  # the columns and table of the owner's stamps
LEAN_MIGRATION = 9  # the board's leaner indexes
CONFLICT_MIGRATION = 11  # the owner's conflicting statements, and its newest head
OPERATOR_MIGRATION = 13  # trusted operators, revocations, the certificate a peer showed
BULK_MIGRATION = 14  # bulk transfer: pieces, hashes and progress (awp/store/bulk.py)
KEYLINK_MIGRATION = 15  # key links: keys that are one identity (awp/store/keylinks.py)
