"""Finding a running daemon costs a connect, not a request (awp.localapi.daemonctl).

Against a fake daemon on a real Unix socket, which records the requests it
reads and counts the connections it accepts: ``ensure_daemon`` must hand back
a client without having sent anything, and the command's first request must
travel on the connection it opened.
"""

from __future__ import annotations

from test_hooks_board import FakeDaemon

from awp.localapi.daemonctl import ensure_daemon


def test_a_running_daemon_is_found_without_a_request(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    fake = FakeDaemon(str(home), {"/v1/threads": (200, {"rows": []}),
                                  "/v1/peers": (200, [])})
    try:
        client = ensure_daemon(str(home), timeout=5)
        assert fake.asked == []  # no status probe: the connect was the proof
        assert client.get("/v1/threads") == {"rows": []}
        assert client.get("/v1/peers") == []
        assert [path for path, _ in fake.asked] == ["/v1/threads", "/v1/peers"]
        assert fake.connections == 1  # the first request went on the connection it opened
        client.close()
    finally:
        fake.close()
