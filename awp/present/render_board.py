"""Human-readable board output: posts, topics and queues.

A post is a head line and its parts, indented; replies whose parent is
shown sit under it, one level deeper::

    9f0c4e0b6a  builder  2m ago
      deploy is green
      1a2b3c4d5e  alice (you)  1m ago  edited
        thanks

Pure functions of the local API's post and topic objects
(docs/local-api.md, "The board"), so they are stable and unit-tested.
"""

from __future__ import annotations

from .render import INDENT, ago, clip, now_ms, render_part, size, table


def author(p: dict) -> str:
    name = p.get("author_name") or str(p.get("author", "?")).split(":", 1)[-1][:10]
    return f"{name} (you)" if p.get("mine") else name


def part_lines(part: object, saved: dict | None = None) -> list[str]:
    """One part's lines; a file part names where ``--save`` put it (``saved``: name -> path)."""
    if isinstance(part, dict) and part.get("k") == "file":
        name = str(part.get("name") or "file")
        what = [size(int(part["size"]))] if isinstance(part.get("size"), int) else []
        if part.get("mime"):
            what.append(str(part["mime"]))
        from ..base.filename import safe_name  # unicodedata: only for a file part

        line = f"{INDENT}file {safe_name(name)}" + (f" ({', '.join(what)})" if what else "")
        where = (saved or {}).get(name)
        return [line + (f": {where}" if where else "")]
    return render_part(part)


def post_block(p: dict, now: int, *, depth: int = 0, label: bool = False,
               show_parent: bool = True, saved: dict | None = None) -> list[str]:
    """A post's head and parts, ``depth`` levels in.

    ``label`` adds the topic (for streams mixing topics); ``show_parent``
    names the post it replies to (left out when it is shown just above).
    """
    pad = INDENT * depth
    head = [str(p.get("id") or str(p.get("hash", ""))[:10]), author(p), ago(p.get("ts"), now)]
    if p.get("edited"):
        head.append("edited")
    if show_parent and p.get("parent"):
        head.append(f"re {str(p['parent'])[:10]}")
    if label:
        head.insert(0, str(p.get("label") or p.get("topic") or "?"))
    lines = [pad + "  ".join(head)]
    for part in p.get("parts") or []:
        lines += [pad + ln for ln in part_lines(part, (saved or {}).get(p.get("hash")))]
    return lines


def render_posts(posts: list[dict], now: int | None = None, *,
                 saved: dict | None = None) -> str:
    """Posts oldest first, each reply under its parent when the parent is shown.

    ``saved`` maps a post hash to ``{file name: saved path}`` (``get --save``).
    """
    now = now_ms() if now is None else now
    shown = {p.get("hash") for p in posts}
    children: dict[str, list[dict]] = {}
    roots: list[dict] = []
    for p in posts:
        parent = p.get("parent") or ""
        if parent and parent in shown and parent != p.get("hash"):
            children.setdefault(parent, []).append(p)
        else:
            roots.append(p)
    lines: list[str] = []
    seen: set[str] = set()

    def walk(p: dict, depth: int) -> None:
        h = p.get("hash") or ""
        if h in seen:
            return  # a cycle would need a hash collision; never loop on one anyway
        seen.add(h)
        lines.extend(post_block(p, now, depth=depth, show_parent=depth == 0, saved=saved))
        for c in children.get(h, []):
            walk(c, depth + 1)

    for p in roots:
        walk(p, 0)
    return "\n".join(lines)


def _policy_word(t: dict, field: str) -> str:
    pol = t.get("policy")
    return str(pol.get(field, "?")) if isinstance(pol, dict) else "?"


def _sub_word(t: dict) -> str:
    if t.get("mine"):
        return "owner"
    return "yes" if t.get("subscribed") else "no"


def trust_warnings(t: dict) -> list[str]:
    """What a subscriber should not take on trust about a topic: an owner that
    signed two statements that cannot both be true, a view gone stale, records
    the owner's head names that have not come."""
    out = []
    eq = t.get("equivocated")
    if isinstance(eq, dict):
        n = eq.get("n", 1)
        out.append(f"owner equivocated: {eq.get('what') or 'conflicting statements'}"
                   f" ({n} proof{'s' if n != 1 else ''}; both signed statements kept,"
                   " awp topic show --json)")
    st = t.get("stale")
    if isinstance(st, dict):
        via = st.get("via_name") or str(st.get("via") or "").split(":", 1)[-1][:10]
        out.append(f"stale via {via or '?'}: no head from the owner since"
                   f" {ago(st.get('since'))}, {st.get('heads', '?')} heads' worth")
    head = t.get("head") if isinstance(t.get("head"), dict) else {}
    stamps = t.get("stamps") if isinstance(t.get("stamps"), dict) else {}
    missing = len(stamps.get("missing") or []) + int(stamps.get("behind") or 0)
    if head.get("missing") or missing:
        out.append(f"missing records: {head.get('missing') or missing} the owner signed have"
                   " not come (asked every peer again)")
    return out


