"""Editing a user's JSON (or JSON-with-comments) config file in place.

Bootstrap changes a few keys of files the user owns. Re-serialising the whole
file would drop their comments and re-indent it, so instead the text is
parsed with the position of every value, the old and the new data are
compared, and only what differs is rewritten: a changed value is replaced, a
new member is inserted after the last one in the indentation its siblings
use, a removed one is cut out with its comma. Everything else, comments and
odd indentation included, stays byte for byte.

:func:`edit` checks its own result (the edited text must parse to the new
data) and raises :class:`EditError` when it cannot produce one, so a caller
never writes a file that says something other than what it meant.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


class EditError(ValueError):
    """The text could not be parsed or edited to the wanted data."""


@dataclass
class Node:
    start: int
    end: int  # one past the value's last character
    value: Any = None
    members: list[tuple[str, int, Node]] = field(default_factory=list)  # (key, key start, value)
    items: list[Node] = field(default_factory=list)
    kind: str = "scalar"  # "object", "array" or "scalar"


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def fail(self, what: str) -> EditError:
        return EditError(f"{what} at offset {self.i}")

    def skip(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n\ufeff":
                self.i += 1
            elif s.startswith("//", self.i):
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end
            elif s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                if end < 0:
                    raise self.fail("unclosed comment")
                self.i = end + 2
            else:
                return

    def value(self) -> Node:
        self.skip()
        if self.i >= len(self.s):
            raise self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.container("object", "}")
        if c == "[":
            return self.container("array", "]")
        start = self.i
        if c == '"':
            self.i = self.string_end(start)
        else:
            m = re.compile(r"-?[0-9][0-9eE.+-]*|true|false|null").match(self.s, self.i)
            if not m:
                raise self.fail("unexpected character")
            self.i = m.end()
        try:
            val = json.loads(self.s[start:self.i])
        except ValueError as e:
            raise self.fail(f"bad value ({e})") from None
        return Node(start, self.i, val)

    def string_end(self, start: int) -> int:
        i = start + 1
        while i < len(self.s):
            if self.s[i] == "\\":
                i += 2
                continue
            if self.s[i] == '"':
                return i + 1
            i += 1
        raise self.fail("unclosed string")

    def container(self, kind: str, close: str) -> Node:
        node = Node(self.i, -1, kind=kind)
        self.i += 1
        while True:
            self.skip()
            if self.i < len(self.s) and self.s[self.i] == close:
                self.i += 1
                node.end = self.i
                node.value = ({k: v.value for k, _, v in node.members} if kind == "object"
                              else [x.value for x in node.items])
                return node
            if kind == "object":
                if self.i >= len(self.s) or self.s[self.i] != '"':
                    raise self.fail("expected a key")
                kstart = self.i
                self.i = self.string_end(kstart)
                key = json.loads(self.s[kstart:self.i])
                self.skip()
                if self.i >= len(self.s) or self.s[self.i] != ":":
                    raise self.fail("expected ':'")
                self.i += 1
                node.members.append((key, kstart, self.value()))
            else:
                node.items.append(self.value())
            self.skip()
            if self.i < len(self.s) and self.s[self.i] == ",":
                self.i += 1
            elif self.i >= len(self.s) or self.s[self.i] != close:
                raise self.fail(f"expected ',' or '{close}'")


def parse(text: str) -> Node:
    """The top-level value of ``text`` with the position of every value in it."""
    p = _Parser(text)
    node = p.value()
    p.skip()
    if p.i != len(text):
        raise p.fail("text after the value")
    return node


def loads(text: str) -> Any:
    return parse(text).value


# -- editing -------------------------------------------------------------------------------

class _Editor:
    def __init__(self, text: str, unit: str) -> None:
        self.s = text
        self.unit = unit
        self.nl = "\r\n" if "\r\n" in text else "\n"  # what we add uses the file's line ends
        self.edits: list[tuple[int, int, str]] = []

    # text helpers

    def line_start(self, pos: int) -> int:
        return self.s.rfind("\n", 0, pos) + 1

    def indent_at(self, pos: int) -> str:
        start = self.line_start(pos)
        m = re.match(r"[ \t]*", self.s[start:pos])
        return m.group(0) if m else ""

    def starts_line(self, pos: int) -> bool:
        return not self.s[self.line_start(pos):pos].strip()

    def after_value(self, node: Node) -> tuple[int, int]:
        """``(comma position or -1, end of whatever follows on the value's line)``.

        The comma is the one right after the value (comments may sit between).
        The line end is past a trailing ``//`` comment, or -1 when more JSON
        follows on the same line.
        """
        i, n, s = node.end, len(self.s), self.s
        comma = -1
        while i < n:
            if s[i] in " \t\r":
                i += 1
            elif s[i] == "," and comma < 0:
                comma = i
                i += 1
            elif s.startswith("//", i):
                end = s.find("\n", i)
                return comma, n if end < 0 else end
            elif s.startswith("/*", i):
                end = s.find("*/", i + 2)
                i = n if end < 0 else end + 2
            elif s[i] == "\n":
                return comma, i
            else:
                return comma, -1
        return comma, n

    def dump(self, value: Any, indent: str) -> str:
        text = json.dumps(value, indent=self.unit, ensure_ascii=False)
        return text.replace("\n", self.nl + indent)

    def dump_inline(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))

    # edits

    def replace(self, node: Node, value: Any) -> None:
        self.edits.append((node.start, node.end, self.dump(value, self.indent_at(node.start))))

    def child_indent(self, container: Node, children: list[int]) -> str | None:
        """Indentation for a new child, or None if the container is on one line."""
        for pos in children:
            if self.starts_line(pos):
                return self.indent_at(pos)
        if children:
            return None
        closing_line = self.s[self.line_start(container.end - 1):container.end - 1]
        if "\n" not in self.s[container.start:container.end] and not closing_line.strip():
            return None
        return self.indent_at(container.start) + self.unit

    def insert_last(self, container: Node, starts: list[int], last: Node | None,
                    pieces: list[tuple[str | None, Any]]) -> None:
        """Append members (``(key, value)``) or items (``(None, value)``) to ``container``."""
        indent = self.child_indent(container, starts)

        def one(key: str | None, value: Any, ind: str | None) -> str:
            head = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
            return head + (self.dump_inline(value) if ind is None else self.dump(value, ind))

        if last is None:  # empty container: open it up
            close = container.end - 1
            base = self.indent_at(container.start)
            if indent is None:
                self.edits.append((close, close, ", ".join(one(k, v, None) for k, v in pieces)))
            elif self.starts_line(close):
                at = self.line_start(close)
                self.edits.append((at, at, "".join(indent + one(k, v, indent)
                                                   + ("," if i < len(pieces) - 1 else "") + self.nl
                                                   for i, (k, v) in enumerate(pieces))))
            else:
                body = ("," + self.nl).join(indent + one(k, v, indent) for k, v in pieces)
                self.edits.append((close, close, self.nl + body + self.nl + base))
            return
        comma, line_end = self.after_value(last)
        if indent is None or line_end < 0:
            text = ", ".join(one(k, v, indent) for k, v in pieces)
            if comma >= 0:  # a trailing comma: keep the style, ours gets one too
                self.edits.append((comma + 1, comma + 1, " " + text + ","))
            else:
                self.edits.append((last.end, last.end, ", " + text))
            return
        lines = [indent + one(k, v, indent) for k, v in pieces]
        if line_end > 0 and self.s[line_end - 1] == "\r":
            line_end -= 1  # before the CR of a CRLF
        if comma >= 0:
            self.edits.append((line_end, line_end, "".join(self.nl + ln + "," for ln in lines)))
        else:
            self.edits.append((last.end, last.end, ","))
            self.edits.append((line_end, line_end, ",".join(self.nl + ln for ln in lines)))

    def insert_before(self, item: Node, piece: Any) -> None:
        """Put a new array item in front of ``item``."""
        if self.starts_line(item.start):
            indent = self.indent_at(item.start)
            self.edits.append((item.start, item.start,
                               self.dump(piece, indent) + "," + self.nl + indent))
        else:
            self.edits.append((item.start, item.start, self.dump_inline(piece) + ", "))

    def delete(self, container: Node, nodes: list[Node], starts: list[int],
               gone: set[int]) -> None:
        """Cut the children ``gone`` (indexes into ``nodes``, values starting at ``starts``).

        Neighbours are cut together, run by run: cutting them one by one
        would have two cuts claim the same comma when the last two go.
        """
        runs: list[list[int]] = []
        for k in sorted(gone):
            if runs and k == runs[-1][1] + 1:
                runs[-1][1] = k
            else:
                runs.append([k, k])
        for i, j in runs:
            self.delete_run(container, nodes, starts, i, j)

    def cut_child(self, nodes: list[Node], starts: list[int], k: int) -> None:
        """Cut child ``k`` with its own comma: it is not the last, or has a trailing one."""
        start, node = starts[k], nodes[k]
        comma, line_end = self.after_value(node)
        if self.starts_line(start) and line_end >= 0:
            self.edits.append((self.line_start(start), min(line_end + 1, len(self.s)), ""))
        else:
            end = starts[k + 1] if k + 1 < len(nodes) else comma + 1
            self.edits.append((start, end, ""))

    def delete_run(self, container: Node, nodes: list[Node], starts: list[int], i: int,
                   j: int) -> None:
        """Cut children ``i`` to ``j`` (inclusive), neighbours in ``nodes``."""
        n = len(nodes)
        inside = (container.start + 1, container.end - 1)
        if n == 1 and not (self.s[inside[0]:starts[0]].strip()
                           or self.s[nodes[0].end:inside[1]].strip(" \t\r\n,")):
            self.edits.append((inside[0], inside[1], ""))  # nothing else inside: "{}"
            return
        comma, line_end = self.after_value(nodes[j])
        if j + 1 < n or comma >= 0:
            # Not the last, or the last with a trailing comma: each goes with its own comma.
            for k in range(i, j + 1):
                self.cut_child(nodes, starts, k)
            return
        whole_lines = self.starts_line(starts[i]) and line_end >= 0
        if i == 0:  # every child goes: each with its comma, the last has none
            for k in range(0, j):
                self.cut_child(nodes, starts, k)
            last_start = starts[j]
            if self.starts_line(last_start) and line_end >= 0:
                self.edits.append((self.line_start(last_start),
                                   min(line_end + 1, len(self.s)), ""))
            else:
                self.edits.append((last_start, nodes[j].end, ""))
            return
        # The run ends the container, without a trailing comma: the comma after the
        # child before it goes, and the run is cut in one piece.
        prev_comma, _ = self.after_value(nodes[i - 1])
        if prev_comma >= 0:
            self.edits.append((prev_comma, prev_comma + 1, ""))
        if whole_lines:
            self.edits.append((self.line_start(starts[i]), min(line_end + 1, len(self.s)), ""))
        else:
            self.edits.append((nodes[i - 1].end if prev_comma < 0 else prev_comma + 1,
                               nodes[j].end, ""))

    # the comparison

    def diff(self, node: Node, new: Any) -> None:
        if node.value == new:
            return
        if node.kind == "object" and isinstance(new, dict):
            self.diff_object(node, new)
        elif node.kind == "array" and isinstance(new, list):
            self.diff_array(node, new)
        else:
            self.replace(node, new)

    def diff_object(self, node: Node, new: dict) -> None:
        keys = [k for k, _, _ in node.members]
        if len(set(keys)) != len(keys):
            raise EditError("an object has the same key twice")
        values = [v for _, _, v in node.members]
        starts = [ks for _, ks, _ in node.members]
        gone = [i for i, k in enumerate(keys) if k not in new]
        kept = [k for k in keys if k in new]
        if kept != [k for k in new if k in keys]:
            raise EditError("the keys were reordered")
        self.delete(node, values, starts, set(gone))
        for i, k in enumerate(keys):
            if k in new:
                self.diff(values[i], new[k])
        added = [k for k in new if k not in keys]
        if added and gone:
            raise EditError("members both removed and added")
        if added:
            self.insert_last(node, starts, values[-1] if values else None,
                             [(k, new[k]) for k in added])

    def diff_array(self, node: Node, new: list) -> None:
        old = node.items
        starts = [x.start for x in old]
        j = 0
        gone: set[int] = set()
        appended: list[Any] = []
        for k, want in enumerate(new):
            if j < len(old) and old[j].value == want:
                j += 1
                continue
            ahead = next((m for m in range(j + 1, len(old)) if old[m].value == want), None)
            nxt = new[k + 1] if k + 1 < len(new) else None
            if ahead is not None:
                gone.update(range(j, ahead))
                j = ahead + 1
            elif (j < len(old) and old[j].value != nxt
                  and (j + 1 >= len(old) or old[j + 1].value == nxt)):
                # the item in this place changed
                self.diff(old[j], want)
                j += 1
            elif j < len(old):
                self.insert_before(old[j], want)
            else:
                appended.append(want)
        gone.update(range(j, len(old)))
        self.delete(node, old, starts, gone)
        if appended:
            if j and j - 1 in gone:
                raise EditError("cannot append after a removed item")
            self.insert_last(node, starts, old[j - 1] if j else None,
                             [(None, want) for want in appended])

    def apply(self) -> str:
        out = self.s
        spans = sorted(self.edits, key=lambda e: (e[0], e[1]))
        for a, b in zip(spans, spans[1:], strict=False):
            if a[1] > b[0]:
                raise EditError("overlapping edits")
        for start, end, text in reversed(spans):
            out = out[:start] + text + out[end:]
        return out


def indent_unit(text: str) -> str:
    """The file's indentation step (two spaces when it shows none)."""
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else "  "


def edit(text: str, new: Any) -> str:
    """``text`` changed as little as possible so that it holds ``new``."""
    root = parse(text)
    if root.value == new:
        return text
    ed = _Editor(text, indent_unit(text))
    ed.diff(root, new)
    out = ed.apply()
    try:
        got = loads(out)
    except EditError as e:
        raise EditError(f"the edited text does not parse ({e})") from None
    if got != new:
        raise EditError("the edited text does not hold the intended data")
    return out
