"""The dashboard page in headless Chromium (Debian's ``chromium``, driven by
Playwright's Python package with the system browser; no browser download).

It loads with no console errors, shows the agents of a seeded network of 50
agents and 500 threads, a live message arriving, an image inline, and a
hostile message as plain text (no element injected, no dialog). Screenshots
of every view are kept in ``tests/artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from webtools import HOSTILE, ROOT, Web, png_bytes, seed_network  # noqa: E402

ARTIFACTS = os.path.join(ROOT, "tests", "artifacts")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def find_chromium() -> str | None:
    env = os.environ.get("AWP_CHROMIUM")
    if env and os.path.exists(env):
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (install Debian's chromium: apt-get install -y chromium,"
           " or set AWP_CHROMIUM)")


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def network(make_node, tmp_home_root):
    a = make_node("dashboard").start()
    b = make_node("claude-code@builder", extra=["--harness", "claude"]).start()
    a.connect(b)
    seed_network(a.home, agents=50, threads=500, sharer=b.key)
    web = Web(a.home).start()
    web.wait_state(lambda st: st["stats"]["threads"] >= 500 and any(
        x["key"] == b.key and x["status"] == "connected" and x["rtt_ms"] is not None
        for x in st["agents"]), timeout=20, what="the seeded network, with B's round trip")
    try:
        yield a, b, web
    finally:
        web.stop()


def until(page, expression: str, arg=None, timeout: float = 15.0):
    """Poll an expression from outside the page (Playwright's wait_for_function
    evaluates strings in the page, which the page's CSP rightly forbids)."""
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression, arg)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        time.sleep(0.05)


def shot(page, name: str) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, f"web-{name}.png")
    page.screenshot(path=path)
    return path


