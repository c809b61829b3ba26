"""What readers of a topic see: posts with their latest edit, minus deleted and hidden ones.

Edits, deletes and hides are records of their own that name a post by hash
(``of``); nothing is changed in place, so every host can hold them in any
order and still show the same thing:

* an ``edit`` counts only when its author wrote the post; the latest edit by
  ``(ts, hash)`` gives the text;
* a ``delete`` counts only when its author wrote the post;
* a ``hide`` is the owner's (``check_record`` makes sure) and hides any post,
  or makes an edit or delete it names count for nothing;
* a reply whose parent is gone is still shown, with its parent's hash.

Records stay stored until retention drops them; hosts that hold a deleted
post simply never show it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..wire.board import Record


@dataclass(frozen=True)
class Shown:
    hash: str
    author: str
    ts: int
    parent: str
    parts: list
    edited: int  # ts of the edit shown, 0 when none


def visible(records: Iterable[Record]) -> list[Shown]:
    """The topic's posts as readers see them, oldest first by ``(ts, hash)``."""
    posts: dict[str, Record] = {}
    edits: dict[str, Record] = {}
    gone: set[str] = set()
    later: list[Record] = []
    for r in records:
        if r.kind == "post":
            posts[r.hash] = r
        elif r.kind in ("edit", "delete", "hide"):
            later.append(r)
    hidden = {r.of for r in later if r.kind == "hide"}
    for r in later:
        target = posts.get(r.of)
        if r.kind == "hide":
            gone.add(r.of)
        elif r.hash in hidden:
            continue  # the owner hid this edit or delete itself
        elif target is None or target.author != r.author:
            continue
        elif r.kind == "delete":
            gone.add(r.of)
        else:
            prev = edits.get(r.of)
            if prev is None or (r.ts, r.hash) > (prev.ts, prev.hash):
                edits[r.of] = r
    out = []
    for h, p in posts.items():
        if h in gone:
            continue
        e = edits.get(h)
        out.append(Shown(hash=h, author=p.author, ts=p.ts, parent=p.parent,
                         parts=(e or p).doc["parts"], edited=e.ts if e else 0))
    out.sort(key=lambda s: (s.ts, s.hash))
    return out
