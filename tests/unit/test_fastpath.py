"""The typer-free parser of the common verbs: same values as typer, or step aside."""

import pytest

from awp.cli.fastpath import home_first, parse


def test_plain_lines_parse_to_the_typer_parameters():
    assert parse("status", []) == {"home": None, "as_json": False}
    assert parse("status", ["--json", "--home", "/h"]) == {"home": "/h", "as_json": True}
    assert parse("read", ["thr_x", "-n", "5", "--no-mark"]) == {
        "home": None, "as_json": False, "last": 5, "peer": None, "no_mark": True,
        "target": "thr_x"}
    assert parse("read", ["-n5"])["last"] == 5
    assert parse("read", ["--last=7", "-pbob"])["peer"] == "bob"
    got = parse("send", ["w", "--data", "{}", "-s", "subj", "hello", "there", "--data=[1]",
                         "-f", "a.txt", "--file", "b.txt", "--wait-ack", "0"])
    assert got["args"] == ["w", "hello", "there"]
    assert got["data"] == ["{}", "[1]"] and got["files"] == ["a.txt", "b.txt"]
    assert got["subject"] == "subj" and got["wait_ack"] == "0" and got["code"] == []
    assert parse("send", ["w", "-"])["args"] == ["w", "-"]
    assert parse("send", ["--", "-x", "hi"])["args"] == ["-x", "hi"]
    assert parse("send", [])["args"] is None
    assert parse("wait", ["--thread", "thr_1", "--state", "done", "--timeout", "2m"]) == {
        "home": None, "as_json": False, "thread": "thr_1", "peer": None, "states": "done",
        "timeout": "2m"}
    assert parse("tail", ["--once", "-t", "thr_1"])["thread"] == "thr_1"
    assert parse("threads", ["--open", "--wide", "-p", "bob"])["open_only"] is True


def test_lists_are_not_shared_between_calls():
    a = parse("send", ["w", "x", "--code", "a.py"])
    b = parse("send", ["w", "x"])
    assert a["code"] == ["a.py"] and b["code"] == []


@pytest.mark.parametrize("verb, args", [
    ("status", ["--help"]),
    ("status", ["-h"]),
    ("status", ["extra"]),
    ("read", ["a", "b"]),
    ("read", ["-n", "many"]),
    ("read", ["-n"]),
    ("send", ["-AbC12", "hi"]),      # a key prefix: run_app knows where it goes
    ("send", ["w", "x", "--bogus"]),
    ("status", ["--json=yes"]),
    ("up", []),                       # not a fast verb
])
def test_anything_unusual_is_left_to_typer(verb, args):
    assert parse(verb, args) is None


def test_home_before_the_verb():
    assert home_first(["--home", "/h", "status"]) == ["status", "--home", "/h"]
    assert home_first(["--home=/h", "peers", "--json"]) == ["peers", "--home=/h", "--json"]
