"""The typer-free parser of the everyday commands: same values as typer, or step aside."""

import pytest

from awp.cli.fastpath import HELP, home_first, parse


def vals(*words):
    got = parse(list(words))
    assert got is not None, words
    return got[1]


def test_plain_lines_parse_to_the_typer_parameters():
    assert vals("status") == {"home": None, "as_json": False}
    assert vals("status", "--json", "--home", "/h") == {"home": "/h", "as_json": True}
    assert vals("read", "thr_x", "-n", "5", "--no-mark") == {
        "home": None, "as_json": False, "last": 5, "peer": None, "no_mark": True,
        "target": "thr_x"}
    assert vals("read", "-n5")["last"] == 5
    assert vals("read", "--last=7", "-pbob")["peer"] == "bob"
    got = vals("send", "w", "--data", "{}", "-s", "subj", "hello", "there", "--data=[1]",
               "-f", "a.txt", "--file", "b.txt", "--wait-ack", "0")
    assert got["args"] == ["w", "hello", "there"]
    assert got["data"] == ["{}", "[1]"] and got["files"] == ["a.txt", "b.txt"]
    assert got["subject"] == "subj" and got["wait_ack"] == "0" and got["code"] == []
    assert vals("send", "w", "-")["args"] == ["w", "-"]
    assert vals("send", "--", "-x", "hi")["args"] == ["-x", "hi"]
    assert vals("send")["args"] is None
    assert vals("wait", "--thread", "thr_1", "--state", "done", "--timeout", "2m") == {
        "home": None, "as_json": False, "thread": "thr_1", "peer": None, "states": "done",
        "timeout": "2m", "any_": False}
    assert vals("wait", "-t", "thr_1", "--state", "done", "--any")["any_"] is True
    assert vals("tail", "--once", "-t", "thr_1")["thread"] == "thr_1"
    assert vals("threads", "--open", "--wide", "-p", "bob")["open_only"] is True


def test_board_lines():
    assert vals("get", "a/ops", "-n", "0", "--since", "2h") == {
        "topic": "a/ops", "n": 0, "since": "2h", "thread": None, "save": None, "wait": False,
        "timeout": "5m", "home": None, "as_json": False}
    assert vals("get", "a/ops", "--wait", "--timeout", "10s")["timeout"] == "10s"
    got = vals("topic", "--home", "/h", "create", "jobs", "--queue", "--lease", "5m")
    assert got["home"] == "/h" and got["queue"] is True and got["name"] == "jobs"
    assert vals("topic", "set", "jobs", "--no-queue")["queue"] is False
    assert vals("topic", "revoke", "ops")["peer"] is None
    assert vals("topic", "revoke", "ops", "bob")["peer"] == "bob"
    assert vals("complete", "a/jobs", "9f0c.1") == {
        "topic": "a/jobs", "lease": "9f0c.1", "home": None, "as_json": False}
    assert vals("post", "ops", "-")["args"] == ["ops", "-"]


def test_lists_are_not_shared_between_calls():
    a = vals("send", "w", "x", "--code", "a.py")
    b = vals("send", "w", "x")
    assert a["code"] == ["a.py"] and b["code"] == []


def test_help_anywhere_an_option_may_be():
    assert parse(["post", "ops", "-h"]) == ("post", HELP)
    assert parse(["topic", "grant", "--help"]) == ("topic grant", HELP)
    assert parse(["topic", "--help"]) == ("topic", HELP)
    assert parse(["send", "--", "--help"])[1]["args"] == ["--help"]


@pytest.mark.parametrize("args", [
    ["status", "extra"],
    ["read", "a", "b"],
    ["read", "-n", "many"],
    ["read", "-n"],
    ["send", "-AbC12", "hi"],      # a key prefix: run_app knows where it goes
    ["send", "w", "x", "--bogus"],
    ["status", "--json=yes"],
    ["get"],                        # a required argument missing
    ["complete", "a/jobs"],
    ["topic"],                      # a group without a subcommand
    ["topic", "nosuch"],
    ["nosuch"],
])
def test_anything_unusual_is_left_to_typer(args):
    assert parse(args) is None


def test_home_before_the_verb():
    assert home_first(["--home", "/h", "status"]) == ["status", "--home", "/h"]
    assert home_first(["--home=/h", "peers", "--json"]) == ["peers", "--home=/h", "--json"]
