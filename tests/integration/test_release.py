"""A release as a user gets it (issue 38): built twice to the same bytes, signed,
checked by ``awp verify-release``, and installed into a fresh venv that runs awp."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv

import pytest
from nodes import ROOT


def _awp(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "awp", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd or ROOT)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    # a release is built from a git checkout: the README's test command runs in a clone
    assert shutil.which("git") and os.path.exists(os.path.join(ROOT, ".git")), \
        "scripts/release.py builds from a git checkout"
    base = tmp_path_factory.mktemp("release")
    key_home = str(base / "key")
    os.makedirs(key_home)
    outs = []
    for n in (1, 2):
        out = str(base / f"dist{n}")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "release.py"),
                            "--key-home", key_home, "--out", out, "--dirty"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(out)
    with open(os.path.join(key_home, "identity.json")) as f:
        key = json.load(f)["key"]
    return outs, key


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_the_same_commit_builds_the_same_bytes_and_verifies(releases):
    (one, two), key = releases
    assert _read(os.path.join(one, "SHA256SUMS")) == _read(os.path.join(two, "SHA256SUMS"))
    names = sorted(os.listdir(one))
    assert any(n.endswith(".whl") for n in names) and any(n.endswith(".tar.gz") for n in names)
    r = _awp("verify-release", one, "--key", key)
    assert r.returncode == 0 and "good: 2 file(s)" in r.stdout, r.stdout + r.stderr
    wheel = next(n for n in names if n.endswith(".whl"))
    assert _awp("verify-release", os.path.join(one, wheel), "--key", key).returncode == 0
    # without a key to trust, nothing is called good
    r = _awp("verify-release", one)
    assert r.returncode == 2 and "--key" in r.stderr


def test_one_changed_byte_is_caught_and_named(releases, tmp_path):
    (one, _two), key = releases
    bad = str(tmp_path / "bad")
    shutil.copytree(one, bad)
    wheel = next(n for n in os.listdir(bad) if n.endswith(".whl"))
    data = bytearray(_read(os.path.join(bad, wheel)))
    data[len(data) // 2] ^= 0x01
    with open(os.path.join(bad, wheel), "wb") as f:
        f.write(data)
    r = _awp("verify-release", bad, "--key", key)
    assert r.returncode == 1 and wheel in r.stderr and "changed" in r.stderr, r.stderr
    # a SHA256SUMS edited to match is no longer what the key signed
    sums = os.path.join(bad, "SHA256SUMS")
    import hashlib

    text = _read(sums).decode()
    old = next(ln.split()[0] for ln in text.splitlines() if ln.endswith(wheel))
    with open(sums, "w") as f:
        f.write(text.replace(old, hashlib.sha256(bytes(data)).hexdigest()))
    r = _awp("verify-release", bad, "--key", key)
    assert r.returncode == 1 and "SHA256SUMS.sig" in r.stderr, r.stderr
    # a missing file is named too
    shutil.rmtree(bad)
    shutil.copytree(one, bad)
    sdist = next(n for n in os.listdir(bad) if n.endswith(".tar.gz"))
    os.remove(os.path.join(bad, sdist))
    r = _awp("verify-release", bad, "--key", key)
    assert r.returncode == 1 and sdist in r.stderr and "missing" in r.stderr, r.stderr


def test_the_wheel_installs_in_a_fresh_venv_and_runs(releases, tmp_path):
    (one, _two), _key = releases
    wheel = next(n for n in os.listdir(one) if n.endswith(".whl"))
    env_dir = str(tmp_path / "venv")
    venv.create(env_dir, with_pip=True)
    py = os.path.join(env_dir, "bin", "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", os.path.join(one, wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    # installed under its own name (the index's `awp` is another project)
    shown = subprocess.run([py, "-m", "pip", "show", "awp-peer"], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "Name: awp-peer" in shown.stdout, shown.stdout
    awp = os.path.join(env_dir, "bin", "awp")
    home = str(tmp_path / "home")
    env = {k: v for k, v in os.environ.items() if k not in ("AWP_HOME", "PYTHONPATH")}
    outside = str(tmp_path)  # not the checkout: the installed code must stand alone
    v = subprocess.run([awp, "--version"], capture_output=True, text=True, timeout=60,
                       cwd=outside, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    assert v.returncode == 0 and f"commit {head[:12]}" in v.stdout, v.stdout + v.stderr
    try:
        up = subprocess.run([awp, "up", "--home", home, "--listen", "tcp:127.0.0.1:0",
                             "--no-tailcat"], capture_output=True, text=True, timeout=60,
                            cwd=outside, env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        st = subprocess.run([awp, "status", "--home", home, "--json"], capture_output=True,
                            text=True, timeout=60, cwd=outside, env=env)
        assert st.returncode == 0 and json.loads(st.stdout)["key"].startswith("ed25519:"), st
    finally:
        subprocess.run([awp, "down", "--home", home], capture_output=True, timeout=60,
                       cwd=outside, env=env)


def test_a_build_from_the_clone_records_its_commit(tmp_path):
    """`pipx install .` / `pip install .` from a clone builds a wheel there: it carries the
    commit (awp/COMMIT, written by setup.py's build step), so `awp --version` says it."""
    import zipfile

    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    assert len(head) == 40, "the suite runs in a git checkout"
    out = str(tmp_path / "wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "-w", out, ROOT], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    [wheel] = [n for n in os.listdir(out) if n.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(out, wheel)) as z:
        assert z.read("awp/COMMIT").decode().strip() == head
    assert not os.path.exists(os.path.join(ROOT, "awp", "COMMIT"))  # the clone is untouched
