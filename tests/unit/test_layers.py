"""awp's packages import only downward: a new upward (or sideways) import fails here.

The order, bottom to top.  A package may import any package of a lower rank
and none of its own rank or above; a few packages (``NARROW``) may import
even less.  Every import counts, late ones inside functions and
``TYPE_CHECKING`` ones too: a late import still ties the two packages.

====  ====================  ==============================================================
rank  package               why it sits there
====  ====================  ==============================================================
-1    ``awp``               ``awp/__init__.py``: the version numbers, nothing imported
0     ``base``              leaf pieces every layer needs (limits, home and socket paths,
                            durations, the atomic private-file write, the command that runs
                            awp again); stdlib only
1     ``wire``              the protocol's bytes: framing, envelopes, ids, keys, grants; no
                            I/O
2     ``board``, ``serve``  pure rules over wire records (board permissions, queue, sync),
                            and the work a served capability does (exec, fs); neither knows
                            the engine or the store
3     ``store``             SQLite: schema, queries, the writer; uses board's rules to keep
                            board rows
3     ``conform``           the conformance peer: a protocol client of its own built on wire
                            and board only, so it never shares a bug with our engine
4     ``node``              the protocol engine: sessions, peers, extensions; it is handed
                            its network (``node.network``) rather than importing transport
5     ``transport``         byte streams (tcp, unix, tailcat); knows no message type
6     ``localapi``          both ends of ``awp.sock``'s HTTP: the h11 server core the daemon
                            mounts its routes on, the client, and starting the daemon on
                            demand.  Below ``daemon`` (the issue draws it above) because
                            the daemon mounts its routes on the server core; it imports
                            only base and wire (``NARROW``), so it cannot reach the daemon's
                            state either way
7     ``daemon``            process life and the routes: the composition root that builds
                            the engine, hands it the transport, and serves the local API
8     ``harness``           harness ids, detection, ``awp bootstrap`` (which writes the
                            daemon's systemd unit, hence above ``daemon``); the daemon is
                            told the harness by its caller
9     ``present``           rendering of records, posts and states for humans and models,
                            shared by CLI, hooks, MCP and web
10    ``hooks``, ``mcp``,   the agent-facing front ends; they reach the daemon only through
      ``web``, ``work``     the local API (``NARROW``); ``work`` is ``awp work``'s loop
11    ``cli``               the ``awp`` command, which also dispatches ``awp hook``,
                            ``awp mcp`` and ``awp web``, hence above them
====  ====================  ==============================================================

The fast path (``awp hook``, the common CLI verbs) must stay free of typer,
httpx and trio: ``tests/integration/test_cli_fastpath.py`` holds that.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "awp"

RANK: dict[str, int] = {
    "awp": -1, "base": 0, "wire": 1, "board": 2, "serve": 2, "store": 3, "conform": 3,
    "node": 4, "transport": 5, "localapi": 6, "daemon": 7, "harness": 8, "present": 9,
    "hooks": 10, "mcp": 10, "web": 10, "work": 10, "cli": 11,
}

#: Packages that may import only these, whatever lies below them.
_FRONT = frozenset({"awp", "base", "wire", "localapi", "harness", "present"})
NARROW: dict[str, frozenset[str]] = {
    "base": frozenset({"awp"}),
    "transport": frozenset({"awp", "base", "wire"}),
    "localapi": frozenset({"awp", "base", "wire"}),
    "conform": frozenset({"awp", "base", "wire", "board"}),
    "present": frozenset({"awp", "base", "wire", "localapi"}),
    "hooks": _FRONT, "mcp": _FRONT, "web": _FRONT, "work": _FRONT,
    # the CLI goes through the local API or the daemon's own offline steps
    # (``daemon.repair``), never into the store or the engine
    "cli": frozenset(RANK) - {"store", "node", "cli"},
}


def package_of(path: Path, root: Path = ROOT) -> str:
    """``awp/node/engine.py`` -> ``node``; ``awp/__init__.py`` -> ``awp``."""
    rel = path.relative_to(root).parts
    return rel[0] if len(rel) > 1 else "awp"


def imported_packages(path: Path, source: str, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, package)`` for every import of an awp package in ``source``."""
    here = path.relative_to(root.parent).with_suffix("").parts
    pkg_parts = here[:-1] if path.name != "__init__.py" else here[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1] if "." in a.name else "awp")
                      for a in node.names if a.name == "awp" or a.name.startswith("awp.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[:len(pkg_parts) - node.level + 1])
                mod = base + (node.module.split(".") if node.module else [])
            else:
                mod = (node.module or "").split(".")
            if not mod or mod[0] != "awp":
                continue
            if len(mod) >= 2:
                found.append((node.lineno, mod[1]))
            else:  # from awp import X: X is a package, or a name of awp/__init__.py
                found += [(node.lineno, a.name if a.name in RANK else "awp") for a in node.names]
    return found


def violations(path: Path, source: str, root: Path = ROOT) -> list[str]:
    """Each import in ``source`` that points up, sideways, or outside its package's list."""
    me = package_of(path, root)
    bad = []
    for line, other in imported_packages(path, source, root):
        if other == me:
            continue
        where = f"{path.relative_to(root.parent)}:{line}: {me} imports {other}"
        if other not in RANK:
            bad.append(f"{where}, which has no place in the order (add it to RANK)")
        elif RANK[other] >= RANK[me]:
            bad.append(f"{where} (rank {RANK[other]} >= {RANK[me]})")
        elif me in NARROW and other not in NARROW[me]:
            bad.append(f"{where}, outside what {me} may import")
    return bad


def test_every_package_has_a_place():
    pkgs = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    loose = {p.stem for p in ROOT.glob("*.py")} - {"__init__", "__main__"}
    assert not loose, f"modules loose in awp/ (put them in a package): {sorted(loose)}"
    assert pkgs <= set(RANK), f"packages with no rank: {sorted(pkgs - set(RANK))}"


def test_no_import_points_up():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "__main__.py" and path.parent == ROOT:
            continue  # ``python -m awp`` runs the CLI: the entry point sits above all
        bad += violations(path, path.read_text(encoding="utf-8"))
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_the_check_sees_upward_sideways_and_late_imports(tmp_path):
    root = tmp_path / "awp"
    cases = {
        "store/x.py": ("from ..node.engine import Engine\n", "store imports node"),
        "node/x.py": ("def f():\n    from awp.transport import streams\n", "node imports transport"),
        "hooks/x.py": ("from ..mcp import server\n", "hooks imports mcp"),
        "cli/x.py": ("from ..store import ops\n", "outside what cli may import"),
        "transport/x.py": ("from awp import localapi\n", "transport imports localapi"),
        "base/x.py": ("import awp.wire.ids\n", "base imports wire"),
        "daemon/x.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from ..harness import identity\n", "daemon imports harness"),
    }
    for rel, (src, said) in cases.items():
        path = root / rel
        found = violations(path, src, root)
        assert len(found) == 1 and said in found[0], (rel, found)
    fine = {"node/y.py": "from ..store import ops\nfrom ..base.limits import Limits\n",
            "cli/y.py": "from .. import __version__\nfrom ..daemon.repair import repair_home\n",
            "present/y.py": "from ..localapi import cjson\n"}
    for rel, src in fine.items():
        assert violations(root / rel, src, root) == [], rel


