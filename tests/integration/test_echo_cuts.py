"""Errors never repeat a huge argument: the local API, the CLI (issue 20 item 3)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from nodes import ROOT

from awp.localapi.client import ApiFailure


def test_a_50000_character_peer_name_is_a_clear_400(node) -> None:
    for path, body in (("/v1/send", {"parts": [{"k": "text", "text": "x"}]}),
                       ("/v1/resolve", {}), ("/v1/inbox", {})):
        with pytest.raises(ApiFailure) as e:
            node.api("POST", path, {**body, "peer": "p" * 50_000})
        assert e.value.status == 400 and e.value.code == "bad_peer", (path, e.value.message)
        assert "at most 512 characters" in e.value.message
        assert "(50000 characters)" in e.value.message and len(e.value.message) < 400
        assert "OperationalError" not in e.value.message


def test_an_unknown_huge_thread_is_named_by_its_head_and_length(node) -> None:
    with pytest.raises(ApiFailure) as e:
        node.api("POST", "/v1/inbox", {"th": "t" * (5 << 20)})
    assert e.value.status == 404 and e.value.code == "unknown_thread"
    assert len(e.value.message) < 400 and f"({5 << 20} characters)" in e.value.message


def test_cli_errors_cut_the_value_they_quote(node) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    big = "q" * 100_000
    for args in (["send", big, "hello"], ["read", big], ["wait", "-t", big, "--timeout", "1"]):
        p = subprocess.run([sys.executable, "-m", "awp", "--home", node.home, *args],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert p.returncode != 0, (args[0], p.stdout[:200])
        assert len(p.stderr) < 1000 and "(100000 characters)" in p.stderr, (args[0],
                                                                            p.stderr[:300])
