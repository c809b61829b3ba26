"""Board CLI helpers: file parts, post sizes, --since, and saving files safely."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from awp.cli import board_files as bf
from awp.cli.base import CliError
from awp.cli.board_verbs import parts_from, policy_body
from awp.cli.verbs import build_parts

NOW = 1_790_000_000_000


def test_file_part_is_inline_standard_base64_with_a_guessed_mime(tmp_path):
    data = bytes(range(256)) * 3
    (tmp_path / "notes.md").write_bytes(data)
    p = bf.file_part(str(tmp_path / "notes.md"))
    assert p == {"k": "file", "name": "notes.md", "mime": "text/markdown", "size": 768,
                 "data": base64.b64encode(data).decode()}
    assert "+" in p["data"] or "/" in p["data"]  # standard alphabet, not url-safe
    (tmp_path / "blob").write_bytes(b"\0\1")
    assert bf.file_part(str(tmp_path / "blob"))["mime"] == "application/octet-stream"
    assert bf.file_part(str(tmp_path / "blob"), "image/png")["mime"] == "image/png"


def test_file_part_refuses_missing_files_and_directories(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        bf.file_part(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="is a directory"):
        bf.file_part(str(tmp_path))


def test_a_huge_file_is_not_loaded_but_counted(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(10 * 1024 * 1024)
    p = bf.file_part(str(big))
    assert p["data"] is None and p["size"] == 10 * 1024 * 1024
    assert bf.post_size([p]) > 13 * 1024 * 1024  # base64 counted


def test_too_big_names_the_file_and_the_limit(tmp_path):
    (tmp_path / "a.bin").write_bytes(os.urandom(50 * 1024))
    parts = [{"k": "text", "text": "here"}, bf.file_part(str(tmp_path / "a.bin"))]
    why = bf.too_big(parts, 64 * 1024, "alice/ops")
    assert why is not None
    assert "--file a.bin (50.0 KiB)" in why and "64.0 KiB" in why and "alice/ops" in why
    assert "awp send --file" in why
    # 40 KiB encodes to about 54 KiB: it fits the default, not a 32 KiB topic.
    (tmp_path / "b.bin").write_bytes(os.urandom(40 * 1024))
    parts = [bf.file_part(str(tmp_path / "b.bin"))]
    assert bf.too_big(parts, 64 * 1024, "x") is None
    assert bf.too_big(parts, 32 * 1024, "x") is not None
    # Text alone: no file named, the post is.
    why = bf.too_big([{"k": "text", "text": "x" * 70_000}], 64 * 1024, "x")
    assert why and why.startswith("the post: ")


def test_post_size_counts_json_escapes_and_utf8():
    plain = bf.post_size([{"k": "text", "text": "a" * 100}])
    quoted = bf.post_size([{"k": "text", "text": '"' * 100}])
    accented = bf.post_size([{"k": "text", "text": "é" * 100}])
    assert quoted - plain == 100 and accented - plain == 100


@pytest.mark.parametrize("name,want", [
    ("report.txt", "report.txt"),
    ("../../etc/passwd", "passwd"),
    ("..", "_."),
    (".bashrc", "_bashrc"),
    ("a\\b\\c.txt", "c.txt"),
    ("/abs/path/x", "x"),
    ("tab\there\n.txt", "tab_here_.txt"),
    ("", "file"),
    (None, "file"),
    ("dir/", "file"),
    ("  ", "file"),
])
def test_safe_name_keeps_one_plain_component(name, want):
    assert bf.safe_name(name) == want


def test_safe_name_cuts_long_names_keeping_the_extension():
    name = bf.safe_name("é" * 300 + ".tar.gz")
    assert name.endswith(".gz") and len(name.encode()) <= 200
    assert name.encode().decode() == name  # no broken character


def test_save_never_replaces_and_never_leaves_the_directory(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "r.txt").write_text("mine")
    p1 = bf.save_bytes(str(d), "r.txt", b"one")
    p2 = bf.save_bytes(str(d), "../r.txt", b"two")
    p3 = bf.save_bytes(str(d), "r", b"x")
    p4 = bf.save_bytes(str(d), "r", b"y")
    assert (d / "r.txt").read_text() == "mine"
    assert [os.path.basename(p) for p in (p1, p2, p3, p4)] == ["r-1.txt", "r-2.txt", "r", "r-1"]
    assert all(os.path.dirname(p) == str(d) for p in (p1, p2, p3, p4))
    assert not (tmp_path / "r.txt").exists()


def test_save_does_not_follow_a_planted_symlink(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    target = tmp_path / "victim"
    target.write_text("keep")
    os.symlink(target, d / "x.txt")
    path = bf.save_bytes(str(d), "x.txt", b"evil")
    assert target.read_text() == "keep"
    assert os.path.basename(path) == "x-1.txt" and Path(path).read_bytes() == b"evil"


def test_save_files_writes_file_parts_and_reports_bad_data(tmp_path):
    posts = [
        {"hash": "a" * 32, "parts": [
            {"k": "text", "text": "see attached"},
            {"k": "file", "name": "a.bin", "size": 3, "data": base64.b64encode(b"abc").decode()},
            {"k": "file", "name": "bad", "data": "!!!not base64"}]},
        {"hash": "b" * 32, "parts": [
            {"k": "file", "name": "../a.bin", "data": base64.b64encode(b"xyz").decode()}]},
    ]
    out = bf.save_files(posts, str(tmp_path / "new" / "dir"))
    assert [(s["post"][:1], s["name"]) for s in out] == [("a", "a.bin"), ("a", "bad"),
                                                          ("b", "../a.bin")]
    assert Path(out[0]["path"]).read_bytes() == b"abc"
    assert "error" in out[1] and "path" not in out[1]
    assert os.path.basename(out[2]["path"]) == "a-1.bin"
    assert Path(out[2]["path"]).read_bytes() == b"xyz"


def test_since_takes_durations_and_rfc3339():
    assert bf.parse_since("2h", NOW) == NOW - 7_200_000
    assert bf.parse_since("90", NOW) == NOW - 90_000
    assert bf.parse_since("2026-09-21T14:00:00Z", NOW) == 1_789_999_200_000
    assert bf.parse_since("2026-09-21T16:00:00+02:00", NOW) == 1_789_999_200_000
    assert bf.parse_since("1970-01-01T00:00:01Z", NOW) == 1000
    with pytest.raises(ValueError, match="neither a duration"):
        bf.parse_since("yesterday", NOW)


def test_data_at_file_reads_the_json_for_send_and_post(tmp_path):
    (tmp_path / "d.json").write_text('{"build": 42}')
    parts = build_parts("", [], None, [f"@{tmp_path / 'd.json'}"], "application/json")
    assert parts == [{"k": "data", "mime": "application/json", "data": {"build": 42}}]
    with pytest.raises(CliError, match="no such file"):
        build_parts("", [], None, [f"@{tmp_path / 'missing'}"], "application/json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CliError, match=r"--data in .*bad.json is not valid JSON"):
        build_parts("", [], None, [f"@{tmp_path / 'bad.json'}"], "application/json")


def test_post_parts_are_send_parts_plus_inline_files(tmp_path):
    (tmp_path / "fix.py").write_text("print(1)\n")
    (tmp_path / "f.txt").write_bytes(b"hi")
    parts = parts_from(["deploy", "is", "green"], [str(tmp_path / "fix.py")], None,
                       ['{"ok":true}'], "application/json", [str(tmp_path / "f.txt")])
    assert [p["k"] for p in parts] == ["text", "code", "data", "file"]
    assert parts[0]["text"] == "deploy is green" and parts[1]["lang"] == "python"
    assert parts[3]["data"] == "aGk="
    with pytest.raises(CliError, match="nothing to post"):
        parts_from([], [], None, [], "application/json", [])
    with pytest.raises(CliError, match="--file .*: no such file"):
        parts_from(["x"], [], None, [], "application/json", [str(tmp_path / "nope")])


def test_policy_sends_only_what_was_given():
    none = dict(title=None, open_=False, read=None, post=None, keep=None, keep_days=None,
                keep_bytes=None, rate=None, max_post=None, queue=None, lease=None,
                attempts=None)
    assert policy_body(**none) == {}
    assert policy_body(**{**none, "open_": True}) == {"read": "open", "post": "open"}
    body = policy_body(**{**none, "keep_bytes": "1MiB", "max_post": "16KiB", "lease": "5m",
                          "queue": False, "rate": 0, "title": ""})
    assert body == {"keep_bytes": 1 << 20, "max_post": 16384, "lease_s": 300, "queue": False,
                    "rate": 0, "title": ""}
    for bad in ({"read": "public"}, {"open_": True, "post": "grant"}, {"max_post": "lots"},
                {"lease": "1.5s"}, {"lease": "0"}):
        with pytest.raises(CliError) as e:
            policy_body(**{**none, **bad})
        assert e.value.code == 2
