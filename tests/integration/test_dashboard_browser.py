"""The dashboard end to end in headless Chromium (Debian's ``chromium`` driven by Playwright with
its executable path): every page loads, a message sent by the test is found by key and shows
its body, an offset reset moves the group's lag, a topic is created and deleted from the page,
and the live chart gets data without a reload. Screenshots of each page are saved to
``$SHMQ_ARTIFACTS/dashboard`` (or the test's temp dir) and the path is printed."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from shmq import Message, Producer
from shmq.protocol import RequestCode, SyncRemotingClient, request

from .broker_helpers import create_topic, start_broker  # noqa: F401
from .client_helpers import wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _browser_or_skip():
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (it is in the test extra)")
    return sync_playwright


@pytest.fixture
def shots(tmp_path):
    base = os.environ.get("SHMQ_ARTIFACTS")
    d = os.path.join(base, "dashboard") if base else str(tmp_path / "screenshots")
    os.makedirs(d, exist_ok=True)
    yield d
    print(f"\ndashboard screenshots in {d}")


def test_dashboard_pages_lookup_reset(namesrv, start_broker, tmp_path, shots):
    sync_playwright = _browser_or_skip()
    from shmq.dashboard.server import DashboardServer
    from .test_metrics import free_port
    mport = free_port()
    b = start_broker(namesrv, settings={"metricsExporterType": "PROM", "metricsPromExporterPort": mport})
    c = SyncRemotingClient(b.addr)
    try:
        assert create_topic(c, "Dash", queues=2).code == 0
        wait_route(namesrv.addr, "Dash")
        with Producer("dash-p", namesrv.addr, local="never") as p:
            for i in range(3):
                sent = p.send(Message("Dash", f"dash-body-{i}".encode(), tags="T", keys=[f"dash-key-{i}"],
                               properties={"color": "blue"}))
        for q in (0, 1):  # the group starts at 0 on both queues: its lag is every message
            assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="dash-g", topic="Dash",
                                    queueId=q, commitOffset=0)).code == 0
    finally:
        c.close()
    srv = DashboardServer(namesrv.addr, "127.0.0.1", 0, interval=0.5)
    srv.start()
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                        headless=True, args=ARGS, viewport={"width": 1200, "height": 800})
            try:
                page = ctx.new_page()
                _walk(page, srv.url, b.addr, shots, sent.offset_msg_id)
                # the broker's Prometheus endpoint, as a browser shows it (for the README)
                page.goto(f"http://127.0.0.1:{mport}/metrics")
                page.get_by_text('rocketmq_messages_in_total{cluster="DefaultCluster"').first.wait_for()
                page.screenshot(path=os.path.join(shots, "metrics.png"))
            finally:
                ctx.close()
    finally:
        srv.close()


def _walk(page, url: str, broker_addr: str, shots: str, last_id: str) -> None:
    page.set_default_timeout(30_000)
    page.goto(url + "#/cluster")
    page.get_by_text(broker_addr).wait_for()
    page.wait_for_function("document.getElementById('status').textContent.startsWith('updated')")
    page.screenshot(path=os.path.join(shots, "cluster.png"), full_page=True)

    page.click("nav a[data-page=topics]")
    page.locator("a[href='#/topic/Dash']").wait_for()
    page.screenshot(path=os.path.join(shots, "topics.png"), full_page=True)
    page.click("a[href='#/topic/Dash']")
    page.get_by_text("Queues (3 messages stored)").wait_for()
    page.screenshot(path=os.path.join(shots, "topic.png"), full_page=True)

    # lookup by key: the test's message, then its body and properties
    page.click("nav a[data-page=messages]")
    page.fill("#by-key input[name=topic]", "Dash")
    page.fill("#by-key input[name=key]", "dash-key-1")
    deadline = time.monotonic() + 20  # the index follows the append within a flush
    while True:
        page.click("#by-key button")
        page.wait_for_selector("#results table, #results .error")
        if page.locator("#results a.msg").count() == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    page.click("#results a.msg")
    assert page.locator("#body").inner_text() == "dash-body-1"
    page.get_by_text("blue").wait_for()
    page.screenshot(path=os.path.join(shots, "message.png"), full_page=True)
    # by id (the last message's offset msgId), and by time (the last hour: all three)
    page.fill("#by-id input[name=id]", last_id)
    page.click("#by-id button")
    page.locator("#results a.msg").wait_for()
    page.click("#results a.msg")
    assert page.locator("#body").inner_text() == "dash-body-2"
    page.fill("#by-time input[name=topic]", "Dash")
    page.click("#by-time button")
    page.wait_for_function("document.querySelectorAll('#results a.msg').length === 3")

    # a reset to now moves the lag from 3 to 0, on the page, without a reload
    page.goto(url + "#/group/dash-g")
    page.get_by_text("Lag: 3").wait_for()
    page.screenshot(path=os.path.join(shots, "group-before-reset.png"), full_page=True)
    page.select_option("#reset select[name=topic]", "Dash")
    page.click("#reset button")
    page.get_by_text("Lag: 0").wait_for()
    page.screenshot(path=os.path.join(shots, "group.png"), full_page=True)

    # create and delete a topic from the pages
    page.click("nav a[data-page=topics]")
    page.fill("#create-topic input[name=topic]", "DashNew")
    page.click("#create-topic button")
    page.get_by_text("Topic DashNew").wait_for()
    page.on("dialog", lambda d: d.accept())
    page.click("#delete-topic")
    page.locator("#create-topic").wait_for()
    assert page.locator("a[href='#/topic/DashNew']").count() == 0

    # the live chart got samples (the sampler polls every 0.5 s)
    page.click("nav a[data-page=groups]")
    deadline = time.monotonic() + 20
    while page.evaluate("fetch('/api/series').then(r => r.json()).then(s => s.t.length)") < 3:
        assert time.monotonic() < deadline, "the sampler recorded nothing"
        time.sleep(0.3)
    page.screenshot(path=os.path.join(shots, "groups.png"), full_page=True)
