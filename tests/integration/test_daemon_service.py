"""The daemon under a service manager: readiness, clean stop, the unit command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from nodes import ROOT, free_port


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env["PYTHONPATH"] = ROOT
    env.update(extra)
    return env


def test_notify_ready_then_clean_stop_on_sigterm(tmp_home_root):
    notify = os.path.join(tmp_home_root, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    sock.settimeout(20)
    home = os.path.join(tmp_home_root, "h")
    proc = subprocess.Popen(
        [sys.executable, "-m", "awp", "daemon", "--home", home, "--no-tailcat",
         "--listen", f"tcp:127.0.0.1:{free_port()}"],
        env=_env(NOTIFY_SOCKET=notify), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert sock.recv(100) == b"READY=1"
        assert os.path.exists(os.path.join(home, "daemon.pid"))
        assert oct(os.stat(os.path.join(home, "awp.sock")).st_mode & 0o777) == "0o600"
        proc.send_signal(signal.SIGTERM)
        assert sock.recv(100) == b"STOPPING=1"
        assert proc.wait(15) == 0
        logs = proc.stdout.read().decode()
        assert "queued messages stay on disk" in logs
        assert not os.path.exists(os.path.join(home, "daemon.pid"))
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


def test_second_daemon_on_the_same_home_is_refused(make_node):
    a = make_node("a").start()
    res = subprocess.run(
        [sys.executable, "-m", "awp", "daemon", "--home", a.home, "--no-tailcat",
         "--listen", f"tcp:127.0.0.1:{free_port()}"],
        env=_env(), capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert "another awp daemon is running for this home" in res.stderr


def test_service_install_writes_a_unit_and_uninstall_removes_it(tmp_home_root):
    cfg = os.path.join(tmp_home_root, "cfg")
    home = os.path.join(tmp_home_root, "svc home")
    env = _env(XDG_CONFIG_HOME=cfg, PATH="/nonexistent")
    run = [sys.executable, "-m", "awp", "service"]
    res = subprocess.run([*run, "install", "--home", home, "--json"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1, res.stderr  # no systemctl: written, not enabled, and said
    text_run = subprocess.run([*run, "install", "--home", home], env=env,
                              capture_output=True, text=True, timeout=30)
    assert text_run.returncode == 1 and "systemd did not enable it" in text_run.stderr
    import json

    info = json.loads(res.stdout)
    with open(info["unit_path"]) as f:
        text = f.read()
    assert "Type=notify" in text
    assert f'--home "{home}"' in text
    assert any("systemctl" in w for w in info["warnings"])
    assert json.loads(subprocess.run([*run, "status", "--home", home, "--json"], env=env,
                                     capture_output=True, text=True, timeout=30).stdout
                      )["installed"] is True
    res = subprocess.run([*run, "uninstall", "--home", home], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert not os.path.exists(info["unit_path"])
