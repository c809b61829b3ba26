"""Board records (extension ``board``, draft): topics, posts and what supersedes them.

Every record is a JSON object signed by one key over its canonical JSON
without ``sig`` (as presence documents and grants are) and relayed byte for
byte.  A record's name is its *hash*: the hex of the first 16 bytes of the
SHA-256 of its canonical JSON, signature included.  Naming records by content
means no author can take over another's id, and every host derives the same
name without being told; keys and signatures must be in their one canonical
spelling so that a relay cannot re-encode a record into a second name.

Kinds (field ``k``): ``topic`` (the owner's policy, newest ``seq`` wins),
``post``, ``edit`` and ``delete`` (by an author, about its own post),
``hide`` (by the owner, about any record), ``lease`` (by the owner: the
work-queue arbiter's decisions) and ``stamp`` (by the owner: its admission
of another author's record, with the topic's arrival ``seq``).
:func:`check_record` is the one gate for hostile input: it returns a
:class:`Record` or raises :class:`BoardError`, and nothing else.

Why one module: it is the board's wire format, one table: every record kind
and every signed object that crosses the wire (asks, heads, refusals) with
its one checker, sharing the canonical spellings above, read together as
SPEC.md section 14's tables are.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from json.decoder import scanstring as _scanstring

from . import rotation
from .canonical import canonical_bytes, compact_json
from .grants import grant_hash
from .keys import KEY_PREFIX, Identity, KeyError_, decode_key, encode_key, verify
from .strictjson import DECODER
from .timefmt import format_ts, parse_ts

CAP = "board"
KINDS = ("topic", "post", "edit", "delete", "hide", "lease", "stamp")
PARTED = ("post", "edit")  # kinds that carry parts
TARGETED = ("edit", "delete", "hide", "lease", "stamp")  # kinds that name another record in ``of``

MAX_RECORD = 64 * 1024  # any record's raw bytes: a fixed protocol bound
MAX_PARTS = 16
MAX_TITLE = 200
MAX_OWNER_NAME = 64  # the owner's own name, signed in its topic documents
MAX_LIST = 256  # entries in a topic's ``revoked`` and ``banned``
MAX_MEMBERS = 512  # entries in a topic's ``members`` (the document stays within 64 KiB)
FUTURE_MS = 5 * 60 * 1000  # a record dated further ahead than this is not taken yet
NAME_MAX = 64
OWNER_KINDS = ("topic", "hide", "lease", "stamp")  # kinds only the topic's owner signs
MAX_SEQ = 2 ** 53  # a stamp's ``seq`` stays an exact integer in any JSON reader
LEASE_STATES = ("claimed", "renewed", "released", "done", "failed", "expired")
LEASE_MAX = 64  # characters of a lease id: what a lease record may carry
REQ_MAX = 64  # characters of a claim's retry id (SPEC.md, board-claim)

# Policy defaults a topic document may lower (or raise up to the fixed bounds).
DEFAULT_KEEP = 10_000
MAX_KEEP = 1_000_000
DEFAULT_KEEP_DAYS = 30
MAX_KEEP_DAYS = 3650
DEFAULT_KEEP_BYTES = 64 * 1024 * 1024
MAX_KEEP_BYTES = 1024 * 1024 * 1024
DEFAULT_RATE = 60  # records per author per minute (of record time)
MAX_RATE = 6000
DEFAULT_LEASE_S = 300
MAX_LEASE_S = 86_400
DEFAULT_ATTEMPTS = 3

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z", re.ASCII)
MAX_TAGS = 16  # tags in an item's ``needs`` (and a claimant's ``offers``)
TAG_MAX = 32
_TAG = re.compile(r"[a-z0-9][a-z0-9._:+-]{0,31}\Z", re.ASCII)
_HASH = re.compile(r"[0-9a-f]{32}\Z", re.ASCII)
_SIG = re.compile(r"[A-Za-z0-9_-]{86}\Z", re.ASCII)


class BoardError(ValueError):
    """A board record, topic name or capability that is not acceptable, and why."""


class Known(BoardError):
    """The record is one the host already holds (raised by a ``before_sig`` hook)."""


# -- topic names and capabilities --------------------------------------------------------


def parse_topic(text: object) -> tuple[str, str]:
    """``(owner key, name)`` of ``ed25519:<key>/<name>``; :class:`BoardError` otherwise.

    Names are ASCII lowercase letters, digits, ``.``, ``_`` and ``-``, 1 to 64
    characters, starting with a letter or digit: no look-alikes, no case
    folding, and the owner key makes squatting impossible.
    """
    if isinstance(text, str):
        found = _KNOWN_TOPICS.get(text)
        if found is not None:  # every record names its topic: a host holds few
            return found
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX) or "/" not in text:
        raise BoardError("topic must be ed25519:<owner key>/<name>")
    owner, name = text.split("/", 1)
    _canonical_key(owner, "topic owner")
    if not _NAME.match(name):
        raise BoardError("topic name: 1-64 of a-z 0-9 . _ -, starting with a letter or digit")
    if len(_KNOWN_TOPICS) >= _MAX_KNOWN_KEYS:
        _KNOWN_TOPICS.clear()
    _KNOWN_TOPICS[text] = (owner, name)
    return owner, name


def topic_id(owner: str, name: str) -> str:
    parse_topic(f"{owner}/{name}")
    return f"{owner}/{name}"


def read_cap(topic: str) -> str:
    """The grant capability that lets its subject receive ``topic``."""
    parse_topic(topic)
    return "board:read:" + topic


def post_cap(topic: str) -> str:
    """The grant capability that lets its subject post to ``topic``."""
    parse_topic(topic)
    return "board:post:" + topic


def cap_covers(cap: str, what: str, topic: str) -> bool:
    """Whether grant capability ``cap`` allows ``what`` (read/post) on ``topic``.

    ``board:post:<owner>/*`` covers every topic of that owner; ``post`` also
    covers ``read`` (whoever may write a topic may see it).
    """
    if not isinstance(cap, str) or not cap.startswith("board:"):
        return False
    verb, _, scope = cap[len("board:"):].partition(":")
    if verb not in ("read", "post") or (what == "post" and verb != "post"):
        return False
    if scope == topic:
        return True
    owner, _, name = scope.partition("/")
    return name == "*" and topic.startswith(owner + "/")


_KNOWN_KEYS: set[str] = set()  # keys already found canonical: a topic has few authors
_KNOWN_TOPICS: dict[str, tuple[str, str]] = {}  # topic names already found well-formed
_MAX_KNOWN_KEYS = 4096


def _canonical_key(value: object, field: str) -> str:
    if isinstance(value, str) and value in _KNOWN_KEYS:  # each record names owner, author
        return value  # type: ignore[return-value]
    try:
        raw = decode_key(value)
    except KeyError_ as e:
        raise BoardError(f"{field}: {e}") from None
    if encode_key(raw) != value:
        raise BoardError(f"{field}: not in canonical form")
    if len(_KNOWN_KEYS) >= _MAX_KNOWN_KEYS:
        _KNOWN_KEYS.clear()
    _KNOWN_KEYS.add(value)  # type: ignore[arg-type]
    return value  # type: ignore[return-value]


# -- records -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A checked record: the signed document, its exact text and what hosts index."""

    doc: dict
    raw: str  # the exact text as received or signed (relayed as is)
    hash: str
    kind: str
    topic: str
    owner: str
    author: str  # the signer (the owner for ``topic``, ``hide`` and ``lease``)
    ts: int  # ms
    of: str = ""  # the record an edit/delete/hide/lease is about
    parent: str = ""  # a post's parent (replies)
    # The canonical JSON of the members before and after ``sig``, kept by the parse
    # that named the record, so that verifying it later encodes nothing again.
    halves: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.raw) if self.raw.isascii() else len(self.raw.encode("utf-8"))

    def at(self, ts: int) -> Record:
        """The same record at time ``ts`` (another author's takes its stamp's time).

        Without :attr:`halves`: it no longer stands for its text alone, so it is
        never remembered as that text's record (:func:`_verified`)."""
        return Record(self.doc, self.raw, self.hash, self.kind, self.topic, self.owner,
                      self.author, ts, self.of, self.parent, None)


def record_hash(doc: dict) -> str:
    return hashlib.sha256(canonical_bytes(doc)).digest()[:16].hex()


# canonical_json's form (awp.wire.canonical), with the encoder built once
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)


def _halves(doc: dict) -> tuple[str, str]:
    """The canonical JSON members of ``doc`` sorted before ``sig``, and after it.

    A record's name covers its canonical JSON with ``sig`` and its signature
    the same without: both are these two pieces joined, so a record that is
    named and verified is encoded once, not twice.
    """
    lo = _CANON.encode({k: v for k, v in doc.items() if k < "sig"})
    hi = _CANON.encode({k: v for k, v in doc.items() if k > "sig"})
    return lo[1:-1], hi[1:-1]


def _joined(halves: tuple[str, str], sig: str | None) -> bytes:
    """Canonical JSON from :func:`_halves`, with ``sig`` (checked to need no escape)
    or without."""
    parts = [p for p in (halves[0], f'"sig":"{sig}"' if sig is not None else "", halves[1])
             if p]
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def sign_record(identity: Identity, doc: dict) -> Record:
    """Sign ``doc`` (``sig`` replaced) and check the result as any host would.

    Every check but the signature's: the signature was made here, with the
    key it names, so verifying it would only cost time. A signer whose key
    does not match the record's author or owner still fails, by that check.
    """
    body = {k: v for k, v in doc.items() if k != "sig"}
    body["sig"] = identity.sign(canonical_bytes(body))
    signer = identity.key

    def ours(kind: str, topic: str, author: str, ts: int, h: str) -> None:
        if author != signer:
            raise BoardError(f"a {kind} record signed by another key than its author's")

    return check_record(compact_json(body), ours, _signed=True)


def make_topic(owner: Identity, name: str, seq: int, ts_ms: int, *, topic_owner: str = "",
               rotation: list[dict] | None = None, **policy: object) -> Record:
    """The owner's signed topic document; ``policy`` fields as in SPEC.md.

    ``topic_owner``: the key the topic is named by, when the signer is the key
    it rotated to; the document then names its signer (``author``) and carries
    the ``rotation`` records from the one to the other, so a host that never
    met the owner can check the succession from the document alone.
    """
    doc: dict = {"k": "topic", "topic": topic_id(topic_owner or owner.key, name), "seq": seq,
                 "ts": format_ts(ts_ms)}
    doc.update({k: v for k, v in policy.items() if v is not None})
    if topic_owner and topic_owner != owner.key:
        doc["author"] = owner.key
        doc["rotation"] = list(rotation or [])
    return sign_record(owner, doc)


# -- owners that rotated their key ----------------------------------------------------
#
# A topic is named by its owner's key for good (every record names the topic,
# and record hashes cover that name), so when the owner rotates its key the
# topic keeps its name and its owner's records come signed by the new key.
# A host accepts them once it holds the rotation, as a verified record (from
# a link's auth, from presence, or from the topic document itself).  These are
# signed facts, the same for every reader, so they are kept process-wide.

_HEIRS: dict[str, str] = {}  # a key -> the key it rotated to (checked records only)
_MAX_LINEAGE = 64  # keys followed from one owner (chains are bounded far below this)


def learn_rotation(old: str, new: str) -> bool:
    """Hold the checked rotation ``old`` -> ``new``; False when ``old`` is held as
    rotated to another key (the first one held stands)."""
    held = _HEIRS.setdefault(old, new)
    return held == new


def lineage(owner: str) -> list[str]:
    """``owner`` and every key it rotated to since, oldest first."""
    out = [owner]
    while out[-1] in _HEIRS and len(out) < _MAX_LINEAGE:
        nxt = _HEIRS[out[-1]]
        if nxt in out:
            break
        out.append(nxt)
    return out


def is_owner(owner: str, key: str) -> bool:
    """Whether ``key`` speaks for the topics of ``owner``: it is that key, or one
    that key rotated to."""
    return key == owner or (owner in _HEIRS and key in lineage(owner))


def owned_by(topic: str, key: str) -> bool:
    """Whether ``key`` owns ``topic``: the topic is named by it, or by a key that
    rotated to it."""
    if topic.startswith(key + "/"):
        return True
    return bool(_HEIRS) and is_owner(topic.split("/", 1)[0], key)


def current_owner(owner: str) -> str:
    """The newest key ``owner`` is known to have rotated to (``owner`` itself if none)."""
    return lineage(owner)[-1] if owner in _HEIRS else owner


def former_keys(key: str) -> list[str]:
    """The keys known to have rotated, step by step, to ``key``."""
    back = {new: old for old, new in _HEIRS.items()}
    out: list[str] = []
    while key in back and len(out) < _MAX_LINEAGE:
        key = back[key]
        if key in out:
            break
        out.append(key)
    return out


def _take_chain(chain: object, owner: str, author: str) -> None:
    """The ``rotation`` of a topic document signed by ``author`` for ``owner``'s topic."""
    try:
        rots = rotation.follow(chain, owner)
    except rotation.RotationError as e:
        raise BoardError(f"the topic document's rotation: {e}") from None
    if rots[-1].new != author:
        raise BoardError("the topic document's rotation does not end at its signer")
    for r in rots:
        if not learn_rotation(r.old, r.new):
            raise BoardError(f"the topic document's rotation conflicts with one held here"
                             f" ({r.old} rotated to {_HEIRS[r.old]})")


def make_post(author: Identity, topic: str, parts: list[dict], ts_ms: int, *,
              parent: str = "", grant: dict | None = None, via: dict | None = None) -> Record:
    doc: dict = {"k": "post", "topic": topic, "author": author.key, "ts": format_ts(ts_ms),
                 "parts": parts}
    if parent:
        doc["parent"] = parent
    _add_authority(doc, grant, via)
    return sign_record(author, doc)


def make_edit(author: Identity, of: Record, parts: list[dict], ts_ms: int, *,
              grant: dict | None = None, via: dict | None = None) -> Record:
    doc: dict = {"k": "edit", "topic": of.topic, "author": author.key,
                 "ts": format_ts(ts_ms), "of": of.hash, "parts": parts}
    _add_authority(doc, grant, via)
    return sign_record(author, doc)


def make_delete(author: Identity, of: Record, ts_ms: int) -> Record:
    return sign_record(author, {"k": "delete", "topic": of.topic, "author": author.key,
                                "ts": format_ts(ts_ms), "of": of.hash})


def make_hide(owner: Identity, of: Record, ts_ms: int) -> Record:
    return sign_record(owner, {"k": "hide", "topic": of.topic, "author": owner.key,
                               "ts": format_ts(ts_ms), "of": of.hash})


def make_lease(owner: Identity, topic: str, item: str, holder: str, state: str,
               lease: str, until_ms: int, ts_ms: int, holder_name: str = "") -> Record:
    """A lease record; ``holder_name`` is the name the holder signed in its ask (or its
    hello, met directly), so hosts that never met the holder show who works the item."""
    doc = {"k": "lease", "topic": topic, "author": owner.key, "ts": format_ts(ts_ms),
           "of": item, "holder": holder, "state": state, "lease": lease,
           "until": format_ts(until_ms)}
    if holder_name:
        doc["holder_name"] = holder_name[:MAX_OWNER_NAME]
    return sign_record(owner, doc)


def make_stamp(owner: Identity, topic: str, of: str, seq: int, ts_ms: int) -> Record:
    """The owner's stamp on another author's record: admitted as ``seq`` at ``ts_ms``.

    The stamp names the record by hash and travels beside it (just before
    it in a ``board-posts`` line), so the record itself stays in its
    author's exact bytes (SPEC.md section 14, "The owner stamps").
    """
    return sign_record(owner, {"k": "stamp", "topic": topic, "author": owner.key,
                               "ts": format_ts(ts_ms), "of": of, "seq": seq})


def _add_authority(doc: dict, grant: dict | None, via: dict | None) -> None:
    if grant is not None:
        doc["grant"] = grant
    if via is not None:
        doc["via"] = via


def check_record(raw: object,
                 before_sig: Callable[[str, str, str, int, str], None] | None = None,
                 *, _signed: bool = False, doc: object = None) -> Record:
    """Parse and verify one record's exact text; :class:`BoardError` says why not.

    Checks, cheapest first: size, JSON object, kind, topic, signer, ``ts``,
    the fields of the kind, then the signature.  ``before_sig(kind, topic,
    author, ts, hash)`` runs just before the signature check and may raise
    :class:`BoardError` (:class:`Known` for a record already held): a host
    skips duplicates and refuses banned or flooding authors there, without
    paying for a signature check per record.  Whether the signer may
    post there is the permission module's question, not this one's.
    ``doc``: ``raw`` already decoded by the caller with
    :data:`~awp.wire.strictjson.DECODER` (:func:`posts_recs` does), so it is
    not decoded twice.

    The same text checked again (a record relayed to us on a second path) is
    a look-up: a record whose signature verified is remembered by its text
    (:data:`_CHECKED`), and only ``before_sig`` runs again, which turns it
    away as already held.
    """
    if type(raw) is str:
        seen = _CHECKED.get(raw)
        if seen is not None:
            if before_sig is not None:
                before_sig(seen.kind, seen.topic, seen.author, seen.ts, seen.hash)
            return seen
    if not isinstance(raw, str):
        raise BoardError("record is not text")
    if len(raw) > MAX_RECORD:
        raise BoardError("record over 64 KiB")
    try:
        size = len(raw) if raw.isascii() else len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise BoardError("record is not valid UTF-8 text") from None
    if size > MAX_RECORD:
        raise BoardError("record over 64 KiB")
    if doc is None:
        try:
            doc = DECODER.decode(raw)
        except (ValueError, RecursionError) as e:
            raise BoardError(f"not JSON: {str(e)[:80]}") from None
    if not isinstance(doc, dict):
        raise BoardError("record is not an object")
    kind = doc.get("k")
    if kind not in KINDS:
        raise BoardError("unknown record kind")
    owner, _name = parse_topic(doc.get("topic"))
    author = (_canonical_key(doc.get("author"), "author") if kind != "topic" or "author" in doc
              else owner)
    if kind in OWNER_KINDS and author != owner:
        if kind == "topic" and "rotation" in doc:
            _take_chain(doc["rotation"], owner, author)
        if not is_owner(owner, author):
            raise BoardError(f"a {kind} record is signed by the topic's owner (or by a key"
                             " it rotated to, with the rotation known here)")
    try:
        ts = parse_ts(doc.get("ts"))  # type: ignore[arg-type]
    except ValueError:
        raise BoardError("bad ts") from None
    of = _check_kind(kind, doc)
    parent = doc.get("parent", "")
    if kind == "post" and parent != "" and not _is_hash(parent):
        raise BoardError("parent must be a record hash")
    sig = doc.get("sig")
    if not isinstance(sig, str) or not _SIG.match(sig):
        raise BoardError("sig must be 86 characters of unpadded base64url")
    try:
        halves = _halves(doc)
        name = hashlib.sha256(_joined(halves, sig)).digest()[:16].hex()
    except (TypeError, ValueError, RecursionError):
        raise BoardError("not canonicalisable") from None
    if before_sig is not None:
        before_sig(kind, doc["topic"], author, ts, name)
    if not _signed and not verify(author, _joined(halves, None), sig):
        raise BoardError("signature does not verify")
    rec = Record(doc=doc, raw=raw, hash=name, kind=kind, topic=doc["topic"], owner=owner,
                 author=author, ts=ts, of=of, parent=parent if kind == "post" else "",
                 halves=halves)
    if not _signed:
        _verified(rec)
    return rec


# Records whose signature verified lately: their hashes (:data:`_VERIFIED`), and the
# records by their exact text (:data:`_CHECKED`).  A record reaches a host once a
# path: the first copy is parsed and verified, the others cost a look-up each.  Only
# verified records are kept, so a forgery fills nothing; a peer can still sign
# records of its own, so both are bounded, the oldest going first, the texts also by
# their bytes (a record may be 64 KiB).
MAX_CHECKED = 1024
MAX_CHECKED_CHARS = 4 * 1024 * 1024
MAX_VERIFIED = 8192
_CHECKED: dict[str, Record] = {}
_VERIFIED: dict[str, None] = {}
_checked_chars = 0


def _verified(rec: Record) -> None:
    """Remember that ``rec``'s signature verified (its hash, and its text)."""
    global _checked_chars
    if len(_VERIFIED) >= MAX_VERIFIED:
        del _VERIFIED[next(iter(_VERIFIED))]
    _VERIFIED[rec.hash] = None
    raw = rec.raw
    # Only a record as its text was parsed (with its halves): not one read from the
    # store, nor one moved to its stamp's time (Record.at).
    if rec.halves is None or raw in _CHECKED or len(raw) > MAX_CHECKED_CHARS // 16:
        return
    while _CHECKED and (len(_CHECKED) >= MAX_CHECKED
                        or _checked_chars + len(raw) > MAX_CHECKED_CHARS):
        _checked_chars -= len(_CHECKED.pop(next(iter(_CHECKED))).raw)
    _CHECKED[raw] = rec
    _checked_chars += len(raw)


def parse_unverified(raw: object,
                     before_sig: Callable[[str, str, str, int, str], None] | None = None,
                     doc: object = None) -> Record:
    """:func:`check_record` without the signature check, which the caller makes later
    (:func:`verify_record`) only for what it keeps: a relay skips verifying the
    owner's stamp of a record it already holds."""
    return check_record(raw, before_sig, _signed=True, doc=doc)


def line_recs(line: str, limit: int) -> list[tuple[str, object]] | None:
    """``(exact text, decoded value)`` of each element of the top-level ``recs`` array
    of a ``board-posts`` or ``board-submit`` line; None when the line has no such
    array, or more than ``limit`` elements.

    One pass, each record decoded once (with the strict decoder, as
    :func:`check_record` would, which then takes the value as it is): a record
    is relayed as its exact bytes, so its text is cut from the line, and
    decoding it a second time to check it was a good part of what a relay
    spent on it.  When ``recs`` appears twice the last counts, as in the
    parsed line.
    """
    found = _last_recs(line, limit)
    if found is not None:
        return found
    scan = DECODER.raw_decode
    ws = _WS_RUN.match
    i = ws(line, 0).end()
    if line[i:i + 1] != "{":
        return None
    found: list[tuple[str, object]] | None = None
    try:
        while True:
            i = ws(line, i + 1).end()
            if line[i:i + 1] != '"':
                return None
            key, i = _scanstring(line, i + 1)
            i = ws(line, i).end()
            if line[i:i + 1] != ":":
                return None
            i = ws(line, i + 1).end()
            if key != "recs":
                _val, i = scan(line, i)
            elif line[i:i + 1] != "[":
                return None
            else:  # the records, each cut and decoded once
                got = _array_items(line, i + 1, limit)
                if got is None:
                    return None
                found, i = got
            i = ws(line, i).end()
            sep = line[i:i + 1]
            if sep == "}":
                return found
            if sep != ",":
                return None
    except (ValueError, RecursionError):
        return None


_WS_RUN = re.compile(r"[ \t\r\n]*")
_RECS = '"recs":['


def _last_recs(line: str, limit: int) -> list[tuple[str, object]] | None:
    """:func:`line_recs` for a line whose last member is ``recs`` (as every line we
    write), found without scanning the members before it; None for any other.

    In valid JSON ``"recs":[`` can only be a key with an array value (a quote
    inside a string is escaped), though maybe a nested one; it is the
    line's own when its array closes the line, since a nested array would
    be followed by the rest of the object holding it.
    """
    i = line.find(_RECS)
    if i < 0:
        return None
    got = _array_items(line, i + len(_RECS), limit)
    if got is None:
        return None
    out, i = got
    return out if line[i:].strip(_WS) == "}" else None


def _array_items(line: str, i: int, limit: int) -> tuple[list[tuple[str, object]], int] | None:
    """The items of the JSON array whose ``[`` ends just before ``line[i]``, each
    as (its text, its value), and the index past its ``]``; None when it is not
    a well-formed array or holds more than ``limit`` items."""
    scan = DECODER.raw_decode
    ws = _WS_RUN.match
    out: list[tuple[str, object]] = []
    try:
        i = ws(line, i).end()
        if line[i:i + 1] == "]":
            return out, i + 1
        while True:
            start = i
            val, i = scan(line, i)
            out.append((line[start:i], val))
            if len(out) > limit:
                return None
            if line[i:i + 1] != ",":  # the common case needs no whitespace scan
                i = ws(line, i).end()
                if line[i:i + 1] == "]":
                    return out, i + 1
                if line[i:i + 1] != ",":
                    return None
            i = ws(line, i + 1).end()
    except (ValueError, RecursionError):
        return None


_WS = " \t\r\n"


def verify_record(rec: Record) -> bool:
    """Whether ``rec``'s signature verifies (for records parsed unverified).

    Checked once a record: its hash names its content and signature, so a
    record whose signature verified before (:data:`_VERIFIED`) is not checked
    again."""
    if rec.hash in _VERIFIED:
        return True
    if rec.halves is not None:
        signed = _joined(rec.halves, None)
    else:
        signed = canonical_bytes({k: v for k, v in rec.doc.items() if k != "sig"})
    if not verify(rec.author, signed, rec.doc["sig"]):
        return False
    _verified(rec)
    return True


def check_tags(value: object, what: str) -> tuple[str, ...]:
    """A list of at most :data:`MAX_TAGS` tags (lowercase ASCII, 1-32 characters), sorted.

    The market's vocabulary (an item's ``needs``, a worker's ``offers``):
    duplicates fold, and the order they were given in does not matter.
    """
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise BoardError(f"{what}: a list of at most {MAX_TAGS} tags")
    for t in value:
        if not isinstance(t, str) or not _TAG.match(t):
            raise BoardError(f"{what}: each tag is 1-{TAG_MAX} of a-z 0-9 . _ : + -,"
                             " starting with a letter or digit")
    return tuple(sorted(set(value)))


def check_lease_id(value: object) -> str:
    """A lease id as a local caller gives it, checked before anything is sent or kept.

    An owner only hands out ids a lease record can carry (1 to :data:`LEASE_MAX`
    printable characters, no spaces), so anything else cannot name a lease:
    refusing it here keeps an oversized or garbled id from being queued
    towards the owner, where its line would be refused on every reconnect.
    """
    if not isinstance(value, str) or not value:
        raise BoardError("which lease? (awp claim printed it)")
    return _opaque_id(value, "lease", LEASE_MAX, "this is not a lease id an owner hands out")


def check_req_id(value: object) -> str:
    """A claim's retry id (``req``) from a local caller: ``""`` (one is made) or a short id."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise BoardError("req must be a string")
    return _opaque_id(value, "req", REQ_MAX, "the owner keeps no longer retry id")


def _opaque_id(value: str, what: str, most: int, why: str) -> str:
    if len(value) > most:
        raise BoardError(f"{what}: at most {most} characters ({why})")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise BoardError(f"{what}: printable characters without spaces")
    return value


def is_hash(v: object) -> bool:
    """Whether ``v`` is spelled as a record hash (32 lowercase hex characters)."""
    return isinstance(v, str) and bool(_HASH.match(v))


_is_hash = is_hash


def _check_kind(kind: str, doc: dict) -> str:
    """The kind's own fields; returns ``of`` (or "")."""
    if kind == "topic":
        check_policy(doc)
        return ""
    if kind in PARTED:
        parts = doc.get("parts")
        if (not isinstance(parts, list) or not parts or len(parts) > MAX_PARTS
                or not all(isinstance(p, dict) and isinstance(p.get("k"), str) for p in parts)):
            raise BoardError(f"parts: 1-{MAX_PARTS} objects, each with a kind k")
        for f in ("grant", "via"):
            if f in doc and not isinstance(doc[f], dict):
                raise BoardError(f"{f} must be a grant object")
        if "via" in doc and "grant" not in doc:
            raise BoardError("via without grant")
    if kind == "post" and "needs" in doc:
        check_tags(doc["needs"], "needs")
    of = doc.get("of", "")
    if kind in TARGETED and not _is_hash(of):
        raise BoardError("of must be a record hash")
    if kind == "stamp":
        seq = doc.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq < MAX_SEQ:
            raise BoardError("a stamp's seq must be a positive integer")
    if kind == "lease":
        _canonical_key(doc.get("holder"), "holder")
        if doc.get("state") not in LEASE_STATES:
            raise BoardError("unknown lease state")
        if not isinstance(doc.get("lease"), str) or not 0 < len(doc["lease"]) <= LEASE_MAX:
            raise BoardError("lease must name the lease")
        name = doc.get("holder_name", "")
        if not isinstance(name, str) or len(name) > MAX_OWNER_NAME:
            raise BoardError(f"holder_name: a string of at most {MAX_OWNER_NAME} characters")
        try:
            parse_ts(doc.get("until"))  # type: ignore[arg-type]
        except ValueError:
            raise BoardError("bad until") from None
    return of if isinstance(of, str) else ""


# -- queue requests that travel over other hosts ---------------------------------------------


def _check_signed(obj: dict, signer: str, max_bytes: int, what: str) -> None:
    """``ts``, size and ``signer``'s signature of a signed object that is not a record."""
    try:
        parse_ts(obj.get("ts"))  # type: ignore[arg-type]
        body = canonical_bytes({k: v for k, v in obj.items() if k != "sig"})
    except (ValueError, TypeError, RecursionError):
        raise BoardError(f"bad {what}") from None
    sig = obj.get("sig")
    if len(body) > max_bytes or not isinstance(sig, str) or not _SIG.match(sig):
        raise BoardError(f"{what} too large or unsigned")
    if not verify(signer, body, sig):
        raise BoardError(f"{what} signature does not verify")


ASK_OPS = ("claim", "renew", "release", "complete", "fail")
MAX_ASK = 2048  # bytes of an ask's canonical JSON


def make_ask(identity: Identity, topic: str, op: str, ts_ms: int, *, req: str = "",
             lease: str = "", offers: Sequence[str] = (), bid: dict | None = None,
             name: str = "") -> dict:
    """A work-queue request signed by its claimant, so that hosts between it and the
    topic's owner can carry it and the owner knows who asks (SPEC.md, "Work queue").
    ``name`` is the claimant's own name, signed with the rest: an owner that never met
    it still calls it by name."""
    body: dict = {"k": "ask", "topic": topic, "by": identity.key, "ts": format_ts(ts_ms),
                  "op": op}
    if name:
        body["name"] = name[:MAX_OWNER_NAME]
    if req:
        body["req"] = req
    if lease:
        body["lease"] = lease
    if offers:  # the market's fields ride inside the signature (SPEC.md, "The market")
        body["offers"] = list(offers)
    if bid:
        body["bid"] = bid
    body["sig"] = identity.sign(canonical_bytes(body))
    return body


def check_ask(obj: object) -> dict:
    """The ask, checked (shape, size, signature); :class:`BoardError` says why not."""
    if not isinstance(obj, dict) or obj.get("k") != "ask":
        raise BoardError("ask must be an object with k = ask")
    parse_topic(obj.get("topic"))
    _canonical_key(obj.get("by"), "by")
    if obj.get("op") not in ASK_OPS:
        raise BoardError("unknown queue operation")
    for f in ("req", "lease"):
        if f in obj and (not isinstance(obj[f], str) or not 0 < len(obj[f]) <= 80):
            raise BoardError(f"{f}: 1 to 80 characters")
    if "name" in obj and (not isinstance(obj["name"], str) or len(obj["name"]) > MAX_OWNER_NAME):
        raise BoardError(f"name: a string of at most {MAX_OWNER_NAME} characters")
    _check_signed(obj, obj["by"], MAX_ASK, "ask")
    return obj


# -- the owner's refusal of another author's record, routed back to its author ---------------

MAX_REFUSAL = 1024  # bytes of a refusal's canonical JSON


def make_refusal(owner: Identity, topic: str, of: str, why: str, later: bool,
                 ts_ms: int) -> dict:
    """The owner's signed word that it did not stamp record ``of``: ``later`` says the
    author's host should offer it again (a rate), otherwise the refusal is final.
    Signed, so that a relay cannot make an author's host drop a waiting record."""
    body = {"k": "refusal", "topic": topic, "author": owner.key, "ts": format_ts(ts_ms),
            "of": of, "why": why[:200], "later": later}
    body["sig"] = owner.sign(canonical_bytes(body))
    return body


def _owner_doc(obj: object, kind: str) -> str:
    """The owner of the topic a ``kind`` document (refusal, head) speaks for, once it is
    in shape and names that owner as its author; :class:`BoardError` if not."""
    if not isinstance(obj, dict) or obj.get("k") != kind:
        raise BoardError(f"{kind} must be an object with k = {kind}")
    owner, _name = parse_topic(obj.get("topic"))
    author = obj.get("author")
    if author != owner and not (isinstance(author, str) and is_owner(owner, author)):
        raise BoardError(f"a {kind} is signed by the topic's owner")
    return author  # the key that signs it (the owner's current key, once it rotated)


def check_refusal(obj: object) -> dict:
    """The refusal, checked (signed by the topic's owner, in shape); :class:`BoardError` if not."""
    owner = _owner_doc(obj, "refusal")
    if not _is_hash(obj.get("of")) or not isinstance(obj.get("why"), str) \
            or not isinstance(obj.get("later"), bool):
        raise BoardError("a refusal names a record, why, and whether to offer it again")
    _check_signed(obj, owner, MAX_REFUSAL, "refusal")
    return obj


# -- the owner's signed head: what a subscriber should hold -------------------------------

MAX_HEAD = 4096  # bytes of a head's canonical JSON
HEAD_RANGES = 16


def make_head(owner: Identity, topic: str, ts_ms: int, doc_seq: int, floor: int,
              ranges: list[dict], seq: int = 0, every_ms: int = 0) -> dict:
    """The owner's signed statement of its topic: its document's ``seq`` and a summary
    of the records it holds (the digest's ranges), so a subscriber can tell what a relay
    withheld.  ``every_ms``: the owner signs a head at least this often, so silence
    longer than a few of them means the subscriber's view is stale."""
    body = {"k": "head", "topic": topic, "author": owner.key, "ts": format_ts(ts_ms),
            "doc": doc_seq, "floor": floor, "ranges": ranges}
    if seq:
        body["seq"] = seq  # the newest stamp's seq: a subscriber below it lacks records
    if every_ms:
        body["every"] = every_ms
    body["sig"] = owner.sign(canonical_bytes(body))
    return body


def check_head(obj: object) -> dict:
    """The head, checked (signed by the topic's owner, in shape); :class:`BoardError` if not."""
    owner = _owner_doc(obj, "head")
    ranges = obj.get("ranges")
    if not isinstance(ranges, list) or len(ranges) > HEAD_RANGES:
        raise BoardError(f"head ranges: a list of at most {HEAD_RANGES}")
    for r in [obj.get("doc"), obj.get("floor"), obj.get("seq", 0), obj.get("every", 0)] + [
            r.get(f) if isinstance(r, dict) else None for r in ranges for f in ("lo", "hi", "n")]:
        if isinstance(r, bool) or not isinstance(r, int) or abs(r) >= 2 ** 63:
            raise BoardError("head numbers must be integers")
    if not all(isinstance(r.get("fp"), str) and len(r["fp"]) <= 32 for r in ranges):
        raise BoardError("head fingerprints must be short strings")
    if not 0 <= obj.get("every", 0) <= 86_400_000:
        raise BoardError("head every: 0 to a day, in milliseconds")
    _check_signed(obj, owner, MAX_HEAD, "head")
    return obj


# -- topic policy ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """What a topic document says, with defaults filled in."""

    seq: int
    read_open: bool
    post_open: bool
    keep: int
    keep_days: int
    keep_bytes: int
    rate: int
    max_post: int
    queue: bool
    lease_s: int
    attempts: int
    revoked: dict[str, int]  # grant hash -> ms from which it no longer counts
    banned: frozenset[str]
    title: str
    members: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (can, until ms; 0: none)

    def member(self, key: str, what: str, now_ms: int) -> bool:
        """Whether the document lets ``key`` do ``what`` (read/post) at the host's clock."""
        found = self.members.get(key)
        if found is None or key in self.banned:
            return False
        can, until = found
        return (until == 0 or until > now_ms) and (can == "post" or what == "read")


def _int(doc: dict, field: str, default: int, lo: int, hi: int) -> int:
    v = doc.get(field, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BoardError(f"{field} must be an integer from {lo} to {hi}")
    return v


def check_policy(doc: dict) -> Policy:
    """The policy of a topic document; :class:`BoardError` for any field out of shape."""
    seq = _int(doc, "seq", -1, 0, 2 ** 63 - 1)
    access = {}
    for f in ("read", "post"):
        v = doc.get(f, "grant")
        if v not in ("open", "grant"):
            raise BoardError(f"{f} must be 'open' or 'grant'")
        access[f] = v == "open"
    queue = doc.get("queue", False)
    if not isinstance(queue, bool):
        raise BoardError("queue must be true or false")
    title = doc.get("title", "")
    if not isinstance(title, str) or len(title) > MAX_TITLE:
        raise BoardError(f"title: a string of at most {MAX_TITLE} characters")
    owner_name = doc.get("owner_name", "")
    if not isinstance(owner_name, str) or len(owner_name) > MAX_OWNER_NAME:
        raise BoardError(f"owner_name: a string of at most {MAX_OWNER_NAME} characters")
    revoked: dict[str, int] = {}
    rv = doc.get("revoked", [])
    if not isinstance(rv, list) or len(rv) > MAX_LIST:
        raise BoardError(f"revoked: a list of at most {MAX_LIST}")
    for e in rv:
        if not isinstance(e, dict) or not _is_hash(e.get("grant")):
            raise BoardError("revoked entries are {grant: hash, at: ts}")
        try:
            revoked[e["grant"]] = parse_ts(e.get("at"))
        except ValueError:
            raise BoardError("revoked entry: bad at") from None
    banned = doc.get("banned", [])
    if not isinstance(banned, list) or len(banned) > MAX_LIST:
        raise BoardError(f"banned: a list of at most {MAX_LIST} keys")
    for k in banned:
        _canonical_key(k, "banned")
    members = _members(doc.get("members", []))
    return Policy(
        seq=seq, read_open=access["read"], post_open=access["post"],
        keep=_int(doc, "keep", DEFAULT_KEEP, 1, MAX_KEEP),
        keep_days=_int(doc, "keep_days", DEFAULT_KEEP_DAYS, 1, MAX_KEEP_DAYS),
        keep_bytes=_int(doc, "keep_bytes", DEFAULT_KEEP_BYTES, MAX_RECORD, MAX_KEEP_BYTES),
        rate=_int(doc, "rate", DEFAULT_RATE, 1, MAX_RATE),
        max_post=_int(doc, "max_post", MAX_RECORD, 1024, MAX_RECORD),
        queue=queue, lease_s=_int(doc, "lease_s", DEFAULT_LEASE_S, 1, MAX_LEASE_S),
        attempts=_int(doc, "attempts", DEFAULT_ATTEMPTS, 1, 100),
        revoked=revoked, banned=frozenset(banned), title=title, members=members)


def _members(ms: object) -> dict[str, tuple[str, int]]:
    """``members``: ``[{"key", "can": "read"|"post", "until"?}]``, one entry a key."""
    if not isinstance(ms, list) or len(ms) > MAX_MEMBERS:
        raise BoardError(f"members: a list of at most {MAX_MEMBERS}")
    out: dict[str, tuple[str, int]] = {}
    for e in ms:
        if not isinstance(e, dict) or e.get("can") not in ("read", "post"):
            raise BoardError("members entries are {key, can: read|post, until?}")
        key = _canonical_key(e.get("key"), "member")
        if key in out:
            raise BoardError("members: a key is listed once")
        until = 0
        if "until" in e:
            try:
                until = parse_ts(e["until"])
            except ValueError:
                raise BoardError("members entry: bad until") from None
        out[key] = (e["can"], until)
    return out


def grant_name(g: dict) -> str:
    """How a topic's ``revoked`` list names a grant (the grants' own hash)."""
    return grant_hash(g)
