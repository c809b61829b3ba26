"""Files go out with a type the receiving agent can act on."""

from awp.node.mime import guess_mime, looks_like_text


def test_known_extensions_use_the_table():
    assert guess_mime("a.py", b"\0") == "text/x-python"
    assert guess_mime("a.png", b"hello") == "image/png"


def test_unknown_names_are_sniffed():
    assert guess_mime("build.log", b"ok\nFAIL auth_test\n") == "text/plain; charset=utf-8"
    assert guess_mime("Makefile", b"all:\n\tgo build\n") == "text/plain; charset=utf-8"
    assert guess_mime("core.dump", b"\x7fELF\x02\x01\x01\0") == "application/octet-stream"
    assert guess_mime("x.bin", b"\xff\xfe\xfd") == "application/octet-stream"


def test_a_character_cut_by_the_sniff_window_is_still_text():
    data = ("x" * 10 + "é").encode()
    assert looks_like_text(data[:-1])
    assert not looks_like_text(b"abc\xffdef")
