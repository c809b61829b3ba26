"""fs:read and fs:write result shapes (confinement is in test_serve_fsroot.py)."""

from __future__ import annotations

import base64
import os

import pytest

from awp.serve.fs import MAX_ENTRIES, fs_read, fs_write, mode_string

KIB64 = 64 * 1024


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def scratch(tmp_path):
    s = tmp_path / "scratch"
    s.mkdir()
    return s


def read(root, data, scratch=None, **kw):
    return fs_read(str(root), data, scratch_dir=str(scratch) if scratch else None, **kw)


# ---- fs:read ---------------------------------------------------------------


def test_read_small_text_exact_shape(root):
    (root / "go.mod").write_text("module x\n")
    os.chmod(root / "go.mod", 0o644)
    res, blob = read(root, {"path": "go.mod", "offset": 0, "length": 65536})
    assert blob is None
    assert res == {
        "path": "go.mod",
        "size": 9,
        "offset": 0,
        "length": 9,
        "mode": "0644",
        "encoding": "utf-8",
        "content": "module x\n",
    }


def test_read_mode_strings(root):
    f = root / "secret"
    f.write_text("x")
    os.chmod(f, 0o600)
    assert read(root, {"path": "secret"})[0]["mode"] == "0600"
    os.chmod(f, 0o4755)
    assert read(root, {"path": "secret"})[0]["mode"] == "4755"
    assert mode_string(0o100640) == "0640"


def test_read_offset_and_length(root):
    (root / "f").write_bytes(b"0123456789")
    res, _ = read(root, {"path": "f", "offset": 3, "length": 4})
    assert (res["offset"], res["length"], res["content"], res["size"]) == (3, 4, "3456", 10)
    res, _ = read(root, {"path": "f", "offset": 8})
    assert (res["length"], res["content"]) == (2, "89")
    res, _ = read(root, {"path": "f", "offset": 50, "length": 4})
    assert (res["offset"], res["length"], res["content"]) == (50, 0, "")
    res, _ = read(root, {"path": "f", "length": 0})
    assert (res["length"], res["content"], res["encoding"]) == (0, "", "utf-8")


def test_read_empty_file(root):
    (root / "empty").write_bytes(b"")
    res, blob = read(root, {"path": "empty"})
    assert blob is None
    assert res["size"] == 0 and res["length"] == 0 and res["content"] == ""


def test_read_binary_is_base64(root):
    data = bytes(range(256))
    (root / "bin").write_bytes(data)
    res, blob = read(root, {"path": "bin"})
    assert blob is None
    assert res["encoding"] == "base64"
    assert base64.b64decode(res["content"]) == data
    assert res["length"] == 256


def test_read_exactly_64k_inline(root, scratch):
    (root / "f").write_bytes(b"a" * KIB64)
    res, blob = read(root, {"path": "f"}, scratch)
    assert blob is None
    assert res["length"] == KIB64 and res["size"] == KIB64
    assert res["encoding"] == "utf-8" and res["content"] == "a" * KIB64
    assert "blob" not in res


def test_read_exactly_64k_binary_inline(root, scratch):
    data = os.urandom(KIB64)
    (root / "f").write_bytes(data)
    res, blob = read(root, {"path": "f"}, scratch)
    assert blob is None and res["encoding"] == "base64"
    assert base64.b64decode(res["content"]) == data


def test_read_64k_plus_one_is_blob(root, scratch):
    data = os.urandom(KIB64 + 1)
    (root / "big.bin").write_bytes(data)
    res, blob = read(root, {"path": "big.bin"}, scratch)
    assert res == {
        "path": "big.bin",
        "size": KIB64 + 1,
        "offset": 0,
        "length": KIB64 + 1,
        "mode": mode_string(os.stat(root / "big.bin").st_mode),
        "blob": "big.bin",
    }
    assert blob is not None and os.path.dirname(blob) == str(scratch)
    with open(blob, "rb") as f:
        assert f.read() == data


