"""Socket path rule: in the home when short, else a private short directory."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from awp.base import sockpath
from awp.base.sockpath import (
    find_socket,
    remove_socket_pointer,
    socket_path_for_home,
    write_socket_pointer,
)


def _home_of_direct_length(tmp_path, length: int) -> str:
    """A home path whose ``<home>/awp.sock`` is exactly ``length`` bytes."""
    base = str(tmp_path) + "/"
    pad = length - len(base) - len("/awp.sock")
    assert pad > 0
    return base + "h" * pad


def _expected_name(home: str) -> str:
    return "awp-" + hashlib.sha256(home.encode()).hexdigest()[:16] + ".sock"


@pytest.fixture
def private_root(tmp_path, monkeypatch):
    """Point the /tmp fallback at a scratch dir and hide XDG_RUNTIME_DIR."""
    root = tmp_path / "tmproot"
    root.mkdir()
    monkeypatch.setattr(sockpath, "_TMP_ROOT", str(root))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return root


def test_short_home_keeps_socket_in_home(tmp_path):
    home = str(tmp_path / "home")
    assert socket_path_for_home(home) == home + "/awp.sock"


def test_boundary_is_100_bytes(tmp_path, private_root):
    at_limit = _home_of_direct_length(tmp_path, 100)
    assert socket_path_for_home(at_limit) == at_limit + "/awp.sock"
    over = _home_of_direct_length(tmp_path, 101)
    assert socket_path_for_home(over) != over + "/awp.sock"


def test_length_counts_bytes_not_characters(tmp_path, private_root):
    # Two-byte characters: exactly 100 characters, but more than 100 bytes.
    base = str(tmp_path) + "/"
    home = base + "é" * (100 - len(base) - len("/awp.sock"))
    assert len(home + "/awp.sock") <= 100 < len((home + "/awp.sock").encode())
    assert socket_path_for_home(home).endswith(_expected_name(home))


def test_long_home_uses_xdg_runtime_dir(tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    home = str(tmp_path) + "/" + "x" * 120
    assert socket_path_for_home(home) == os.path.join(str(runtime), _expected_name(home))


def test_missing_xdg_runtime_dir_falls_back_to_tmp(tmp_path, monkeypatch, private_root):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "does-not-exist"))
    home = str(tmp_path) + "/" + "x" * 120
    private = private_root / f"awp-{os.getuid()}"
    assert socket_path_for_home(home) == os.path.join(str(private), _expected_name(home))


def test_long_home_without_xdg_creates_private_dir(tmp_path, private_root):
    home = str(tmp_path) + "/" + "x" * 120
    path = socket_path_for_home(home)
    private = private_root / f"awp-{os.getuid()}"
    assert path == os.path.join(str(private), _expected_name(home))
    st = os.lstat(private)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    # Stable: the same home always maps to the same socket.
    assert socket_path_for_home(home) == path


def test_default_fallback_root_is_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = str(tmp_path) + "/" + "x" * 120
    path = socket_path_for_home(home, create=False)
    assert path == f"/tmp/awp-{os.getuid()}/{_expected_name(home)}"


def test_create_false_does_not_make_the_dir(tmp_path, private_root):
    home = str(tmp_path) + "/" + "x" * 120
    socket_path_for_home(home, create=False)
    assert not (private_root / f"awp-{os.getuid()}").exists()
    # find_socket is the client's view: it must not create it either.
    os.makedirs(home)
    find_socket(home)
    assert not (private_root / f"awp-{os.getuid()}").exists()


def test_wide_private_dir_is_tightened(tmp_path, private_root):
    private = private_root / f"awp-{os.getuid()}"
    private.mkdir()
    os.chmod(private, 0o755)
    socket_path_for_home(str(tmp_path) + "/" + "x" * 120)
    assert stat.S_IMODE(os.lstat(private).st_mode) == 0o700


def test_symlinked_private_dir_is_refused(tmp_path, private_root):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(target, private_root / f"awp-{os.getuid()}")
    with pytest.raises(OSError, match="symlink"):
        socket_path_for_home(str(tmp_path) + "/" + "x" * 120)
    with pytest.raises(OSError, match="symlink"):
        socket_path_for_home(str(tmp_path) + "/" + "x" * 120, create=False)


def test_private_path_that_is_a_file_is_refused(tmp_path, private_root):
    (private_root / f"awp-{os.getuid()}").write_text("")
    with pytest.raises(OSError, match="not a directory"):
        socket_path_for_home(str(tmp_path) + "/" + "x" * 120)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand the dir to another uid")
def test_private_dir_of_another_user_is_refused(tmp_path, private_root):
    private = private_root / f"awp-{os.getuid()}"
    private.mkdir(mode=0o700)
    os.chown(private, 54321, -1)
    with pytest.raises(OSError, match="belongs to uid 54321"):
        socket_path_for_home(str(tmp_path) + "/" + "x" * 120)


def test_find_socket_without_pointer(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home)
    assert find_socket(home) == home + "/awp.sock"
    # A home that does not exist yet is not an error either.
    assert find_socket(str(tmp_path / "nope")) == str(tmp_path / "nope") + "/awp.sock"


def test_pointer_round_trip(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home)
    write_socket_pointer(home, "/run/user/1000/awp-0123456789abcdef.sock")
    pointer = os.path.join(home, "awp.sock.path")
    assert stat.S_IMODE(os.stat(pointer).st_mode) == 0o600
    assert find_socket(home) == "/run/user/1000/awp-0123456789abcdef.sock"
    # Rewriting replaces it; no temp files are left behind.
    write_socket_pointer(home, "/tmp/awp-0/other.sock")
    assert find_socket(home) == "/tmp/awp-0/other.sock"
    assert sorted(os.listdir(home)) == ["awp.sock.path"]
    remove_socket_pointer(home)
    assert find_socket(home) == home + "/awp.sock"
    remove_socket_pointer(home)  # idempotent


def test_pointer_content_is_stripped_and_empty_ignored(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home)
    pointer = os.path.join(home, "awp.sock.path")
    with open(pointer, "w") as f:
        f.write("  /tmp/x.sock \n\n")
    assert find_socket(home) == "/tmp/x.sock"
    with open(pointer, "w") as f:
        f.write("\n")
    assert find_socket(home) == home + "/awp.sock"
