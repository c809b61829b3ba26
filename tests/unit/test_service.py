"""awp as a systemd user service: the unit text, its name and place, and
install / uninstall / status driven through a fake systemctl."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys

import pytest

from awp.base import selfcmd
from awp.base.home import HomeLock
from awp.daemon import service

AWP = ["/opt/awp/bin/awp"]
PINNED = selfcmd.pinned_code(selfcmd.package_dir())


def sections(text: str) -> dict[str, list[str]]:
    """``{section: [key=value lines]}`` of a unit file (comments dropped)."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            cur = line.strip("[]")
            out[cur] = []
        else:
            assert cur is not None, line
            out[cur].append(line)
    return out


def value(lines: list[str], key: str) -> list[str]:
    return [x.split("=", 1)[1] for x in lines if x.split("=", 1)[0] == key]


class FakeRunner:
    """Stands in for subprocess.run; answers per systemctl verb."""

    def __init__(self, answers: dict | None = None) -> None:
        self.calls: list[list[str]] = []
        self.kwargs: list[dict] = []
        self.answers = answers or {}

    def __call__(self, argv, **kw):
        self.calls.append(list(argv))
        self.kwargs.append(kw)
        verb = argv[2] if argv[:2] == ["systemctl", "--user"] else argv[0]
        ans = self.answers.get(verb, (0, "", ""))
        if isinstance(ans, BaseException):
            raise ans
        rc, out, err = ans
        return subprocess.CompletedProcess(argv, rc, out, err)


def has_systemctl(name: str) -> str | None:
    return "/usr/bin/" + name


