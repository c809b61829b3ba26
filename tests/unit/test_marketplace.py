"""``.claude-plugin/marketplace.json``: the repository as a Claude Code plugin marketplace.

Checked against the documented shape: ``name`` (kebab-case), ``owner`` with a
``name``, ``plugins`` each with a ``name`` and a ``source``; a relative source
starts with ``./`` and names a directory holding ``.claude-plugin/plugin.json``
whose name (and version) the entry repeats.  Only documented fields appear.
"""

from __future__ import annotations

import json
import os
import re

from awp import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOP = {"name", "owner", "plugins", "metadata", "description", "version", "homepage"}
ENTRY = {"name", "source", "description", "version", "author", "homepage", "repository",
         "license", "keywords", "category", "tags", "strict"}


def _load(*parts: str) -> dict:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return json.load(f)


def test_the_marketplace_file_has_the_documented_shape_and_names_our_plugin():
    m = _load(".claude-plugin", "marketplace.json")
    assert set(m) <= TOP, set(m) - TOP
    assert isinstance(m["name"], str) and KEBAB.match(m["name"])
    assert isinstance(m["owner"], dict) and isinstance(m["owner"].get("name"), str)
    assert set(m["owner"]) <= {"name", "email", "url"}
    assert isinstance(m["plugins"], list) and m["plugins"]
    names = [p["name"] for p in m["plugins"]]
    assert len(names) == len(set(names))
    for p in m["plugins"]:
        assert set(p) <= ENTRY, set(p) - ENTRY
        assert isinstance(p["name"], str) and KEBAB.match(p["name"])
        src = p["source"]
        assert isinstance(src, str) and src.startswith("./") and ".." not in src.split("/")
        manifest = _load(src, ".claude-plugin", "plugin.json")
        assert manifest["name"] == p["name"]
        assert p.get("version", manifest["version"]) == manifest["version"] == __version__
        if isinstance(p.get("author"), dict):
            assert isinstance(p["author"].get("name"), str)
        for f in ("keywords", "tags"):
            assert all(isinstance(k, str) for k in p.get(f, []))
    assert m.get("metadata", {}).get("version", __version__) == __version__
