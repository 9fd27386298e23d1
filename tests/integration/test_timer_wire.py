"""RocketMQ 5 timer messages over the wire (2 workers): a TIMER_DELAY_MS / TIMER_DELIVER_MS
send waits in rmq_sys_wheel_timer and reaches its topic when due (never before); the answer
carries a recallHandle that RECALL_MESSAGE (370) uses to cancel it; bad values are refused
with RocketMQ's answer and store nothing; 10,000 timers due within seconds fire with their
lateness reported; a kill -9 of the whole broker with timers pending and firing loses none
and duplicates none."""
from __future__ import annotations

import os
import signal
import statistics
import time

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.message.record import iter_records

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401
from .conftest import namesrv, processes  # noqa: F401


def now_ms() -> int:
    return int(time.time() * 1000)


def drain(c, topic: str, queues: int, want: int, timeout: float = 60.0) -> list:
    """Every record of the topic's queues, pulling until ``want`` are there or timeout."""
    got: list = []
    offsets = [0] * queues
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        progressed = False
        for q in range(queues):
            r = pull(c, topic, q, offsets[q], max_nums=32)
            if r.code == 0:
                recs = list(iter_records(r.body))
                got.extend(recs)
                offsets[q] = int(r.ext_fields["nextBeginOffset"])
                progressed = True
        if not progressed:
            time.sleep(0.05)
    return got


def test_timer_is_invisible_until_due_then_delivered(start_broker):
    br = start_broker()
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TT", queues=1)
        due = now_ms() + 800
        r = send(c, "TT", b"later", props=f"TIMER_DELIVER_MS\x01{due}\x02UNIQ_KEY\x01AA01\x02")
        assert r.code == 0, r.remark
        assert r.ext_fields.get("recallHandle")
        assert pull(c, "TT", 0, 0).code == 19          # not visible yet
        p = pull(c, "TT", 0, 0, suspend_ms=10_000, timeout=15)
        assert p.code == 0, (p.code, p.remark)
        (m,) = list(iter_records(p.body))
        assert bytes(m.body) == b"later"
        assert int(m.properties["TIMER_OUT_MS"]) == due and m.store_timestamp >= due
        assert "REAL_TOPIC" not in m.properties and "TIMER_ENQUEUE_MS" in m.properties


def test_recall_cancels_and_bad_input_is_refused(start_broker):
    br = start_broker(settings={"timerMaxDelaySec": 60})
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TR", queues=1)
        a = send(c, "TR", b"keep", props="TIMER_DELAY_MS\x01700\x02UNIQ_KEY\x01AA02\x02")
        b = send(c, "TR", b"gone", props="TIMER_DELAY_MS\x01700\x02UNIQ_KEY\x01AA03\x02")
        assert a.code == 0 and b.code == 0
        rc = c.invoke(request(RequestCode.RECALL_MESSAGE, topic="TR", recallHandle=b.ext_fields["recallHandle"],
                              producerGroup="pg"))
        assert rc.code == 0 and rc.ext_fields["msgId"] == "AA03"
        bad = c.invoke(request(RequestCode.RECALL_MESSAGE, topic="TR", recallHandle="not-a-handle"))
        assert bad.code == 604
        # bad values: RocketMQ's MESSAGE_ILLEGAL, nothing stored
        for props in ("TIMER_DELAY_MS\x01soon\x02", "TIMER_DELAY_SEC\x0161\x02", "TIMER_DELIVER_MS\x01x\x02"):
            r = send(c, "TR", b"bad", props=props)
            assert r.code == 13 and "timer message illegal" in r.remark, (props, r.code, r.remark)
        past = send(c, "TR", b"past", props=f"TIMER_DELIVER_MS\x01{now_ms() - 1000}\x02")
        assert past.code == 0
        time.sleep(1.5)
        got = drain(c, "TR", 1, 2, timeout=10)
        assert sorted(bytes(m.body) for m in got) == [b"keep", b"past"]


def _lateness(recs) -> list[int]:
    return sorted(m.store_timestamp - int(m.properties["ASKED"]) for m in recs)


