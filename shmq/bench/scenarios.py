"""What a run measures (``Scenario``), what it found (``Result``), and the standard suite.

Scenarios (every one moves the same messages through shmq and through each peer, between
the same number of processes, producers -> consumers):

``produce``     producers send as fast as they can for ``duration`` s while consumers take
                the messages; figures: messages delivered to consumers per second inside
                the measured window (after ``warmup``), and the producers' own send rate.
``e2e``         producers send at a fixed total ``rate`` (default 10,000 msgs/s); latency
                from each message's *intended* send time to its arrival in the consumer
                (coordinated-omission corrected: see histogram.py).
``pull``        producers first write a backlog of ``count`` messages; then the consumers
                start and drain it; figure: consumer msgs/s (no latency: it would be the
                backlog's age).
``sync-flush``  as ``produce``, several producers (default 4), every send answered only once
                the message is on disk (shmq SYNC_FLUSH with group commit; Redis with
                ``appendfsync always``); peers without durability are not run.

A message body is ``size`` bytes: a 16-byte header (stamp ns, producer id, sequence,
little-endian) then ``x`` padding; consumers check length, padding and duplicates.
"""
from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field, fields, replace

#: stamp (intended or actual send time, monotonic ns), producer index, sequence number.
HEADER = struct.Struct("<qII")
MIN_SIZE = HEADER.size

KINDS = ("produce", "e2e", "pull", "sync-flush")
TRANSPORTS = ("local", "tcp")
#: how the shmq client row's producer sends (the peers have one way each): ``sync`` is
#: ``Producer.send`` (RocketMQ's default ``DefaultMQProducer.send``: each call waits for the
#: broker's answer), ``async`` is ``send_async`` (``send_batch_async`` for a batch) with at most
#: ``send_window`` sends unanswered (the oldest is waited for before another goes), ``oneway``
#: is ``send_oneway`` (no answer; one message per call)
SEND_MODES = ("sync", "async", "oneway")

SCHEMA = "shmq-bench/1"


@dataclass
class Scenario:
    kind: str = "produce"
    transport: str = "local"   # shmq rows only: local (shared memory) or tcp (remoting)
    size: int = 100            # body bytes
    batch: int = 1             # messages per send call (send_batch)
    producers: int = 1         # producer processes
    consumers: int = 1         # consumer processes
    groups: int = 1            # consumer groups: consumer j is in group j % groups; each group gets every message
    rate: float = 0.0          # total msgs/s over all producers; 0: as fast as possible
    duration: float = 2.0      # measured seconds (duration mode)
    warmup: float = 0.5        # seconds sent before the measured window (not recorded)
    count: int = 0             # > 0: send exactly this many (count mode; no warm-up)
    timeout: float = 60.0      # count mode: give up waiting for delivery after this long
    send_mode: str = "sync"    # shmq client row: sync | async | oneway (SEND_MODES)
    send_window: int = 1024    # async: sends in flight at most

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown scenario {self.kind!r} (one of {', '.join(KINDS)})")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {self.transport!r} (local or tcp)")
        if self.size < MIN_SIZE:
            raise ValueError(f"--size must be at least {MIN_SIZE} bytes (the timing header)")
        if self.batch < 1 or self.producers < 1 or self.consumers < 0:
            raise ValueError("--batch and --producers must be >= 1, --consumers >= 0")
        if self.groups < 1 or (self.consumers and self.consumers < self.groups):
            raise ValueError("--groups must be >= 1 and at most --consumers (each group needs a consumer)")
        if self.send_mode not in SEND_MODES:
            raise ValueError(f"unknown send mode {self.send_mode!r} (one of {', '.join(SEND_MODES)})")
        if self.send_window < 1:
            raise ValueError("--send-window must be >= 1")
        if self.send_mode == "oneway" and self.batch > 1:
            raise ValueError("a oneway send is one message (RocketMQ has no oneway batch): --batch 1")
        if self.kind == "pull" and self.count <= 0:
            raise ValueError("pull needs a backlog: --count N")
        if self.count <= 0 and self.duration <= 0:
            raise ValueError("--duration must be > 0 (or give --count)")

    @property
    def backlog(self) -> bool:
        return self.kind == "pull"

    @property
    def durable(self) -> bool:
        return self.kind == "sync-flush"

    @property
    def records_latency(self) -> bool:
        return self.kind != "pull"

    def group_of(self, consumer: int) -> tuple[int, int, int]:
        """(group, member index in it, members in it) of consumer process ``consumer``."""
        g = consumer % self.groups
        members = len(range(g, self.consumers, self.groups))
        return g, consumer // self.groups, max(members, 1)

    @property
    def count_mode(self) -> bool:
        return self.count > 0

    @property
    def label(self) -> str:
        parts = [self.kind]
        if self.kind != "pull":
            parts.append(self.transport)
        parts.append(f"{self.size} B")
        if self.batch > 1:
            parts.append(f"batch {self.batch}")
        if self.send_mode == "async":
            parts.append(f"async sends (window {self.send_window})")
        elif self.send_mode == "oneway":
            parts.append("oneway sends")
        parts.append(f"{self.producers}p->{self.consumers}c")
        if self.groups > 1:
            parts.append(f"{self.groups} groups")
        if self.rate:
            parts.append(f"{self.rate:,.0f}/s")
        if self.count_mode:
            parts.append(f"{self.count:,} msgs")
        else:
            parts.append(f"{self.duration:g} s")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Scenario":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def defaults(kind: str) -> dict:
    """Per-scenario defaults the command line may override."""
    return {
        "produce": {},
        "e2e": {"rate": 10_000.0},
        "pull": {"count": 200_000},
        "sync-flush": {"producers": 4},
    }[kind]


