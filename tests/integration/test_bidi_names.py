"""awp get --save writes a bidi-laden file name safely, as awp send's files are (issue 20 item 15)."""

from __future__ import annotations

import json
import os

from nodes import wait_for
from test_board_cli import pair, posted, subscribed
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401

EVIL = "x\u202etxt.exe"  # shows as "xexe.txt"


def test_get_save_strips_bidi_controls_from_file_names(homes, cli_root):
    a, b = pair(homes)
    a.ok("topic", "create", "drop", "--open")
    subscribed(b, "alice/drop")
    path = os.path.join(cli_root, EVIL)
    with open(path, "wb") as f:
        f.write(b"MZ not really")
    posted(b.ok("post", "alice/drop", "a file", "--file", path))
    inbox = os.path.join(cli_root, "in")

    def saved():
        res = json.loads(a.ok("get", "drop", "--save", inbox, "--json").stdout)
        return res["saved"] or None

    (s,) = wait_for(saved, 20, "the file saved at alice")
    assert os.path.basename(s["path"]) == "x_txt.exe"
    assert os.listdir(inbox) == ["x_txt.exe"]
    out = a.ok("get", "drop").stdout
    assert "\u202e" not in out and "file x_txt.exe" in out