def no_systemctl(name: str) -> str | None:
    return None


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """A private XDG_CONFIG_HOME (and HOME, so nothing real is touched)."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "user")}
    return env


def udir(env) -> str:
    return os.path.join(env["XDG_CONFIG_HOME"], "systemd", "user")


# --- unit text ----------------------------------------------------------------------


def test_unit_text_has_every_key():
    text = service.unit_text(AWP, "/srv/awp-home")
    s = sections(text)
    assert list(s) == ["Unit", "Service", "Install"]
    u, sv, inst = s["Unit"], s["Service"], s["Install"]
    assert value(u, "Description") == ["awp peer daemon (/srv/awp-home)"]
    assert value(u, "After") == ["network-online.target"]
    assert value(u, "Wants") == ["network-online.target"]
    assert value(u, "Documentation")[0].startswith("https://")
    assert value(sv, "Type") == ["notify"]
    assert value(sv, "NotifyAccess") == ["main"]
    assert value(sv, "ExecStart") == ["/opt/awp/bin/awp daemon --home /srv/awp-home"]
    assert value(sv, "Environment") == ['"AWP_HOME=/srv/awp-home"']
    assert value(sv, "Restart") == ["on-failure"]
    assert value(sv, "RestartSec") == ["2"]
    assert value(sv, "TimeoutStopSec") == ["20"]
    assert value(sv, "KillMode") == ["mixed"]
    assert value(sv, "KillSignal") == ["SIGTERM"]
    assert value(sv, "User") == [] and "User=" not in text
    assert value(inst, "WantedBy") == ["default.target"]
    assert text.endswith("\n")


def test_unit_text_quotes_a_home_with_spaces_and_percent():
    home = "/tmp/my home/50% done"
    s = sections(service.unit_text(["/usr/bin/python3", "-m", "awp"], home))
    assert value(s["Service"], "ExecStart") == [
        '/usr/bin/python3 -m awp daemon --home "/tmp/my home/50%% done"']
    assert value(s["Service"], "Environment") == ['"AWP_HOME=/tmp/my home/50%% done"']
    assert value(s["Unit"], "Description") == ["awp peer daemon (/tmp/my home/50%% done)"]


def test_unit_text_makes_the_home_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = sections(service.unit_text(AWP, "rel"))
    assert value(s["Service"], "ExecStart") == [f"/opt/awp/bin/awp daemon --home {tmp_path}/rel"]


def test_exec_line_escapes_what_systemd_would_interpret():
    line = service.exec_line(
        ["/opt/my awp/50%/$bin/awp", "a$b", "c%d", 'e"f', "g\\h", ";", "", "i\nj", "plain-1:2,3"])
    assert line == (
        '"/opt/my awp/50%%/$bin/awp" "a$$b" c%%d "e\\"f" "g\\\\h" ";" "" "i\\nj" plain-1:2,3')


@pytest.mark.parametrize("exe", ["awp", "bin/awp", "/opt/a'wp", '/opt/a"wp', "/opt/a\\wp",
                                 "/opt/a\nwp"])
def test_exec_line_refuses_executables_systemd_refuses(exe):
    with pytest.raises(ValueError):
        service.exec_line([exe, "daemon"])
    with pytest.raises(ValueError):
        service.exec_line([])


def test_unit_text_extra_env():
    s = sections(service.unit_text(AWP, "/h", extra_env={"AWP_LISTEN": "tcp:127.0.0.1:7000",
                                                         "AWP_ABOUT": 'say "hi" 100%'}))
    assert value(s["Service"], "Environment") == [
        '"AWP_HOME=/h"', '"AWP_LISTEN=tcp:127.0.0.1:7000"', '"AWP_ABOUT=say \\"hi\\" 100%%"']
    with pytest.raises(ValueError):
        service.unit_text(AWP, "/h", extra_env={"BAD NAME": "x"})
    with pytest.raises(ValueError):
        service.unit_text(AWP, "/h", extra_env={"AWP_HOME": "/elsewhere"})


# --- names and places ---------------------------------------------------------------


def test_unit_name_default_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert service.unit_name("~/.awp") == "awp.service"
    assert service.unit_name(str(tmp_path / ".awp")) == "awp.service"
    assert service.unit_name(str(tmp_path / ".awp") + "/") == "awp.service"


def test_unit_name_other_homes(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    h = "/srv/agents/builder"
    want = "awp-" + hashlib.sha256(h.encode()).hexdigest()[:8] + ".service"
    assert service.unit_name(h) == want
    assert service.unit_name(h + "/") == want
    assert service.unit_name("/srv/agents/reviewer") != want
    monkeypatch.chdir("/")
    assert service.unit_name("srv/agents/builder") == want


def test_unit_dir():
    assert service.unit_dir({"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/home/u"}) == \
        "/x/cfg/systemd/user"
    assert service.unit_dir({"HOME": "/home/u"}) == "/home/u/.config/systemd/user"
    assert service.unit_dir({"XDG_CONFIG_HOME": "", "HOME": "/home/u"}) == \
        "/home/u/.config/systemd/user"
    # A relative XDG_CONFIG_HOME is invalid per the XDG spec and ignored.
    assert service.unit_dir({"XDG_CONFIG_HOME": "cfg", "HOME": "/home/u"}) == \
        "/home/u/.config/systemd/user"


# --- install ------------------------------------------------------------------------


def test_install_writes_the_unit_and_enables_it(cfg, tmp_path):
    home = str(tmp_path / "h1")
    run = FakeRunner()
    r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
    name = service.unit_name(home)
    path = os.path.join(udir(cfg), name)
    assert r["unit"] == name and r["unit_path"] == path and r["home"] == home
    with open(path) as f:
        assert f.read() == service.unit_text(AWP, home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(udir(cfg)) == [name]  # no temp file left behind
    want = [["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", name]]
    assert run.calls == want and r["commands_run"] == want
    assert r["warnings"] == []
    assert r["enabled"] and r["started"] and r["changed"]
    assert all(kw.get("timeout") for kw in run.kwargs)

    again = service.install(home, AWP, runner=FakeRunner(), env=cfg, which=has_systemctl)
    assert not again["changed"] and again["warnings"] == []


def test_install_without_start_only_enables(cfg, tmp_path):
    home = str(tmp_path / "h")
    run = FakeRunner()
    r = service.install(home, AWP, start=False, runner=run, env=cfg, which=has_systemctl)
    assert run.calls == [["systemctl", "--user", "daemon-reload"],
                         ["systemctl", "--user", "enable", r["unit"]]]
    assert r["enabled"] and not r["started"]


def test_install_rewrites_a_changed_unit(cfg, tmp_path):
    home = str(tmp_path / "h")
    service.install(home, AWP, runner=FakeRunner(), env=cfg, which=has_systemctl)
    r = service.install(home, ["/usr/bin/python3", "-m", "awp"], runner=FakeRunner(), env=cfg,
                        which=has_systemctl)
    assert r["changed"]
    with open(r["unit_path"]) as f:
        assert "ExecStart=/usr/bin/python3 -m awp daemon" in f.read()


def test_install_without_systemctl_warns(cfg, tmp_path):
    home = str(tmp_path / "h")
    run = FakeRunner()
    r = service.install(home, AWP, runner=run, env=cfg, which=no_systemctl)
    assert os.path.isfile(r["unit_path"])
    assert run.calls == [] and r["commands_run"] == []
    assert r["warnings"] == [
        f"systemctl not found: start it with systemctl --user enable --now {r['unit']}"
        " on a machine with systemd"]
    assert not r["enabled"] and not r["started"]


def test_install_reports_a_failing_systemctl(cfg, tmp_path):
    home = str(tmp_path / "h")
    run = FakeRunner({"daemon-reload": (1, "", "Failed to connect to bus: No medium found\n")})
    r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
    assert os.path.isfile(r["unit_path"])
    assert run.calls == [["systemctl", "--user", "daemon-reload"]]
    assert any("Failed to connect to bus: No medium found" in w for w in r["warnings"])
    assert any(f"enable --now {r['unit']}" in w for w in r["warnings"])
    assert not r["enabled"]

    run = FakeRunner({"enable": (1, "", "Job for x.service failed.")})
    r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
    assert len(run.calls) == 2
    assert any("Job for x.service failed." in w for w in r["warnings"])


@pytest.mark.parametrize("exc", [FileNotFoundError(2, "No such file"),
                                 subprocess.TimeoutExpired(["systemctl"], 30)])
def test_install_survives_a_runner_that_raises(cfg, tmp_path, exc):
    r = service.install(str(tmp_path / "h"), AWP, runner=FakeRunner({"daemon-reload": exc}),
                        env=cfg, which=has_systemctl)
    assert os.path.isfile(r["unit_path"]) and r["warnings"] and not r["enabled"]


def test_install_raises_when_the_unit_cannot_be_written(tmp_path):
    blocker = tmp_path / "config"
    blocker.write_text("a file where the config directory should be")
    with pytest.raises(service.ServiceError) as ei:
        service.install(str(tmp_path / "h"), AWP, runner=FakeRunner(),
                        env={"XDG_CONFIG_HOME": str(blocker)}, which=has_systemctl)
    assert isinstance(ei.value, OSError)
    assert str(blocker) in str(ei.value)


def test_install_defaults_to_this_awp(cfg, tmp_path):
    r = service.install(str(tmp_path / "h"), runner=FakeRunner(), env=cfg, which=no_systemctl)
    with open(r["unit_path"]) as f:
        exec_start = value(sections(f.read())["Service"], "ExecStart")[0]
    want = service.exec_line(service.awp_command(no_systemctl))
    assert exec_start.startswith(want + " daemon --home ")


def test_install_while_the_service_runs_restarts_a_changed_unit(cfg, tmp_path):
    home = str(tmp_path / "h")
    os.makedirs(home)
    lock = HomeLock(home)
    lock.acquire()
    try:
        run = FakeRunner({"is-active": (0, "active\n", "")})
        r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
        name = r["unit"]
        assert run.calls == [["systemctl", "--user", "daemon-reload"],
                             ["systemctl", "--user", "enable", name],
                             ["systemctl", "--user", "is-active", name],
                             ["systemctl", "--user", "restart", name]]
        assert r["started"] and r["warnings"] == []

        run = FakeRunner({"is-active": (0, "active\n", "")})
        r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
        assert ["systemctl", "--user", "restart", name] not in run.calls  # unchanged
        assert r["started"]
    finally:
        lock.release()


def test_install_while_an_on_demand_daemon_runs_says_to_stop_it(cfg, tmp_path):
    home = str(tmp_path / "h")
    os.makedirs(home)
    lock = HomeLock(home)
    lock.acquire()
    try:
        run = FakeRunner({"is-active": (3, "inactive\n", "")})
        r = service.install(home, AWP, runner=run, env=cfg, which=has_systemctl)
        assert ["systemctl", "--user", "enable", "--now", r["unit"]] not in run.calls
        assert ["systemctl", "--user", "enable", r["unit"]] in run.calls
        assert r["enabled"] and not r["started"]
        assert any("awp down" in w for w in r["warnings"])
    finally:
        lock.release()


# --- uninstall ----------------------------------------------------------------------


def test_uninstall_disables_removes_and_is_idempotent(cfg, tmp_path):
    home = str(tmp_path / "h")
    path = service.install(home, AWP, runner=FakeRunner(), env=cfg,
                           which=has_systemctl)["unit_path"]
    run = FakeRunner()
    r = service.uninstall(home, runner=run, env=cfg, which=has_systemctl)
    name = service.unit_name(home)
    assert run.calls == [["systemctl", "--user", "disable", "--now", name],
                         ["systemctl", "--user", "daemon-reload"]]
    assert r["removed"] and r["warnings"] == [] and not os.path.exists(path)

    run = FakeRunner()
    r = service.uninstall(home, runner=run, env=cfg, which=has_systemctl)
    assert run.calls == [] and not r["removed"] and r["warnings"] == []
    r = service.uninstall(home, runner=run, env=cfg, which=no_systemctl)
    assert run.calls == [] and not r["removed"] and r["warnings"] == []


def test_uninstall_without_systemctl_removes_the_file_and_the_wants_link(cfg, tmp_path):
    home = str(tmp_path / "h")
    path = service.install(home, AWP, runner=FakeRunner(), env=cfg,
                           which=no_systemctl)["unit_path"]
    wants = os.path.join(udir(cfg), "default.target.wants")
    os.makedirs(wants)
    link = os.path.join(wants, os.path.basename(path))
    os.symlink(path, link)
    run = FakeRunner()
    r = service.uninstall(home, runner=run, env=cfg, which=no_systemctl)
    assert run.calls == []
    assert r["removed"] and not os.path.exists(path) and not os.path.lexists(link)
    assert any("systemctl not found" in w for w in r["warnings"])


def test_uninstall_keeps_going_when_systemctl_fails(cfg, tmp_path):
    home = str(tmp_path / "h")
    path = service.install(home, AWP, runner=FakeRunner(), env=cfg,
                           which=has_systemctl)["unit_path"]
    run = FakeRunner({"disable": (1, "", "Failed to connect to bus: No medium found")})
    r = service.uninstall(home, runner=run, env=cfg, which=has_systemctl)
    assert r["removed"] and not os.path.exists(path)
    assert any("No medium found" in w for w in r["warnings"])


# --- status -------------------------------------------------------------------------


def test_status_not_installed(cfg, tmp_path):
    home = str(tmp_path / "h")
    r = service.status(home, runner=FakeRunner(), env=cfg, which=no_systemctl)
    assert r["unit"] == service.unit_name(home)
    assert r["unit_path"] == os.path.join(udir(cfg), r["unit"])
    assert not r["installed"] and not r["systemctl"]
    assert r["active"] is None and r["enabled"] is None and not r["daemon_running"]
    assert r["commands_run"] == []


def test_status_installed(cfg, tmp_path):
    home = str(tmp_path / "h")
    service.install(home, AWP, runner=FakeRunner(), env=cfg, which=has_systemctl)
    run = FakeRunner({"is-active": (3, "inactive\n", ""), "is-enabled": (0, "enabled\n", "")})
    r = service.status(home, runner=run, env=cfg, which=has_systemctl, awp_argv=AWP)
    assert r["installed"] and r["systemctl"]
    assert r["active"] == "inactive" and r["enabled"] == "enabled"
    assert r["up_to_date"] is True
    assert run.calls == [["systemctl", "--user", "is-active", r["unit"]],
                         ["systemctl", "--user", "is-enabled", r["unit"]]]
    r = service.status(home, runner=run, env=cfg, which=has_systemctl, awp_argv=["/other/awp"])
    assert r["up_to_date"] is False


def test_status_without_a_user_bus(cfg, tmp_path):
    home = str(tmp_path / "h")
    run = FakeRunner({"is-active": (1, "", "Failed to connect to bus: No medium found")})
    r = service.status(home, runner=run, env=cfg, which=has_systemctl)
    assert r["active"] is None
    assert any("No medium found" in w for w in r["warnings"])


def test_status_sees_a_running_daemon(cfg, tmp_path):
    home = str(tmp_path / "h")
    os.makedirs(home)
    lock = HomeLock(home)
    lock.acquire()
    try:
        assert service.status(home, env=cfg, which=no_systemctl)["daemon_running"]
    finally:
        lock.release()


# --- which awp ----------------------------------------------------------------------


def _script(path, shebang: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"#!{shebang}\nfrom awp.cli.entry import main\nmain()\n")
    os.chmod(path, 0o755)
    return str(path)


def test_awp_command_prefers_this_installations_script(tmp_path, monkeypatch):
    venv = tmp_path / "venv" / "bin"
    py = _script(venv / "python", "/bin/sh")  # stands in for the venv's python
    mine = _script(tmp_path / "onpath" / "awp", str(venv / "python"))
    other = _script(tmp_path / "other" / "awp", "/usr/bin/python3")
    monkeypatch.setattr(sys, "executable", py)
    assert service.awp_command(which=lambda n: mine) == [mine]
    # Another installation's awp (another venv, the system one) is not used;
    # this one's script next to the interpreter is, when there is one.
    # Not even the python can run awp in isolation here: the -c form names it.
    assert service.awp_command(which=lambda n: other) == [py, "-I", "-c", PINNED]
    sibling = _script(venv / "awp", str(venv / "python"))
    assert service.awp_command(which=lambda n: other) == [sibling]
    assert service.awp_command(which=lambda n: None) == [sibling]


def test_awp_command_ignores_binaries(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "python"
    _script(exe, "/bin/sh")
    binary = tmp_path / "go" / "awp"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 64)
    binary.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(exe))
    assert service.awp_command(which=lambda n: str(binary)) == [str(exe), "-I", "-c", PINNED]


def test_awp_command_for_this_process_runs_awp():
    argv = service.awp_command()
    assert os.path.isabs(argv[0])
    out = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("awp ")


# --- systemd-analyze ----------------------------------------------------------------


def test_verify_without_systemd_analyze_is_none(tmp_path):
    run = FakeRunner()
    assert service.verify(str(tmp_path / "x.service"), run, which=no_systemctl) is None
    assert run.calls == []


def test_verify_generated_units_with_systemd_analyze(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed on this machine")
    home = str(tmp_path / "my home" / "50% $done")
    good = tmp_path / service.unit_name(home)
    good.write_text(service.unit_text(service.awp_command(), home,
                                      extra_env={"AWP_ABOUT": 'a "quoted" 10% $x'}))
    assert service.verify(str(good)) is None

    # The executable systemd would run, as it parsed it: quoting and %% undone.
    missing = tmp_path / "awp-missing.service"
    missing.write_text(service.unit_text(["/nonexistent dir/50%/awp"], home))
    out = service.verify(str(missing))
    assert out is not None and "/nonexistent dir/50%/awp" in out

    # A warning that does not fail systemd-analyze still counts.
    bad = tmp_path / "awp-bad.service"
    bad.write_text(service.unit_text(service.awp_command(), home).replace(
        "Type=notify", "Type=notifyish"))
    out = service.verify(str(bad))
    assert out is not None and "notifyish" in out


def test_install_resolves_a_relative_executable(cfg, tmp_path):
    r = service.install(str(tmp_path / "h"), ["awp"], runner=FakeRunner(), env=cfg,
                        which=lambda n: f"/usr/local/bin/{n}")
    with open(r["unit_path"]) as f:
        assert f"ExecStart=/usr/local/bin/awp daemon --home {tmp_path}/h\n" in f.read()
    with pytest.raises(ValueError):
        service.install(str(tmp_path / "h"), ["awp"], runner=FakeRunner(), env=cfg,
                        which=no_systemctl)


def test_a_worker_unit_runs_awp_work_beside_the_daemon(cfg, tmp_path):
    from awp.daemon import work_service

    home = str(tmp_path / "h")
    words = work_service.parse_work("alice/jobs --concurrency 4 --grace 1m -- ./run.sh '50%'")
    run = FakeRunner()
    res = work_service.install_worker(home, words, AWP, runner=run, env=cfg,
                                      which=has_systemctl)
    assert res["unit"].startswith("awp-work-") and res["enabled"] and res["started"]
    assert run.calls == [["systemctl", "--user", "daemon-reload"],
                         ["systemctl", "--user", "enable", res["unit"]],
                         ["systemctl", "--user", "restart", res["unit"]]]  # new or changed
    assert any("awp service install first" in w for w in res["warnings"])
    with open(os.path.join(udir(cfg), res["unit"])) as f:
        s = sections(f.read())
    assert value(s["Service"], "ExecStart") == [
        f"/opt/awp/bin/awp work --home {home} alice/jobs --concurrency 4 --grace 1m -- ./run.sh"
        " 50%%"]  # % is systemd's specifier character, written twice
    assert value(s["Service"], "TimeoutStopSec") == ["90"]  # the grace and 30 s more
    # ./run.sh runs where install ran, not in systemd's /
    assert value(s["Service"], "WorkingDirectory") == [os.getcwd().replace("%", "%%")]
    there = work_service.worker_unit_text(AWP, home, words, cwd=str(tmp_path / "50% dir"))
    assert f"WorkingDirectory={tmp_path}/50%% dir\n" in there
    with pytest.raises(ValueError):
        work_service.worker_unit_text(AWP, home, words, cwd="/tmp/bad\ndir")
    assert value(s["Unit"], "Wants") == [service.unit_name(home)]
    # another queue on the same home is another unit; uninstall removes only its own
    other = work_service.worker_unit_name(home, work_service.parse_work("alice/x -- true"))
    assert other != res["unit"]
    gone = work_service.uninstall_worker(home, words, runner=FakeRunner(), env=cfg,
                                         which=has_systemctl)
    assert gone["removed"] and not os.path.exists(os.path.join(udir(cfg), res["unit"]))
    for bad in ("alice/jobs", "alice/jobs --", ""):
        with pytest.raises(ValueError):
            work_service.parse_work(bad)
