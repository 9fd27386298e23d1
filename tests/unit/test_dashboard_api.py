"""The dashboard's create answers once the NameServer routes the new topic: a broker registers
a topic after answering its create, and the page the browser opens next asks for the route
(a CI run timed out on that page when the registration came a moment late)."""
from __future__ import annotations

import threading

from shmq.dashboard import api as dashboard_api
from shmq.errors import ShmqError


class SlowRouteAdmin:
    """An admin whose NameServer learns the topic after ``late`` route requests."""

    def __init__(self, late: int):
        self.late, self.asked, self.created = late, 0, []

    def create_topic(self, topic, queues):
        self.created.append((topic, queues))
        return ["127.0.0.1:1"]

    def route(self, topic):
        self.asked += 1
        if self.asked <= self.late:
            raise ShmqError(f"no route info of topic {topic}")
        return object()


def _api(admin) -> dashboard_api.DashboardApi:
    d = dashboard_api.DashboardApi.__new__(dashboard_api.DashboardApi)  # the real class; only its admin stands in
    d.admin, d.lock, d._groups = admin, threading.RLock(), set()
    return d


def test_create_waits_for_the_route():
    admin = SlowRouteAdmin(late=3)
    got = _api(admin).create_topic("T", 4)
    assert got == {"topic": "T", "brokers": ["127.0.0.1:1"], "routed": True}
    assert admin.created == [("T", 4)] and admin.asked == 4


def test_create_gives_up_after_the_wait(monkeypatch):
    monkeypatch.setattr(dashboard_api, "ROUTE_WAIT_S", 0.2)
    admin = SlowRouteAdmin(late=10**9)
    got = _api(admin).create_topic("T", 2)
    assert got["routed"] is False and admin.created == [("T", 2)] and admin.asked >= 2