def topics_table(topics: list[dict]) -> str:
    rows = []
    for t in topics:
        pol = t.get("policy") if isinstance(t.get("policy"), dict) else None
        title = clip(pol.get("title") or "", 40) if pol else "(no topic document yet)"
        queue = ("yes" if pol.get("queue") else "-") if pol else "?"
        rows.append([t.get("label") or t.get("topic", "?"), _sub_word(t), t.get("posts", 0),
                     t.get("unread", 0), _policy_word(t, "read"), _policy_word(t, "post"),
                     queue, title])
    out = table(["TOPIC", "SUBSCRIBED", "POSTS", "UNREAD", "READ", "POST", "QUEUE", "TITLE"],
                rows)
    notes = [f"! {t.get('label') or t.get('topic', '?')}: {w}" for t in topics
             for w in trust_warnings(t)]
    return "\n".join([out, *notes]) if notes else out


def topic_details(t: dict, names: dict | None = None) -> str:
    """``awp topic show``: the topic, its counts and its whole policy."""
    names = names or {}
    lines = [f"{t.get('label') or t.get('topic')}  ({t.get('topic')})"]
    lines.append(f"  owner      {t.get('owner_name') or '?'}{' (you)' if t.get('mine') else ''}"
                 f"  {t.get('owner', '')}")
    lines.append(f"  subscribed {_sub_word(t)}; {t.get('posts', 0)} posts,"
                 f" {t.get('unread', 0)} unread, {t.get('records', 0)} records held"
                 + (f", newest {ago(t['newest'])}" if t.get("newest") else ""))
    lines += [f"  warning    {w}" for w in trust_warnings(t)]
    pol = t.get("policy")
    if not isinstance(pol, dict):
        lines.append("  policy     not known yet: the owner's topic document has not arrived")
        return "\n".join(lines)
    if pol.get("title"):
        lines.append(f"  title      {pol['title']}")
    lines.append(f"  read       {pol.get('read')}; post {pol.get('post')}")
    lines.append(f"  keeps      {pol.get('keep')} records, {pol.get('keep_days')} days,"
                 f" {size(int(pol.get('keep_bytes') or 0))}")
    lines.append(f"  limits     {pol.get('rate')} posts a minute per author,"
                 f" {size(int(pol.get('max_post') or 0))} a post")
    if pol.get("queue"):
        lines.append(f"  queue      yes: leases of {pol.get('lease_s')}s,"
                     f" {pol.get('attempts')} attempts an item")
    else:
        lines.append("  queue      no")
    banned = pol.get("banned") or []
    if banned:
        lines.append("  banned     " + ", ".join(
            names.get(k) or str(k).split(":", 1)[-1][:10] for k in banned))
    if pol.get("revoked"):
        lines.append(f"  revoked    {pol['revoked']} grant(s)" if isinstance(pol["revoked"], int)
                     else f"  revoked    {len(pol['revoked'])} grant(s)")
    lines.append(f"  version    {pol.get('seq')}")
    return "\n".join(lines)


def who(key: str, names: dict, me: str = "") -> str:
    """A key as a name: ``you``, a peer's name, or its first ten characters."""
    if not key:
        return "-"
    if me and key == me:
        return "you"
    return names.get(key) or key.split(":", 1)[-1][:10]


def until_text(until: int | None, now: int | None = None) -> str:
    """``14:05:00Z (in 4m)`` for a lease's end."""
    if not until:
        return "-"
    import time

    from ..base.durations import format_duration

    now = now_ms() if now is None else now
    left = (int(until) - now) / 1000
    rel = f"in {format_duration(left)}" if left > 0 else "ended"
    # the time of day in UTC (wire.timefmt would import re and datetime for it)
    t = time.gmtime(int(until) // 1000)
    return f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}Z ({rel})"


def queue_rows(items: list[dict]) -> list[list]:
    """The full answer's items as the rows ``?compact=1`` gives (docs/local-api.md):
    ``[id, status, holder, until, attempts, text]``."""
    rows = []
    for it in items:
        post = it.get("item") if isinstance(it.get("item"), dict) else {}
        rows.append([post.get("id") or str(post.get("hash", ""))[:10], it.get("status", "?"),
                     it.get("holder") or "", it.get("until"), it.get("attempts", 0),
                     post.get("text") or ""])
    return rows


def queue_table(rows: list[list], names: dict, me: str = "", now: int | None = None) -> str:
    """``awp queue``'s table from the compact answer's rows (:func:`queue_rows`)."""
    now = now_ms() if now is None else now
    shown = []
    for ident, status, holder, until, attempts, text in rows:
        claimed = status == "claimed"
        shown.append([ident, status, who(holder or "", names, me) if claimed else "-",
                      until_text(until, now) if claimed else "-", attempts,
                      clip(text if type(text) is str else "", 50)])
    return table(["ITEM", "STATUS", "HOLDER", "UNTIL", "ATTEMPTS", "TEXT"], shown)
