"""Names of keys this host has heard of but never met, from what those keys signed.

A host two hops from a topic's owner holds the owner's signed topic
document, and (with presence on) the signed presence documents of hosts far
across the mesh, but no ``peers`` row for them: ``awp work alice/jobs`` said
"unknown peer 'alice'".  Each source here is a statement signed by the key it
names, so the name is the key's own claim, exactly as a met peer's hello
name is: taken as that, shown as heard of (never as met), and never picked
when two keys claim one name.
"""

from __future__ import annotations

import json
import sqlite3

from ..wire.names import clean_name, name_fold

PRESENCE = "presence"
TOPIC = "topic document"
LEASE = "lease record"  # the name a worker signed in its ask, as the queue's owner passes it on
LEASE_ROWS = 20  # newest lease records looked at for one key's name


def heard_names(c: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """``(key, name, source)`` for every signed name held, met peers' included."""
    out = [(k, clean_name(n), PRESENCE) for k, n in c.execute(
        "SELECT origin, name FROM presence WHERE name != ''")]
    for owner, doc in c.execute("SELECT owner, doc FROM board_topics"):
        try:
            name = json.loads(doc).get("owner_name")
        except (ValueError, AttributeError):
            continue
        if isinstance(name, str) and clean_name(name):
            out.append((owner, clean_name(name), TOPIC))
    return [(k, n, s) for k, n, s in out if n]


def heard_as(c: sqlite3.Connection, ref: str) -> dict[str, list[str]]:
    """``{key: [sources]}`` of the keys whose signed name folds like ``ref``."""
    fold = name_fold(ref)
    found: dict[str, list[str]] = {}
    if not fold:
        return found
    for key, name, source in heard_names(c):
        if name_fold(name) == fold and source not in found.setdefault(key, []):
            found[key].append(source)
    return found


def heard_name(c: sqlite3.Connection, key: str) -> tuple[str, str] | None:
    """``(name, source)`` a key signed for itself, presence first, or None."""
    row = c.execute("SELECT name FROM presence WHERE origin = ? AND name != ''",
                    (key,)).fetchone()
    if row and clean_name(row[0]):
        return clean_name(row[0]), PRESENCE
    for (doc,) in c.execute("SELECT doc FROM board_topics WHERE owner = ?", (key,)):
        try:
            name = json.loads(doc).get("owner_name")
        except (ValueError, AttributeError):
            continue
        if isinstance(name, str) and clean_name(name):
            return clean_name(name), TOPIC
    return _lease_name(c, key)


def _lease_name(c: sqlite3.Connection, key: str) -> tuple[str, str] | None:
    """The holder's name in the newest lease record naming it (display only).

    The worker signed that name in its ask, but the record is the owner's: the
    name is shown, never used to resolve one typed by the user.
    """
    pattern = '%"holder":' + json.dumps(key) + '%'
    for (raw,) in c.execute("SELECT raw FROM board_records WHERE kind = 'lease' AND raw LIKE ?"
                            " ORDER BY seq DESC LIMIT ?", (pattern, LEASE_ROWS)):
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        name = doc.get("holder_name") if isinstance(doc, dict) and doc.get("holder") == key \
            else None
        if isinstance(name, str) and clean_name(name):
            return clean_name(name), LEASE
    return None


def heard_names_of(c: sqlite3.Connection, keys: set[str]) -> dict[str, tuple[str, str]]:
    """:func:`heard_name` for many keys in one pass over each source, in its order
    (presence, topic documents, lease records): the dashboard names hundreds at a time."""
    out: dict[str, tuple[str, str]] = {}
    for key, name in c.execute("SELECT origin, name FROM presence WHERE name != ''"):
        if key in keys and key not in out and clean_name(name):
            out[key] = clean_name(name), PRESENCE
    for key, name in c.execute("SELECT owner, CASE WHEN json_valid(doc) THEN"
                               " json_extract(doc, '$.owner_name') END FROM board_topics"):
        if key in keys and key not in out and isinstance(name, str) and clean_name(name):
            out[key] = clean_name(name), TOPIC
    rest = keys - out.keys()
    if rest:
        for key, name in c.execute(
                "SELECT json_extract(raw, '$.holder'), json_extract(raw, '$.holder_name')"
                " FROM board_records WHERE kind = 'lease' AND raw LIKE '%\"holder_name\"%'"
                " AND json_valid(raw) ORDER BY seq DESC"):
            if key in rest and isinstance(name, str) and clean_name(name):
                out[key] = clean_name(name), LEASE
                rest.discard(key)
                if not rest:
                    break
    return out
