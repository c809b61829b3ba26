"""The listener a user picks survives restarts; bad config and dead listeners are loud.

Homes here are made without ``AWP_LISTEN`` (unlike the other CLI tests), so
what the daemon listens on comes from ``awp up --listen``, config.json or
what an earlier start remembered.
"""

from __future__ import annotations

import json
import os
import socket

from test_cli_support import Home, cli_root_fixture, free_port, homes_fixture  # noqa: F401


def bare(homes, name: str) -> Home:
    h = homes(name)
    h.env.pop("AWP_LISTEN", None)
    return h


def status(h: Home) -> dict:
    return json.loads(h.ok("status", "--json").stdout)


def test_listen_is_remembered_across_down_and_on_demand_start(homes):
    h = bare(homes, "h")
    port = free_port()
    r = h.ok("up", "--listen", f"tcp:127.0.0.1:{port}", "--no-tailcat")
    assert f"  address  tcp:127.0.0.1:{port}  ← hand this to the other agent" in r.stdout
    assert status(h)["listen"] == {"configured": [f"tcp:127.0.0.1:{port}"], "source": "--listen"}
    h.ok("down")
    h.ok("peers")  # starts the daemon on demand, with no flags
    st = status(h)
    assert st["addresses"] == [f"tcp:127.0.0.1:{port}"], st
    assert st["listen"]["source"] == "remembered"
    assert "(remembered from an earlier awp up)" in h.ok("status").stdout


def test_config_listen_as_a_string_is_refused_with_one_line(homes):
    h = bare(homes, "h")
    os.makedirs(h.path, mode=0o700)
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"listen": "tcp:127.0.0.1:7000"}, f)
    r = h.run("up")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"awp up: {h.path}/config.json: listen: expected a list of strings such as"
        ' ["tailcat", "tcp:127.0.0.1:7000"], got a string']
    assert h.run("status").returncode == 3  # nothing was started


def test_every_config_key_is_checked(homes):
    h = bare(homes, "h")
    os.makedirs(h.path, mode=0o700)
    cases = [
        ({"lsten": []}, "lsten: unknown key"),
        ({"presence": "yes"}, "presence: expected true or false"),
        ({"ping_interval": "soon"}, "ping_interval:"),
        ({"blob_limit": "big"}, "blob_limit: expected a whole number"),
        ({"policy": {"accept": "some"}},
         'policy.accept: expected "any", "allowlist", "invite-only" or "operator"'),
        ({"policy": {"trust": ["nope"]}}, "policy.trust: 'nope' is not a key"),
        ({"policy": {"operators": ["nope"]}}, "policy.operators: 'nope' is not a key"),
        ({"rotate_every": "sometimes"}, "rotate_every:"),
        ({"listen": ["tcp:localhost"]}, "listen: entry 0 ('tcp:localhost')"),
        ({"limits": {"connections": "many"}}, "limits.connections"),
    ]
    for cfg, words in cases:
        with open(os.path.join(h.path, "config.json"), "w") as f:
            json.dump(cfg, f)
        r = h.run("up")
        assert r.returncode == 1 and words in r.stderr, (cfg, r.stderr)
        # A command that starts the daemon on demand says the same in its headline.
        r = h.run("peers")
        assert r.returncode == 1 and words in r.stderr.splitlines()[0], (cfg, r.stderr)


def test_up_fails_when_nothing_listens(homes):
    h = bare(homes, "h")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = h.run("up", "--listen", f"tcp:127.0.0.1:{port}", "--no-tailcat")
        assert r.returncode == 1, r.stdout
        assert f"awp up: nothing listens: tcp:127.0.0.1:{port}:" in r.stderr
        # one thing said, with the way out; never "awp is up" first
        assert "awp is up" not in r.stdout, r.stdout
        assert "another program holds that port" in r.stderr, r.stderr
        assert "up --listen tcp:127.0.0.1:0" in r.stderr, r.stderr
        r = h.run("up", "--json")
        assert r.returncode == 1
        assert json.loads(r.stdout)["address"] == ""


def test_bad_listen_flag_is_a_usage_error(homes):
    h = bare(homes, "h")
    r = h.run("up", "--listen", "127.0.0.1:7000")
    assert r.returncode == 2
    assert "use tailcat, tcp:HOST:PORT, unix:/path or ws:HOST:PORT[=PUBLIC_URL]" in r.stderr


def test_wildcard_listener_prints_addresses_peers_can_dial(homes):
    h = bare(homes, "h")
    port = free_port()
    r = h.ok("up", "--listen", f"tcp:0.0.0.0:{port}", "--no-tailcat")
    assert "none yet" not in r.stdout
    st = status(h)
    assert st["address"] and "0.0.0.0" not in st["address"], st
    assert f"tcp:127.0.0.1:{port}" in st["reachable"]
    assert all(a.endswith(f":{port}") for a in st["reachable"])
    # The printed address really reaches the daemon.
    host = st["address"][len("tcp:"):].rsplit(":", 1)[0].strip("[]")
    with socket.create_connection((host, port), timeout=5):
        pass


def test_up_without_a_tailcat_relay_says_how_to_listen_instead(homes):
    h = bare(homes, "h")
    h.env["AWP_TAILCAT_BIN"] = "/bin/false"  # a tailcat that fails at once, as offline
    r = h.run("up")
    assert r.returncode == 1, r.stdout
    err = r.stderr.splitlines()
    assert err[0].startswith("awp up: nothing listens: tailcat:"), r.stderr
    assert "listen on TCP or a Unix socket instead:" in err[1]
    assert "awp up --listen tcp:127.0.0.1:7000 --no-tailcat" in r.stderr
