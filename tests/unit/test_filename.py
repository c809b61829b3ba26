"""The one file-name sanitiser, for awp send's files and awp get --save (issue 20 item 15)."""

from __future__ import annotations

import pytest

from awp.base.filename import safe_name
from awp.cli import board_files
from awp.store import blobs

BIDI = ["\u202e", "\u202d", "\u202a", "\u202b", "\u202c", "\u2066", "\u2067", "\u2068",
        "\u2069", "\u200e", "\u200f", "\u061c"]


@pytest.mark.parametrize("ch", BIDI)
def test_bidi_controls_never_reach_a_file_name(ch):
    for name in (f"x{ch}txt.exe", f"{ch}report.pdf", f"a{ch}"):
        for out in (safe_name(name), board_files.safe_name(name), blobs.safe_name(name)):
            assert ch not in out and all(c.isprintable() for c in out), (name, out)
    assert safe_name(f"x{ch}txt.exe") == "x_txt.exe"


def test_invisible_and_separator_characters_are_shown_as_underscores():
    assert safe_name("a\u200bb\ufeffc\u2028d\x00e.txt") == "a_b_c_d_e.txt"
    assert safe_name("caf\u00e9.txt") == "café.txt"  # a plain letter stays
    assert blobs.safe_name("caf\u00e9.txt") == "caf_.txt"  # the daemon's own paths: ASCII


def test_both_callers_use_the_one_sanitiser():
    assert board_files.safe_name is safe_name
    assert blobs.safe_name("../..") == "_."  # the same rules, ASCII only