def test_read_large_range_blob_and_length_limits_inline(root, scratch):
    data = os.urandom(300_000)
    (root / "f").write_bytes(data)
    res, blob = read(root, {"path": "f", "offset": 1000, "length": 200_000}, scratch)
    assert res["length"] == 200_000 and res["offset"] == 1000
    with open(blob, "rb") as f:
        assert f.read() == data[1000:201_000]
    # asking for exactly 64 KiB of a bigger file stays inline
    res, blob = read(root, {"path": "f", "offset": 0, "length": KIB64}, scratch)
    assert blob is None and res["length"] == KIB64
    assert base64.b64decode(res["content"]) == data[:KIB64]


def test_read_blob_name_sanitised(root, scratch):
    (root / "we ird:name.log").write_bytes(b"x" * (KIB64 + 5))
    (root / ".hidden").write_bytes(b"x" * (KIB64 + 5))
    assert read(root, {"path": "we ird:name.log"}, scratch)[0]["blob"] == "we_ird_name.log"
    assert read(root, {"path": ".hidden"}, scratch)[0]["blob"] == "b_.hidden"


def test_read_over_max_blob_refused(root, scratch):
    (root / "f").write_bytes(b"x" * 200_000)
    res, blob = read(root, {"path": "f"}, scratch, max_blob=100_000)
    assert blob is None
    assert res["path"] == "f" and "blob limit" in res["error"]
    assert os.listdir(scratch) == []


def test_read_directory_listing(root):
    (root / "b.txt").write_text("b")
    (root / "a.txt").write_text("a")
    (root / "zdir").mkdir()
    (root / "adir").mkdir()
    (root / "adir" / "inner").write_text("i")
    (root / "link").symlink_to("adir")
    os.chmod(root / "adir", 0o750)
    res, blob = read(root, {"path": "."})
    assert blob is None
    assert res == {
        "path": ".",
        "size": 5,
        "offset": 0,
        "length": 5,
        "mode": mode_string(os.stat(root).st_mode),
        "dir": True,
        # sorted; subdirectories end in "/"; a symlink is listed as itself
        "entries": ["a.txt", "adir/", "b.txt", "link", "zdir/"],
    }
    res, _ = read(root, {"path": "adir"})
    assert res["entries"] == ["inner"] and res["mode"] == "0750" and res["dir"] is True
    res, _ = read(root, {"path": ""})
    assert res["dir"] is True and res["path"] == ""
    res, _ = read(root, {"path": "adir/"})
    assert res["entries"] == ["inner"]


def test_read_directory_listing_capped(root, monkeypatch):
    import awp.serve.fs as fsmod

    monkeypatch.setattr(fsmod, "MAX_ENTRIES", 3)
    for i in range(5):
        (root / f"f{i}").write_text("")
    res, _ = read(root, {"path": "."})
    assert res["size"] == 5 and res["length"] == 3
    assert res["entries"] == ["f0", "f1", "f2"] and res["entries_truncated"] is True
    assert MAX_ENTRIES == 10_000


def test_read_errors_keep_path(root):
    res, blob = read(root, {"path": "nope.txt"})
    assert blob is None
    assert res == {"error": "no such file or directory: nope.txt", "path": "nope.txt"}
    res, _ = read(root, {"path": "no/such/dir/f"})
    assert (
        res["error"].startswith("no such file or directory: no") and res["path"] == "no/such/dir/f"
    )
    (root / "file").write_text("x")
    res, _ = read(root, {"path": "file/inner"})
    assert res == {"error": "not a directory: file", "path": "file/inner"}


def test_read_bad_input_never_raises(root):
    for data in (
        None,
        "x",
        [],
        5,
        {},
        {"path": 5},
        {"path": "f", "offset": -1},
        {"path": "f", "offset": "3"},
        {"path": "f", "length": True},
        {"path": "f", "length": 1.5},
    ):
        res, blob = read(root, data)
        assert set(res) <= {"error", "path"} and res["error"], data
        assert blob is None
    assert read(root, {})[0] == {"error": "path is required"}


def test_read_fifo_refused_without_blocking(root):
    os.mkfifo(root / "pipe")
    res, _ = read(root, {"path": "pipe"})
    assert res == {"error": "not a regular file or directory: pipe", "path": "pipe"}


def test_read_missing_root():
    res, blob = fs_read("/nonexistent/awp-root", {"path": "a"})
    assert "cannot be opened" in res["error"] and blob is None


