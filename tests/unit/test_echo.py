"""The one helper that quotes a value in an error, cut (issue 20 item 3)."""

from __future__ import annotations

from awp.base.echo import ECHO_CHARS, MESSAGE_CHARS, cut_message, echo


def test_short_values_are_quoted_whole() -> None:
    assert echo("bob") == "'bob'"
    assert echo(5) == "5"
    assert echo("x" * ECHO_CHARS) == repr("x" * ECHO_CHARS)


def test_long_values_keep_their_head_and_say_their_length() -> None:
    out = echo("a" * (5 << 20))
    assert out == f"{'a' * ECHO_CHARS!r}… ({5 << 20} characters)"
    assert echo(list(range(10_000))).endswith("characters)")
    assert len(echo(list(range(10_000)))) < 2 * ECHO_CHARS


def test_a_whole_message_is_cut_with_what_is_left_out() -> None:
    assert cut_message("short") == "short"
    out = cut_message("m" * (MESSAGE_CHARS + 10))
    assert out.startswith("m" * MESSAGE_CHARS) and out.endswith("(10 more characters not shown)")
