"""Schema checks for the board's lines (SPEC.md section 14, "Lines").

A peer that announces ``board`` must write these lines in the shapes of the
spec: topics as ``ed25519:<key>/<name>``, hashes as 32 lowercase hex
characters, digests within their limits, and records that any host would
accept as they stand (shape and signature: a host checks a record before it
stores or relays it, so a bad one on the wire means the peer skipped that).
Like the rest of :mod:`awp.conform.schema`, each check returns problems and
never raises; unknown fields are never a problem.
"""

from __future__ import annotations

import re

from ..wire.board import BoardError, check_record, check_refusal, is_hash, parse_topic
from ..wire.canonical import compact_json
from .schema import _is_int as is_int
from .schema import shown

MAX_POSTS_LINE = 512 * 1024  # a board-posts line stays under this
MAX_SUBS = 256
MAX_RANGES = 256
MAX_IDS = 4096
MAX_HOPS = 8
OPS = ("claim", "renew", "release", "complete", "fail")
_FP = re.compile(r"[0-9a-f]{24}\Z", re.ASCII)
CHECKED = ("board-sub", "board-topic", "board-digest", "board-want", "board-posts",
           "board-claim", "board-lease", "board-submit", "board-refused")
MAX_SUBMIT = 256  # records in one board-submit


def _topic(p: list[str], where: str, v: object) -> bool:
    try:
        parse_topic(v)
    except BoardError as e:
        p.append(f"{where} is not a topic ({e}): {shown(v, 100)}")
        return False
    return True


def _hops(p: list[str], t: str, line: dict) -> None:
    hops = line.get("hops")
    if not is_int(hops) or hops < 0:
        p.append(f"{t} without a non-negative integer 'hops': {shown(hops, 40)}")
    elif hops > MAX_HOPS:
        p.append(f"{t}.hops is {hops}, beyond the {MAX_HOPS}-hop limit")


def check_board_record(doc: object, where: str, *, kind: str = "",
                       topic: str = "") -> list[str]:
    """Problems of one record a peer sent: it must pass the check every host makes."""
    if not isinstance(doc, dict):
        return [f"{where} is not a record object: {shown(doc, 100)}"]
    try:
        rec = check_record(compact_json(doc))
    except BoardError as e:
        return [f"{where} is not a valid record ({e}): {shown(doc, 160)}"]
    except (TypeError, ValueError):
        return [f"{where} is not a valid record (not canonicalisable): {shown(doc, 160)}"]
    p: list[str] = []
    if kind and rec.kind != kind:
        p.append(f"{where} is a {rec.kind!r} record, not {kind!r}")
    if topic and rec.topic != topic:
        p.append(f"{where} belongs to topic {rec.topic}, not the line's {topic}")
    return p


def _range(p: list[str], where: str, r: object) -> None:
    if not isinstance(r, dict):
        p.append(f"{where} is not an object: {shown(r, 80)}")
        return
    lo, hi = r.get("lo"), r.get("hi")
    if not is_int(lo) or not is_int(hi):
        p.append(f"{where} needs integer 'lo' and 'hi' (ms): {shown(r, 100)}")
    elif hi <= lo:
        p.append(f"{where} is empty or reversed (lo {lo}, hi {hi})")
    if "ids" in r:
        ids = r["ids"]
        if not isinstance(ids, list) or not all(is_hash(i) for i in ids):
            p.append(f"{where}.ids is not a list of record hashes: {shown(ids, 100)}")
        elif len(ids) > MAX_IDS:
            p.append(f"{where}.ids lists {len(ids)} hashes (at most {MAX_IDS})")
    elif "ask" in r:
        if r["ask"] is not True:
            p.append(f"{where}.ask is not true: {shown(r['ask'], 40)}")
    else:
        n, fp = r.get("n"), r.get("fp")
        if not is_int(n) or n < 0:
            p.append(f"{where} is neither ids, ask nor a summary with a count 'n':"
                     f" {shown(r, 100)}")
        if not isinstance(fp, str) or not _FP.match(fp):
            p.append(f"{where}.fp is not 24 lowercase hex characters: {shown(fp, 40)}")