# ---- fs:write --------------------------------------------------------------


def test_write_create_exact_shape(root):
    res = fs_write(str(root), {"path": "notes.md", "content": "héllo\n"})
    assert res == {"path": "notes.md", "written": len("héllo\n".encode())}
    assert (root / "notes.md").read_text() == "héllo\n"


def test_write_overwrites_and_truncates(root):
    (root / "f").write_text("a long original text")
    assert fs_write(str(root), {"path": "f", "content": "short", "append": False})["written"] == 5
    assert (root / "f").read_text() == "short"


def test_write_append(root):
    (root / "log").write_text("one\n")
    res = fs_write(str(root), {"path": "log", "content": "two\n", "append": True})
    assert res == {"path": "log", "written": 4}
    assert (root / "log").read_text() == "one\ntwo\n"
    # append creates a missing file
    fs_write(str(root), {"path": "new", "content": "x", "append": True})
    assert (root / "new").read_text() == "x"


def test_write_base64(root):
    data = bytes(range(256)) * 3
    res = fs_write(
        str(root),
        {"path": "b.bin", "content": base64.b64encode(data).decode(), "encoding": "base64"},
    )
    assert res == {"path": "b.bin", "written": 768}
    assert (root / "b.bin").read_bytes() == data


def test_write_bad_base64(root):
    res = fs_write(str(root), {"path": "b", "content": "@@not base64", "encoding": "base64"})
    assert res == {"error": "content is not valid base64", "path": "b"}
    assert not (root / "b").exists()


def test_write_mkdir_creates_parents(root):
    res = fs_write(
        str(root),
        {
            "path": "notes/deep/er/todo.md",
            "content": "x",
            "encoding": "utf-8",
            "append": False,
            "mkdir": True,
        },
    )
    assert res == {"path": "notes/deep/er/todo.md", "written": 1}
    assert (root / "notes/deep/er/todo.md").read_text() == "x"
    # existing parents are fine with mkdir too
    assert fs_write(str(root), {"path": "notes/b", "content": "", "mkdir": True})["written"] == 0


def test_write_without_mkdir_missing_parent(root):
    res = fs_write(str(root), {"path": "missing/f", "content": "x"})
    assert res == {"error": "no such file or directory: missing", "path": "missing/f"}
    assert not (root / "missing").exists()


def test_write_mkdir_through_a_file(root):
    (root / "file").write_text("x")
    res = fs_write(str(root), {"path": "file/sub/f", "content": "x", "mkdir": True})
    assert res == {"error": "not a directory: file", "path": "file/sub/f"}


def test_write_errors(root):
    (root / "d").mkdir()
    cases = [
        ({"path": "d", "content": "x"}, "is a directory: d"),
        ({"path": "x/", "content": "x"}, "is a directory: x"),
        ({"path": ".", "content": "x"}, "cannot write to the root directory"),
        ({"path": "f"}, "content is required (a string)"),
        ({"path": "f", "content": 5}, "content is required (a string)"),
        (
            {"path": "f", "content": "x", "encoding": "latin-1"},
            'encoding must be "utf-8" or "base64"',
        ),
        ({"path": "f", "content": "x", "append": "yes"}, "append must be true or false"),
        ({"path": "f", "content": "x", "mkdir": 1}, "mkdir must be true or false"),
    ]
    for data, err in cases:
        assert fs_write(str(root), data) == {"error": err, "path": data["path"]}, data
    assert fs_write(str(root), {"content": "x"}) == {"error": "path is required"}
    assert fs_write(str(root), "nope") == {"error": "request data must be an object"}
    assert fs_write(str(root), None) == {"error": "request data must be an object"}
    assert not (root / "f").exists()


def test_write_max_bytes(root):
    res = fs_write(str(root), {"path": "f", "content": "x" * 10}, max_bytes=5)
    assert "exceeds the limit" in res["error"] and not (root / "f").exists()


def test_write_fifo_refused(root):
    os.mkfifo(root / "pipe")
    assert fs_write(str(root), {"path": "pipe", "content": "x"}) == {
        "error": "not a regular file: pipe",
        "path": "pipe",
    }