def test_page_shows_the_network_live_and_renders_hostile_text_as_text(browser, network,
                                                                      tmp_home_root):
    a, b, web = network
    first = b.api("POST", "/v1/send", {"peer": a.key, "subject": "Build release artifacts",
                                       "parts": [{"k": "text", "text": "Can you build it?"}]})
    b.api("POST", "/v1/state", {"peer": a.key, "th": first["th"], "state": "working",
                                "note": "cloning"})
    st = web.wait_state(lambda st: any(t["th"] == first["th"] for t in st["threads"]),
                        what="the local thread")

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}")
            if "/api/events" not in r.url else None)

    def on_dialog(d):
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)

    # -- the token: a browser without it is refused; the printed URL lets it in
    other = browser.new_context()
    try:
        refused = other.new_page()
        resp = refused.goto(web.url + "/")
        assert resp is not None and resp.status == 401
        assert "needs its token" in refused.inner_text("body")
    finally:
        other.close()
    resp = page.goto(web.login_url)
    assert resp is not None and resp.status == 200 and page.url == web.url + "/"
    cookies = page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        (f"awp_token_{web.port}", True, "Strict")]

    # -- overview
    page.goto(web.url + "/#/")
    page.wait_for_selector("#stats .stat")
    until(page, "document.querySelector('#conn').textContent === 'live'")
    card = page.inner_text("#self-card")
    assert "awp connect " + a.address in card
    assert page.inner_text("#stats").split()[0] == str(st["stats"]["agents"])
    shot(page, "overview")

    # -- agents: every agent has a card with its avatar
    page.click("#nav a[data-view=agents]")
    page.wait_for_selector("#agent-grid .card.agent")
    n_agents = st["stats"]["agents"]
    assert page.locator("#agent-grid .card.agent").count() == n_agents
    builder = page.locator("#agent-grid .card.agent", has_text="claude-code@builder")
    assert "connected" in builder.inner_text()
    assert "tcp" in builder.inner_text() and " ms" in builder.inner_text()
    assert builder.locator(".harness.hx-claude").count() == 1
    assert page.locator("#agent-grid .card.agent .sig-idle").count() > 0  # amber "no activity"
    assert page.locator("#agent-grid .card.agent", has_text="waiting for a message").count() > 0
    assert "agents" in page.url and page.url.endswith("#/agents")
    shot(page, "agents")

    # An avatar is the same picture wherever it is drawn (it depends on the key only).
    src1 = builder.locator("img.avatar").get_attribute("src")
    assert src1.startswith("data:image/svg+xml,")
    src2 = page.evaluate("(k) => { const i = [...document.querySelectorAll('img.avatar')]"
                         ".find(x => x.title === k); return i && i.src; }", b.key)
    assert src2 == src1

    # -- network graph
    page.goto(web.url + "/#/network")
    page.wait_for_selector("svg.net g.node")
    assert page.locator("svg.net g.node").count() == n_agents
    assert page.locator("svg.net g.edge").count() == len(st["links"])
    assert page.locator("svg.net g.edge.up.direct").count() >= 1
    time.sleep(0.3)
    shot(page, "network")

    # -- threads: 500 and more, the shared ones marked
    page.goto(web.url + "/#/threads")
    page.wait_for_selector("#thread-list .row")
    assert page.locator("#thread-list .row").count() == st["stats"]["threads"]
    assert page.locator("#thread-list .row .shared", has_text="Shared by").count() == 3
    page.fill("#thread-filter", "Build release")
    until(page, "document.querySelectorAll('#thread-list .row').length === 1")
    assert "q=Build" in page.url
    row = page.locator("#thread-list .row").first
    assert "working" in row.inner_text() and "cloning" in row.inner_text()
    shot(page, "threads")

    # -- a live conversation
    row.click()
    page.wait_for_selector("#conv-messages .msg")
    assert page.url.endswith("#/thread/" + urllib.parse.quote(b.key, safe="") + "/" + first["th"])
    assert "Can you build it?" in page.inner_text("#conv-messages")
    b.api("POST", "/v1/send", {"peer": a.key, "th": first["th"],
                               "parts": [{"k": "text", "text": "live message 4711"}]})
    page.wait_for_selector("#conv-messages .msg >> text=live message 4711", timeout=15000)

    # a hostile message renders as text
    before = page.evaluate("document.querySelectorAll('script').length")
    b.api("POST", "/v1/send", {"peer": a.key, "th": first["th"],
                               "parts": [{"k": "text", "text": HOSTILE}]})
    until(page, "(t) => [...document.querySelectorAll('#conv-messages .text')]"
          ".some(e => e.textContent === t)", HOSTILE)
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('script').length") == before
    assert page.locator("#main img[src='x']").count() == 0
    assert page.locator("#conv-messages script").count() == 0

    # an image inline, other files as downloads
    png = os.path.join(tmp_home_root, "chart.png")
    with open(png, "wb") as f:
        f.write(png_bytes(120, 60, (16, 163, 127)))
    notes = os.path.join(tmp_home_root, "notes.html")
    with open(notes, "w") as f:
        f.write("<script>alert(1)</script>")
    b.api("POST", "/v1/send", {"peer": a.key, "th": first["th"],
                               "parts": [{"k": "text", "text": "here are the results"}],
                               "files": [png, notes]})
    img = page.wait_for_selector("#conv-messages figure img[src^='/api/blob?']", timeout=15000)
    until(page, "(i) => i.complete && i.naturalWidth === 120", img)
    link = page.locator("#conv-messages a.file", has_text="notes.html")
    assert link.get_attribute("download") == "notes.html"
    assert link.get_attribute("href").startswith("/api/blob?")
    shot(page, "conversation")

    # -- activity, kept in the URL
    page.goto(web.url + "/#/activity?kind=msg")
    page.wait_for_selector("#activity-list .row")
    assert page.input_value("#activity-kind") == "msg"
    assert page.locator("#activity-list .row", has_text="live message 4711").count() == 1
    hostile_rows = page.locator("#activity-list .row .text", has_text="window.__pwned")
    assert hostile_rows.count() == 1 and HOSTILE in hostile_rows.first.text_content()
    shot(page, "activity")

    # -- this host's own page: the connect command to share
    page.goto(web.url + "/#/agent/" + urllib.parse.quote(a.key, safe=""))
    page.wait_for_selector("#agent-card .host-card")
    assert "awp connect " + a.address in page.inner_text("#agent-card")
    shot(page, "host")

    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    assert problems == [], problems


def test_page_waits_for_the_daemon(browser, make_node):
    a = make_node("late")
    os.makedirs(a.home, mode=0o700)
    web = Web(a.home).start()
    try:
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(web.login_url)
        page.goto(web.url + "/#/agents")
        page.wait_for_selector("#banner:not([hidden])")
        assert "Waiting for the awp daemon" in page.inner_text("#banner")
        shot(page, "waiting")
        a.start()
        page.wait_for_selector("#agent-grid .card.agent", timeout=20000)
        assert page.locator("#banner").is_hidden()
        assert errors == []
    finally:
        web.stop()
