"""The agent plugin (``plugin/awp/`` in the repository), embedded in the package.

``awp bootstrap`` installs these files without any download, and a regular
(non-editable) install has no ``plugin/`` directory, so the tree is embedded
in :mod:`awp.harness.plugin_data`, generated from ``plugin/awp/`` by::

    python -m awp.harness.plugin_files

A unit test checks that the two agree.

When installing, :func:`plugin_tree` writes the awp command bootstrap wires
in into the launcher ``bin/awp`` and the opencode plugin.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

#: Where the opencode plugin lives inside the tree.
OPENCODE_PLUGIN = "opencode/awp.js"
SKILL = "skills/awp/SKILL.md"
LAUNCHER = "bin/awp"


def files() -> dict[str, tuple[int, str]]:
    """``{relative path: (mode, text)}`` of the plugin as shipped."""
    from .plugin_data import FILES

    return dict(FILES)


def _is_python(path: str) -> bool:
    return os.path.basename(path).startswith("python")


def wire(rel: str, text: str, argv: list[str] | None) -> str:
    """``text`` with the awp command ``argv`` written in, for the files that carry it.

    ``argv`` may end in ``--home DIR`` (``awp bootstrap --home``): the launcher
    then exports ``AWP_HOME`` unless the harness set one.
    """
    if not argv:
        return text
    if rel == LAUNCHER:
        if len(argv) >= 3 and argv[-2] == "--home":
            text = text.replace("\nWIRED_HOME=''\n", f"\nWIRED_HOME={shlex.quote(argv[-1])}\n", 1)
            argv = argv[:-2]
        if len(argv) == 4 and argv[1:] == ["-I", "-m", "awp"] and _is_python(argv[0]):
            return text.replace("\nWIRED_PY=''\n", f"\nWIRED_PY={shlex.quote(argv[0])}\n", 1)
        if len(argv) == 1:
            return text.replace("\nWIRED=''\n", f"\nWIRED={shlex.quote(argv[0])}\n", 1)
        return text
    if rel == OPENCODE_PLUGIN:
        return text.replace("const WIRED = [];", f"const WIRED = {json.dumps(argv)};", 1)
    return text


def plugin_tree(argv: list[str] | None = None) -> dict[str, tuple[int, str]]:
    """The Claude Code plugin as installed: everything but the opencode plugin."""
    return {rel: (mode, wire(rel, text, argv)) for rel, (mode, text) in files().items()
            if rel != OPENCODE_PLUGIN}


def skill_text() -> str:
    return files()[SKILL][1]


def opencode_plugin(argv: list[str] | None = None) -> str:
    return wire(OPENCODE_PLUGIN, files()[OPENCODE_PLUGIN][1], argv)


# -- generating plugin_data.py ------------------------------------------------------------

def read_tree(root: str) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with open(path, encoding="utf-8", newline="") as f:
                out[rel] = (mode, f.read())
    return out


def render_module(tree: dict[str, tuple[int, str]]) -> str:
    lines = [
        '"""The plugin tree, embedded. Generated from plugin/awp/ by'
        ' ``python -m awp.harness.plugin_files``: do not edit."""',
        "",
        "FILES: dict[str, tuple[int, str]] = {",
    ]
    for rel in sorted(tree):
        mode, text = tree[rel]
        lines.append(f"    {rel!r}: (0o{mode:o}, {text!r}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    root = argv[0] if argv else os.path.join(repo, "plugin", "awp")
    target = os.path.join(here, "plugin_data.py")
    text = render_module(read_tree(root))
    tmp = target + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, target)
    print(f"wrote {target} from {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