def test_ten_thousand_timers_none_early(start_broker):
    br = start_broker()
    n = 10_000
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TB", queues=4)
        began = now_ms()
        start = began + 8000                          # a lead the sends fit in on a slow CI machine
        for i in range(n):
            due = start + (i * 3000) // n                 # due over three seconds
            r = send(c, "TB", b"%d" % i, queue_id=i % 4,
                     props=f"TIMER_DELIVER_MS\x01{due}\x02ASKED\x01{due}\x02")
            assert r.code == 0, r.remark
        sent_by = now_ms()
        got = drain(c, "TB", 4, n, timeout=90)
        assert len(got) == n
        assert len({bytes(m.body) for m in got}) == n
        late = _lateness(got)
        assert late[0] >= 0, f"a timer fired {-late[0]} ms early"
        print(f"\n10,000 timers due over 3 s (sent in {sent_by - began} ms, 8 s lead): lateness ms "
              f"p50={statistics.median(late):.0f} p99={late[int(n * 0.99)]} max={late[-1]}")


def test_kill_9_whole_broker_with_timers_pending(start_broker):
    """Timers due before, during and after a kill -9 of the supervisor and every worker: after
    the restart each one is in its topic exactly once, none before its time."""
    n = int(os.environ.get("SHMQ_TIMER_CRASH_N", "5000"))
    br = start_broker()
    store = br.store
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TK", queues=2)
        spread = max(4000, n // 2)                     # 4 s, or 2,000 timers a second for big n
        base = now_ms() + 1500
        for i in range(n):
            due = base + (i * spread) // n               # firing from +1.5 s over the spread
            r = send(c, "TK", b"%d" % i, queue_id=i % 2, props=f"TIMER_DELIVER_MS\x01{due}\x02ASKED\x01{due}\x02")
            assert r.code == 0, r.remark
        lead = base - now_ms()
    time.sleep(max(0.0, lead / 1000.0) + spread / 3000.0)  # about a third has fired
    victims = [br.pid, *br.worker_pids()]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    br.popen.wait(10)
    br2 = start_broker(store=store)
    with SyncRemotingClient(br2.addr, timeout=10) as c:
        got = drain(c, "TK", 2, n, timeout=120)
        time.sleep(1.0)
        got += drain_from_end(c, got)
    bodies = [int(bytes(m.body)) for m in got]
    assert len(bodies) == n, f"{len(bodies)} deliveries of {n} timers"
    assert sorted(bodies) == list(range(n)), "a timer was lost or delivered twice"
    assert _lateness(got)[0] >= 0


def drain_from_end(c, got) -> list:
    """Anything after what was drained (a duplicate would show here)."""
    extra = []
    per_q: dict[int, int] = {}
    for m in got:
        per_q[m.queue_id] = max(per_q.get(m.queue_id, -1), m.queue_offset)
    for q, last in per_q.items():
        r = pull(c, "TK", q, last + 1)
        if r.code == 0:
            extra.extend(iter_records(r.body))
    return extra


def test_cli_timer_send_and_recall(start_broker, namesrv):  # noqa: F811
    import json as _json
    import subprocess
    import sys

    from .client_helpers import wait_route
    br = start_broker(namesrv)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TC", queues=1)
    wait_route(namesrv.addr, "TC")
    cli = [sys.executable, "-m", "shmq.cli.main", "timer"]
    t0 = time.monotonic()
    keep = subprocess.run(cli + ["send", "TC", "keep", "--delay", "8s", "-n", namesrv.addr],
                          capture_output=True, text=True, timeout=60)
    gone = subprocess.run(cli + ["send", "TC", "gone", "--delay", "8s", "-n", namesrv.addr],
                          capture_output=True, text=True, timeout=60)
    assert keep.returncode == 0 and gone.returncode == 0, keep.stderr + gone.stderr
    handle = _json.loads(gone.stdout)["recallHandle"]
    r = subprocess.run(cli + ["recall", "TC", handle, "-n", namesrv.addr], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _json.loads(r.stdout)["recalled"] == _json.loads(gone.stdout)["msgId"]
    time.sleep(max(0.0, t0 + 9.5 - time.monotonic()))
    with SyncRemotingClient(br.addr, timeout=10) as c:
        got = drain(c, "TC", 1, 2, timeout=3)
    assert [bytes(m.body) for m in got] == [b"keep"]
    late = subprocess.run(cli + ["recall", "TC", handle, "-n", namesrv.addr], capture_output=True, text=True,
                          timeout=60)
    assert late.returncode == 1 and "timestamp invalid" in late.stderr
