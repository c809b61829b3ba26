"""The dashboard's board views in headless Chromium, against two real daemons.

The topic list, a topic's posts in thread order (a reply under its post), a
post arriving live, an edit, and a hostile post rendered as text: no element
injected, no script run, no dialog. Screenshots go to ``tests/artifacts/``.
"""

from __future__ import annotations

import os
import sys
import urllib.parse

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nodes import wait_for  # noqa: E402
from test_page import CHROMIUM, browser, shot, until  # noqa: E402,F401
from webtools import HOSTILE, Web  # noqa: E402

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found")


def _post(node, topic: str, text: str, **kw) -> dict:
    return node.api("POST", "/v1/board/post", {"topic": topic,
                                               "parts": [{"k": "text", "text": text}],
                                               **kw})["post"]


def _arrived(node, topic: str, h: str) -> bool:
    return any(p["hash"] == h for p in node.api("POST", "/v1/board/get",
                                                {"topic": topic, "n": 0})["posts"])


def test_board_views_live_and_hostile_posts_as_text(browser, make_node):  # noqa: F811
    a = make_node("alice").start()
    b = make_node("bob").start()
    b.connect(a)
    a.api("POST", "/v1/board/topic", {"name": "ops", "title": "Ops room", "read": "open",
                                      "post": "open"})
    topic = f"{a.key}/ops"
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    first = _post(a, topic, "deploy is green")
    wait_for(lambda: _arrived(b, topic, first["hash"]), 10, "the post at bob's")
    web = Web(b.home).start()
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 850})
        problems: list[str] = []
        dialogs: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(web.login_url)

        # -- the topic list
        page.click("#nav a[data-view=board]")
        row = page.wait_for_selector("#topic-list .row.topic")
        text = row.inner_text()
        assert "alice/ops" in text and "Ops room" in text and "subscribed" in text
        assert "read open · post open" in text and "1 post" in text
        assert page.url.endswith("#/board")
        shot(page, "board")

        # -- a topic: the post, then a reply under it, live
        row.click()
        page.wait_for_selector("#topic-posts .post >> text=deploy is green")
        assert page.url.endswith("#/topic/" + urllib.parse.quote(topic, safe=""))
        assert "Ops room" in page.inner_text("#topic-head")
        assert page.locator("#nav a.active").get_attribute("data-view") == "board"
        reply = _post(a, topic, "rollback plan: none needed", parent=first["hash"])
        page.wait_for_selector("#topic-posts .post.d1 >> text=rollback plan", timeout=15000)
        order = page.evaluate("[...document.querySelectorAll('#topic-posts .post')]"
                              ".map(e => e.dataset.hash)")
        assert order == [first["hash"], reply["hash"]]

        # -- an edit shows as edited
        a.api("POST", "/v1/board/edit", {"post": first["hash"],
                                         "parts": [{"k": "text", "text": "deploy is GREEN"}]})
        until(page, "(t) => [...document.querySelectorAll('#topic-posts .text')]"
              ".some(e => e.textContent === t)", "deploy is GREEN")
        assert page.locator("#topic-posts .post .edited").count() == 1

        # -- a hostile post renders as text
        before = page.evaluate("document.querySelectorAll('script').length")
        _post(a, topic, HOSTILE)
        until(page, "(t) => [...document.querySelectorAll('#topic-posts .text')]"
              ".some(e => e.textContent === t)", HOSTILE)
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("document.querySelectorAll('script').length") == before
        assert page.locator("#main img[src='x']").count() == 0
        assert page.locator("#topic-posts script").count() == 0
        shot(page, "topic")

        assert dialogs == []
        assert problems == [], problems

        # -- an unknown topic says so (the browser logs the 404 itself, nothing else)
        page.goto(web.url + "/#/topic/" + urllib.parse.quote(f"{a.key}/nothing", safe=""))
        page.wait_for_selector("#topic-empty:not([hidden])")
        assert "does not know this topic" in page.inner_text("#topic-empty")
        assert all("404" in p for p in problems), problems
    finally:
        web.stop()


def test_topic_newest_first_and_the_queue_view(browser, make_node):  # noqa: F811
    a = make_node("alice").start()
    b = make_node("bob").start()
    b.connect(a)
    # -- a topic: the newest thread at the top, a reply under its post
    a.api("POST", "/v1/board/topic", {"name": "ops", "read": "open", "post": "open"})
    ops = f"{a.key}/ops"
    old = _post(a, ops, "the oldest post")
    reply = _post(a, ops, "a reply to the oldest", parent=old["hash"])
    new = _post(a, ops, "the newest post")
    # -- a work queue: one item open, one claimed by bob, one done, one dead
    a.api("POST", "/v1/board/topic", {"name": "jobs", "read": "open", "post": "open",
                                      "queue": True, "attempts": 1, "lease_s": 600})
    jobs = f"{a.key}/jobs"
    items = [_post(a, jobs, f"job {i}") for i in range(1, 5)]
    b.api("POST", "/v1/board/subscribe", {"topic": jobs, "timeout": 10})

    def claim() -> str:
        return b.api("POST", "/v1/board/claim", {"topic": jobs, "timeout": 10})["lease"]

    claimed = claim()  # job 1, held by bob
    b.api("POST", "/v1/board/lease", {"topic": jobs, "lease": claim(), "op": "complete"})
    b.api("POST", "/v1/board/lease", {"topic": jobs, "lease": claim(), "op": "fail"})
    web = Web(a.home).start()
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 850})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto(web.login_url)
        page.goto(web.url + "/#/topic/" + urllib.parse.quote(ops, safe=""))
        page.wait_for_selector("#topic-posts .post >> text=the newest post")
        order = page.evaluate("[...document.querySelectorAll('#topic-posts .post')]"
                              ".map(e => e.dataset.hash)")
        assert order == [new["hash"], old["hash"], reply["hash"]]
        first = page.locator("#topic-posts .post").first.bounding_box()
        assert first and first["y"] < 850  # the newest is on screen as the page opens
        assert page.locator("#topic-queue").is_hidden()  # not a queue
        shot(page, "topic-newest-first")

        page.goto(web.url + "/#/topic/" + urllib.parse.quote(jobs, safe=""))
        page.wait_for_selector("#topic-queue table.queue tr.q-row")
        rows = page.evaluate(
            "[...document.querySelectorAll('#topic-queue tr.q-row')].map(tr => ["
            "tr.dataset.hash, tr.querySelector('.q-status').textContent,"
            "tr.querySelector('.q-holder').textContent, tr.querySelector('.q-until').textContent,"
            "tr.querySelector('.q-attempts').textContent])")
        by = {h: (status, holder, until, attempts) for h, status, holder, until, attempts in rows}
        assert [by[i["hash"]][0] for i in items] == ["claimed", "done", "dead", "open"]
        status, holder, until, attempts = by[items[0]["hash"]]
        assert "bob" in holder and until not in ("", "-") and attempts == "0"
        assert by[items[2]["hash"]][3] == "1" and by[items[3]["hash"]][1:3] == ("-", "-")
        head = page.inner_text("#topic-queue .queue-head")
        assert "1 open · 1 claimed · 1 done · 1 dead" in head
        assert claimed
        shot(page, "topic-queue")
        assert problems == [], problems
    finally:
        web.stop()
