"""Hints name awp the way the user ran it (issue 22: `.venv/bin/awp` users got a bare `awp`)."""

import os
import sys

from awp.cli.base import invoked_as


def test_a_path_the_user_typed_is_kept(monkeypatch, tmp_path):
    script = tmp_path / "venv" / "bin" / "awp"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["venv/bin/awp", "up"])
    assert invoked_as() == "venv/bin/awp"
    # found on PATH as this same program: the bare name
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [str(script), "up"])
    assert invoked_as() == "awp"


def test_python_dash_m(monkeypatch):
    monkeypatch.setattr(sys, "argv", [os.path.join("x", "awp", "__main__.py"), "up"])
    assert invoked_as().endswith(" -m awp")
