"""Operator keys between real daemons (issue 35): certify, admit, revoke two hops away.

The operator key is made and used with the real ``awp operator`` commands
(its file outside every home); each device installs its certificate with
``awp operator install``; the gatekeeper runs ``--accept operator`` and
``awp trust``.  The revocation is signed on one host and must reach a host
two hops away, which then refuses the device and drops its link.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nodes import ROOT, Node, wait_for


def awp(node: Node | None, *args: str, opfile: str = "", stdin: str | None = None
        ) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env.pop("AWP_OPERATOR", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, "-m", "awp", *args]
    if node is not None:
        argv += ["--home", node.home]
    if opfile:
        argv += ["--file", opfile]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
                          input=stdin)


def ok(node: Node | None, *args: str, **kw) -> str:
    r = awp(node, *args, **kw)
    assert r.returncode == 0, f"awp {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _operator(tmp_path) -> tuple[str, str]:
    opfile = str(tmp_path / "op" / "operator.json")
    out = ok(None, "operator", "init", "--json", opfile=opfile)
    assert oct(os.stat(opfile).st_mode & 0o777) == "0o600"
    return json.loads(out)["key"], opfile


def _certify(node: Node, opfile: str, ttl: str = "90d") -> dict:
    cert = ok(None, "operator", "sign-device", node.key, "--ttl", ttl, "--name", node.name,
              opfile=opfile)
    ok(node, "operator", "install", "-", stdin=cert)
    return json.loads(cert)


def _linked(a: Node, b: Node) -> bool:
    return (a.peer_state(b.key).startswith("connected")
            and b.peer_state(a.key).startswith("connected"))


def test_a_trusted_operators_devices_get_in_and_strangers_do_not(make_node, tmp_path) -> None:
    op, opfile = _operator(tmp_path)
    gate = make_node("gate").start("--accept", "operator")
    dev, stranger = make_node("dev").start(), make_node("stranger").start()
    _certify(dev, opfile)
    # Not trusted yet: the certificate alone does not open the door.
    r = awp(dev, "connect", gate.address)
    assert r.returncode != 0 and "is not trusted here" in r.stderr, r.stderr
    assert "trusting operator" in ok(gate, "trust", op, "--name", "team")
    ok(dev, "connect", gate.address)
    wait_for(lambda: _linked(dev, gate), 20, "the certified device admitted")
    assert f"dev: device of operator {op} (team), trusted until" in ok(gate, "peers")
    web = next(p for p in gate.api("GET", "/v1/web/state")["peers"] if p["key"] == dev.key)
    assert web["operator"]["op"] == op and web["operator"]["status"] == "trusted"
    assert "opcert" not in web
    r = awp(stranger, "connect", gate.address)
    assert r.returncode != 0 and "no operator certificate" in r.stderr, r.stderr
    shown = json.loads(ok(gate, "operator", "show", "--json"))
    assert shown["trusted"] == [{"key": op, "name": "team"}] and shown["accept"] == "operator"
    assert json.loads(ok(dev, "operator", "show", "--json"))["cert_live"] is True
    # Trust survives a restart (it is in the store), and so does the device's certificate.
    gate.kill()
    gate.start("--accept", "operator")
    dev.kill()
    dev.start()
    ok(dev, "connect", gate.address)
    wait_for(lambda: _linked(dev, gate), 20, "the device admitted after both restarted")


def test_a_foreign_or_forged_certificate_is_refused(make_node, tmp_path) -> None:
    op, opfile = _operator(tmp_path)
    gate = make_node("gate").start("--accept", "operator")
    dev, other = make_node("dev").start(), make_node("other").start()
    ok(gate, "trust", op)
    # A certificate for another key is refused at install, with the reason.
    cert = ok(None, "operator", "sign-device", other.key, opfile=opfile)
    r = awp(dev, "operator", "install", "-", stdin=cert)
    assert r.returncode != 0 and "not this home's key" in r.stderr, r.stderr
    # A forged one (a byte of the signature changed) too.
    forged = json.loads(cert)
    forged["device"] = dev.key
    r = awp(dev, "operator", "install", "-", stdin=json.dumps(forged))
    assert r.returncode != 0 and "does not verify" in r.stderr, r.stderr
    # Nothing installed, nothing admitted; the longest certificate is 400 days.
    r = awp(dev, "connect", gate.address)
    assert r.returncode != 0 and "no operator certificate" in r.stderr, r.stderr
    r = awp(None, "operator", "sign-device", dev.key, "--ttl", "500d", opfile=opfile)
    assert r.returncode == 2 and "--ttl" in r.stderr


def test_a_revocation_reaches_a_host_two_hops_away(make_node, tmp_path) -> None:
    op, opfile = _operator(tmp_path)
    admin, relay = make_node("admin").start(), make_node("relay").start()
    gate = make_node("gate").start("--accept", "operator")
    dev = make_node("dev").start()
    ok(gate, "trust", op)
    _certify(dev, opfile)
    # admin -- relay -- gate: the gate dials the relay (outbound is always admitted).
    ok(admin, "connect", relay.address)
    ok(gate, "connect", relay.address)
    ok(dev, "connect", gate.address)
    wait_for(lambda: _linked(dev, gate) and _linked(gate, relay) and _linked(admin, relay),
             20, "the three links up")
    out = ok(admin, "operator", "revoke", dev.key, opfile=opfile)
    assert f"revoked {dev.key}" in out
    # The relay does not trust the operator, yet holds and passes the revocation on.
    wait_for(lambda: gate.api("GET", "/v1/operator")["revocations"] == 1, 20,
             "the gate to hold the revocation")
    assert relay.api("GET", "/v1/operator")["revocations"] == 1
    wait_for(lambda: not gate.peer_state(dev.key).startswith("connected"), 20, "the device's link dropped")
    r = awp(dev, "connect", gate.address)
    assert r.returncode != 0 and "revoked it" in r.stderr, r.stderr
    # A host that comes later learns the revocation at its handshake with the gate.
    late = make_node("late").start("--accept", "operator", "--allow", gate.key)
    ok(late, "trust", op)
    ok(gate, "connect", late.address)
    wait_for(lambda: late.api("GET", "/v1/operator")["revocations"] == 1, 20,
             "the late host to learn it in the handshake")
    r = awp(dev, "connect", late.address)
    assert r.returncode != 0 and "revoked it" in r.stderr, r.stderr
    # A certificate signed after the revocation counts again.
    _certify(dev, opfile)
    ok(dev, "connect", gate.address)
    wait_for(lambda: _linked(dev, gate), 20, "re-certified device admitted")


def test_a_grant_addressed_to_an_operator_counts_on_each_of_its_devices(make_node, tmp_path
                                                                        ) -> None:
    op, opfile = _operator(tmp_path)
    lead, bob = make_node("lead").start(), make_node("bob").start()
    dev1 = make_node("dev1").start("--trust", lead.key)
    dev2 = make_node("dev2").start("--trust", lead.key)
    other = make_node("other").start("--trust", lead.key)  # trusts the lead, not certified
    _certify(dev1, opfile)
    _certify(dev2, opfile)
    ok(lead, "connect", bob.address)
    out = ok(lead, "grant", bob.key, "fs:read", "--ttl", "1h", "--audience", op)
    assert "fs:read" in out
    wait_for(lambda: any(g["kind"] == "held" and g["aud"] == op
                         for g in bob.api("GET", "/v1/grants")), 20, "bob to hold the grant")
    for host in (dev1, dev2, other):
        ok(bob, "connect", host.address)

    def caps(host: Node) -> list[str]:
        return host.api("GET", "/v1/caps", peer=bob.key)["caps"]

    for host in (dev1, dev2):
        wait_for(lambda h=host: caps(h) == ["fs:read"], 20, f"fs:read for bob on {host.name}")
    assert caps(other) == []  # the grant is not for it: its audience is the operator


def test_operators_trusted_by_config_admit_and_cannot_be_removed_by_hand(make_node, tmp_path
                                                                         ) -> None:
    op, opfile = _operator(tmp_path)
    gate = make_node("gate")
    os.makedirs(gate.home, mode=0o700, exist_ok=True)
    with open(os.path.join(gate.home, "config.json"), "w") as f:
        json.dump({"policy": {"accept": "operator", "operators": [op]}}, f)
    gate.start()
    dev = make_node("dev").start()
    _certify(dev, opfile)
    ok(dev, "connect", gate.address)
    wait_for(lambda: _linked(dev, gate), 20, "admitted by the configured operator")
    r = awp(gate, "trust", op, "--remove")
    assert r.returncode != 0 and "policy.operators" in r.stderr, r.stderr
