"""The verdict of a chaos run, from its files alone (so it can be tested on made-up ones):
the ids producers recorded as acknowledged, the bodies read back from the store after the
final restart (every queue from offset 0), the consumers' delivery lines, the cycles.

* ``acked``: distinct ids acknowledged (SEND_OK); ``recovered``: of those, found in the store;
  ``acked_lost``: acknowledged and not in the store (must be 0);
* ``garbage``: bodies that do not match their id's checksum, in the store or delivered to a
  consumer (must be 0);
* ``duplicates``: extra copies of an id in the store (a client's retry after a lost answer
  may store a message twice: at-least-once, reported, not a failure);
* ``stored_unacked``: in the store, never acknowledged (the producer died or timed out
  before the answer: allowed);
* per consumer group: ``missing`` (acknowledged, never delivered once the consumers had the
  drain's time to catch up: must be 0) and ``redelivered`` (at-least-once: allowed);
* recovery time p50 / max, per target and over every broker-side kill;
* with slaves, ``slaves_missing``: acknowledged ids a slave lacks after the run (0 under
  SYNC_MASTER, where SEND_OK waits for the slave; the run adds it to the report).
"""
from __future__ import annotations

import collections

from .ledger import received
from .payload import parse


def stored_ids(bodies: list[bytes]) -> tuple[collections.Counter, int]:
    ids: collections.Counter = collections.Counter()
    garbage = 0
    for b in bodies:
        msg_id, intact = parse(b)
        if intact:
            ids[msg_id] += 1
        else:
            garbage += 1
    return ids, garbage


def missing(want: set, bodies: list[bytes]) -> int:
    return len(want - stored_ids(bodies)[0].keys())


def report(acked_lines: list[str], drained: list[bytes], deliveries: dict[str, list[str]],
           cycles: list[dict]) -> dict:
    acked = {a for a in acked_lines if a}
    stored, garbage = stored_ids(drained)
    lost = sorted(acked - stored.keys())
    groups = {}
    for g, lines in deliveries.items():
        got, bad = received(lines)
        garbage += bad
        groups[g] = {"received": len(got), "missing": len(acked - got.keys()),
                     "redelivered": sum(c - 1 for c in got.values())}
    return {
        "cycles": len(cycles),
        "targets": dict(collections.Counter(c["target"] for c in cycles)),
        "acked": len(acked),
        "recovered": len(acked & stored.keys()),
        "acked_lost": len(lost),
        "lost_sample": lost[:10],
        "duplicates": sum(c - 1 for c in stored.values()),
        "duplicate_sample": sorted(i for i, c in stored.items() if c > 1)[:10],
        "garbage": garbage,
        "stored": sum(stored.values()),
        "stored_unacked": len(stored.keys() - acked),
        "consumers": groups,
        "unserved_cycles": sum(1 for c in cycles if c.get("served") is False or "start_failed" in c),
        "stragglers": sum(c.get("stragglers", 0) for c in cycles),
        "recovery_ms": recovery(cycles),
    }


def recovery(cycles: list[dict]) -> dict:
    by: dict[str, list[float]] = collections.defaultdict(list)
    for c in cycles:
        if "recovery_ms" in c:
            by[c["target"]].append(c["recovery_ms"])
            by["all"].append(c["recovery_ms"])
    return {t: {"n": len(v), "p50": _pct(v, 50), "max": max(v)} for t, v in sorted(by.items())}


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def ok(rep: dict) -> bool:
    """What makes the command exit non-zero: an acknowledged message lost (in the store, or
    never delivered to a consumer group after the drain, or under SYNC_MASTER missing on a
    slave), garbage served, a store that does not verify, or a broker that did not come back."""
    slaves_ok = rep.get("master_role") != "SYNC_MASTER" or not any(rep.get("slaves_missing", {}).values())
    return (rep["acked_lost"] == 0 and rep["garbage"] == 0 and rep.get("store_verified", True) and slaves_ok
            and all(g["missing"] == 0 for g in rep["consumers"].values())
            and rep["unserved_cycles"] == 0 and rep.get("restarted_serving", True))


def summary(rep: dict) -> str:
    r = rep["recovery_ms"].get("all")
    rec = f"recovery p50 {r['p50']:.0f} ms max {r['max']:.0f} ms" if r else "no broker-side kill"
    mix = ", ".join(f"{t} {n}" for t, n in sorted(rep["targets"].items()))
    miss = sum(g["missing"] for g in rep["consumers"].values())
    return (f"shmq chaos {rep.get('flush', '?')}: {rep['cycles']} cycles ({mix}), acked {rep['acked']}, "
            f"recovered {rep['recovered']}, acked-lost {rep['acked_lost']}, duplicates {rep['duplicates']}, "
            f"garbage {rep['garbage']}, consumer-missing {miss}, {rec}: {'OK' if ok(rep) else 'FAILED'}")