# -- the session core is sans-I/O ----------------------------------------------------------

#: Packages whose modules do no I/O of their own: they neither import an event loop nor the
#: database, so their rules are tested with a fake clock (issue 21, item 1).
SANS_IO = ("node/session",)
_IO_MODULES = frozenset({"trio", "sqlite3", "socket", "asyncio", "selectors", "threading"})


def io_imports(path: Path, source: str) -> list[str]:
    """Each import of an I/O module (``trio``, ``sqlite3``...) in ``source``, late ones too."""
    bad = []
    for node in ast.walk(ast.parse(source, str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        bad += [f"{path.name}:{node.lineno}: imports {n}" for n in names
                if n.split(".")[0] in _IO_MODULES]
    return bad


def test_the_session_core_imports_no_io():
    bad = []
    for pkg in SANS_IO:
        files = sorted((ROOT / pkg).rglob("*.py"))
        assert files, pkg
        for path in files:
            bad += io_imports(path, path.read_text(encoding="utf-8"))
    assert not bad, "I/O imports in the sans-I/O session core:\n" + "\n".join(bad)


def test_the_session_core_pulls_in_no_io_either():
    """Not even through what it imports (the wire codec, ``node/gaps.py``)."""
    import subprocess
    import sys
    code = ("import sys, awp.node.session\n"
            "print(sorted(m for m in ('trio', 'sqlite3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT.parent, check=True).stdout.strip()
    assert out == "[]", out


def test_the_io_check_sees_trio_and_sqlite3(tmp_path):
    src = "import trio\nfrom sqlite3 import Connection\ndef f():\n    import trio.lowlevel\n"
    assert len(io_imports(tmp_path / "x.py", src)) == 3
    assert io_imports(tmp_path / "x.py", "from ..gaps import AckGaps\nimport json\n") == []