def _sub(p: list[str], line: dict) -> None:
    if "topics" not in line and "drop" not in line:
        p.append("board-sub with neither 'topics' nor 'drop'")
    topics = line.get("topics", [])
    if not isinstance(topics, list):
        p.append(f"board-sub.topics is not a list: {shown(topics, 100)}")
    else:
        if len(topics) > MAX_SUBS:
            p.append(f"board-sub lists {len(topics)} topics (at most {MAX_SUBS})")
        for i, e in enumerate(topics[:MAX_SUBS]):
            where = f"board-sub.topics[{i}]"
            if not isinstance(e, dict):
                p.append(f"{where} is not an object {{topic, grant?, via?}}: {shown(e, 100)}")
                continue
            _topic(p, f"{where}.topic", e.get("topic"))
            for f in ("grant", "via"):
                if f in e and not isinstance(e[f], dict):
                    p.append(f"{where}.{f} is not a grant object: {shown(e[f], 80)}")
    drop = line.get("drop", [])
    if not isinstance(drop, list):
        p.append(f"board-sub.drop is not a list: {shown(drop, 100)}")
    else:
        for i, v in enumerate(drop[:MAX_SUBS]):
            _topic(p, f"board-sub.drop[{i}]", v)


def check_board(t: str, line: dict) -> list[str]:
    """Problems of one ``board-*`` line (the envelope is checked by the caller)."""
    p: list[str] = []
    if t == "board-sub":
        _sub(p, line)
        return p
    if t not in CHECKED:
        return p  # a board line this draft does not define: unknown types are fine
    topic = line.get("topic")
    if t == "board-refused":
        try:
            check_refusal(line.get("doc"))
        except BoardError as e:
            p.append(f"board-refused.doc is not the owner's signed refusal ({e})")
        return p
    if t != "board-topic" and _topic(p, f"{t}.topic", topic) is False:
        topic = None
    if t == "board-topic":
        _hops(p, t, line)
        p += check_board_record(line.get("doc"), "board-topic.doc", kind="topic")
    elif t == "board-posts":
        _hops(p, t, line)
        recs = line.get("recs")
        if not isinstance(recs, list):
            p.append(f"board-posts without a list 'recs': {shown(recs, 80)}")
        else:
            for i, doc in enumerate(recs):
                p += check_board_record(doc, f"board-posts.recs[{i}]",
                                        topic=topic if isinstance(topic, str) else "")
    elif t == "board-submit":
        recs = line.get("recs")
        if not isinstance(recs, list) or not 0 < len(recs) <= MAX_SUBMIT:
            p.append(f"board-submit without a list of 1 to {MAX_SUBMIT} 'recs'")
        else:
            for i, doc in enumerate(recs):
                p += check_board_record(doc, f"board-submit.recs[{i}]",
                                        topic=topic if isinstance(topic, str) else "")
    elif t == "board-digest":
        if not is_int(line.get("floor")):
            p.append(f"board-digest without an integer 'floor': {shown(line.get('floor'), 40)}")
        ranges = line.get("ranges")
        if not isinstance(ranges, list):
            p.append(f"board-digest without a list 'ranges': {shown(ranges, 80)}")
        else:
            if len(ranges) > MAX_RANGES:
                p.append(f"board-digest carries {len(ranges)} ranges (at most {MAX_RANGES})")
            for i, r in enumerate(ranges[:MAX_RANGES]):
                _range(p, f"board-digest.ranges[{i}]", r)
    elif t == "board-want":
        ids = line.get("ids")
        if not isinstance(ids, list) or not all(is_hash(i) for i in ids):
            p.append(f"board-want.ids is not a list of record hashes: {shown(ids, 100)}")
        elif len(ids) > MAX_IDS:
            p.append(f"board-want asks for {len(ids)} hashes (at most {MAX_IDS})")
    elif t == "board-claim":
        op = line.get("op")
        if op not in OPS:
            p.append(f"board-claim.op is not one of {', '.join(OPS)}: {shown(op, 40)}")
        field = "req" if op == "claim" else "lease"
        if op in OPS and (not isinstance(line.get(field), str) or not line[field]):
            p.append(f"board-claim ({op}) without a string {field!r}")
    elif t == "board-lease":
        re_ = line.get("re")
        if not isinstance(re_, str) or not re_:
            p.append("board-lease without 're' (the request's id)")
        has_doc, has_err = "doc" in line, "error" in line
        if has_doc == has_err:
            p.append("board-lease carries neither or both of 'doc' and 'error'")
        if has_doc:
            p += check_board_record(line["doc"], "board-lease.doc", kind="lease",
                                    topic=topic if isinstance(topic, str) else "")
        if has_err and not isinstance(line["error"], str):
            p.append(f"board-lease.error is not a string: {shown(line['error'], 60)}")
    return p


def check_board_size(t: str, raw_len: int) -> list[str]:
    """A board-posts line must stay under 512 KiB."""
    if t == "board-posts" and raw_len >= MAX_POSTS_LINE:
        return [f"board-posts line of {raw_len} bytes (a board-posts line stays under 512 KiB)"]
    return []