def make(kind: str, **overrides) -> Scenario:
    kw = defaults(kind)
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return Scenario(kind=kind, **kw)


def standard_suite(quick: bool = False) -> list[Scenario]:
    """The no-argument run: local and TCP produce, e2e at 10,000 msgs/s, sync-flush.
    Sized to finish in under 90 s with every peer on a 2-core machine; ``quick`` is the
    seconds-long version the tests run."""
    d, w = (0.3, 0.1) if quick else (2.0, 0.5)
    return [
        make("produce", transport="local", duration=d, warmup=w),
        make("produce", transport="tcp", duration=d, warmup=w),
        make("e2e", transport="local", duration=d, warmup=w, rate=2_000.0 if quick else 10_000.0),
        make("e2e", transport="tcp", duration=d, warmup=w, rate=2_000.0 if quick else 10_000.0),
        make("sync-flush", transport="local", duration=d, warmup=w),
    ]


@dataclass
class Result:
    peer: str
    scenario: Scenario
    status: str = "ok"                 # ok | skipped | error | interrupted
    note: str = ""
    messages: int = 0                  # received by consumers (all, incl. warm-up)
    sent: int = 0                      # sent by producers (all)
    seconds: float = 0.0               # the measured window
    msgs_per_s: float | None = None    # delivered (or stored, with no consumer) per second
    mb_per_s: float | None = None
    send_msgs_per_s: float | None = None
    latency_us: dict | None = None     # histogram.summary_us
    histogram: str | None = None       # HdrHistogram compressed encoding (ns)
    ack_latency_us: dict | None = None # intended send -> send call returned (sync-flush: on disk)
    pacing_late_us: dict | None = None # fixed rate: how late send calls started (harness pacing error)
    cpu_us_per_msg: dict = field(default_factory=dict)  # producer / consumer / broker
    undelivered: int = 0               # sent but not received when the run stopped
    duplicates: int = 0
    corrupt: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "interrupted") and self.msgs_per_s is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["scenario"] = self.scenario.to_dict()
        d["scenario"]["label"] = self.scenario.label
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        d = dict(d)
        d["scenario"] = Scenario.from_dict(d["scenario"])
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def skipped(cls, peer: str, sc: Scenario, why: str, status: str = "skipped") -> "Result":
        return cls(peer=peer, scenario=sc, status=status, note=why)


def with_(sc: Scenario, **kw) -> Scenario:
    return replace(sc, **kw)
