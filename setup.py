"""Records the commit in a build from a git checkout (``pipx install .``, ``pip install .``).

Everything else about the package is in ``pyproject.toml``. ``awp --version``
names the commit it came from: a clone reads ``.git`` at run time, a release
carries ``awp/COMMIT`` (scripts/release.py writes it), and this writes the
same file into the build of any other install from a checkout, so an awp
installed from a clone still says which commit it is. The commit is read from
``.git`` by ``awp/base/version.py``'s reader (stdlib only: no git program is
needed).
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _checkout_commit() -> str:
    sys.path.insert(0, ROOT)  # awp/__init__ and awp/base are stdlib only, and tiny
    try:
        from awp.base.version import git_commit
    finally:
        sys.path.pop(0)
    return git_commit(ROOT)


class BuildWithCommit(build_py):
    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, "awp", "COMMIT")
        if os.path.exists(os.path.join(ROOT, "awp", "COMMIT")):
            return  # a release's own record (already copied as package data)
        found = _checkout_commit()
        if found:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(found + "\n")


setup(cmdclass={"build_py": BuildWithCommit})
