"""No module in ``awp/`` passes 600 lines without a written reason (issue 21).

A module that long usually holds two jobs; split it along the seam.  When it
really is one job, its docstring says why, in a line that starts with
``Why one module:``, so the next reader learns it before reading the rest.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "awp"
MAX_LINES = 600
MARKER = "Why one module:"

def long_modules_without_reason(root: Path = ROOT) -> list[str]:
    """Modules over ``MAX_LINES`` lines whose docstring lacks the marker line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") + (not text.endswith("\n")) <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.strip().startswith(MARKER) for line in doc.splitlines()):
            found.append(path.relative_to(root).as_posix())
    return found


def test_long_modules_say_why_they_are_one_module():
    missing = long_modules_without_reason()
    assert not missing, (
        f"over {MAX_LINES} lines with no line starting {MARKER!r} in the docstring: "
        f"{missing}; split each along its seam, or say why it is one job")


def test_the_check_finds_a_long_module_without_a_reason(tmp_path):
    body = "x = 1\n" * MAX_LINES
    (tmp_path / "long.py").write_text('"""Two jobs."""\n' + body)
    (tmp_path / "why.py").write_text(
        f'"""One job.\n\n{MARKER} the table reads as one.\n"""\n' + body)
    (tmp_path / "short.py").write_text('"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1))
    assert long_modules_without_reason(tmp_path) == ["long.py"]
