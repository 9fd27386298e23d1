"""The local transport: a producer or consumer on the broker's host maps the
broker's store and appends or reads directly, through the same put pipeline the broker uses.

A LocalLink is made per broker from its attach info (a shmq-private request that other
clients never send). It is dropped, and the client goes back to TCP, whenever the store
cannot be attached (another host, another user, no permission, a stale segment); a
StaleSegment during use means the broker restarted: re-attach once, from fresh attach info.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from shmq.errors import ShmqError, StaleSegment
from shmq.native import lib
from shmq.protocol import RemotingCommand, attach
from shmq.protocol.codes import SHMQ_GET_ATTACH_INFO
from shmq.store import MessageStore
from shmq.store.put import PutPipeline
from shmq.store.timer_rules import DEFAULT_TIMER, TimerSettings

log = logging.getLogger("shmq.client.local")



def _timer_settings(info: dict[str, str]) -> TimerSettings:
    """The broker's timer keys from its attach info (defaults for an older broker)."""
    try:
        return TimerSettings(info.get("timerWheelEnable", "true").lower() == "true",
                             int(info.get("timerMaxDelaySec", DEFAULT_TIMER.max_delay_sec)),
                             int(info.get("timerPrecisionMs", DEFAULT_TIMER.precision_ms)))
    except ValueError:
        return DEFAULT_TIMER


class LocalLink:
    """The attached store of one broker, with the pipeline that writes into it."""

    def __init__(self, broker_name: str, info: dict[str, str], cluster: str):
        self.broker_name = broker_name
        self.info = info
        self.root = info["storeRoot"]
        self.generation = int(info.get("generation", "0"))
        self.store = MessageStore.attach(self.root)
        if self.store.cb.generation != self.generation:
            self.store.close()
            raise StaleSegment(f"store of {broker_name} changed generation while attaching")
        self.pipeline = PutPipeline(self.store, cluster_name=cluster, timer=_timer_settings(info))
        self.lock = threading.Lock()

    @property
    def alive(self) -> bool:
        cb = self.store.cb
        # READONLY after a failed flush stays attached: reads go on, puts raise StoreReadOnly
        return (cb.ctl is not None and cb.state in (lib.SHMQ_STATE_READY, lib.SHMQ_STATE_READONLY)
                and cb.generation == self.generation)

    def close(self) -> None:
        try:
            self.store.close()
        except ShmqError:
            pass


class LocalLinks:
    """Per client: broker name -> LocalLink, or None while the broker is not (or not yet)
    attachable. A None is re-examined after RETRY_S, so a broker that was down, or that
    restarted under a new generation, is attached again without the client restarting."""

    RETRY_S = 2.0

    def __init__(self, instance, mode: str):
        if mode not in ("auto", "never", "always"):
            raise ValueError("local must be 'auto', 'never' or 'always'")
        self.instance = instance
        self.mode = mode
        self._links: dict[str, tuple[LocalLink | None, float]] = {}
        self._lock = threading.Lock()

    def _cached(self, broker_name: str):
        entry = self._links.get(broker_name)
        if entry is None:
            return False
        link, when = entry
        if link is not None:
            return link if link.alive else False
        return None if time.monotonic() - when < self.RETRY_S else False

    def get(self, broker_name: str, cluster: str = "DefaultCluster") -> LocalLink | None:
        """From a user thread."""
        if self.mode == "never":
            return None
        link = self._cached(broker_name)
        if link is not False:
            return link
        return self.instance.call(self.aget(broker_name, cluster), 10)

    async def aget(self, broker_name: str, cluster: str = "DefaultCluster") -> LocalLink | None:
        """From the client's loop (attach info is asked over TCP; the attach itself is a few
        file operations)."""
        if self.mode == "never":
            return None
        link = self._cached(broker_name)
        if link is not False:
            return link
        old = self._links.get(broker_name)
        if old and old[0]:
            old[0].close()
        link = await self._attach(broker_name, cluster)
        with self._lock:
            self._links[broker_name] = (link, time.monotonic())
        return link

    async def _attach(self, broker_name: str, cluster: str) -> LocalLink | None:
        addr = self.instance.master_addr(broker_name)
        try:
            if addr is None:
                raise ShmqError(f"no address for broker {broker_name}")
            resp = await self.instance.invoke(addr, RemotingCommand(code=SHMQ_GET_ATTACH_INFO), 3.0)
            challenge = resp.ext_fields.get("challenge") if resp.code == 0 else None
            if challenge is not None:
                # Prove we can read the store's key (no access: OSError, and we stay on TCP).
                key = attach.read_key(resp.ext_fields.get("keyFile", ""))
                resp = await self.instance.invoke(addr, RemotingCommand(
                    code=SHMQ_GET_ATTACH_INFO,
                    ext_fields={"challenge": challenge, "proof": attach.proof(key, challenge)}), 3.0)
            if resp.code != 0 or "storeRoot" not in resp.ext_fields:
                raise ShmqError(f"broker {broker_name} gave no attach info (code {resp.code}: {resp.remark})")
            info = resp.ext_fields
            if not os.path.isdir(info["storeRoot"]):
                raise ShmqError(f"store {info['storeRoot']} of {broker_name} is not on this host")
            link = LocalLink(broker_name, info, cluster)
            log.info("attached to the store of %s at %s (generation %d)", broker_name, link.root, link.generation)
            return link
        except (ShmqError, OSError, ValueError) as e:
            if self.mode == "always":
                raise ShmqError(f"local='always' but the store of {broker_name} cannot be attached: {e}") from e
            log.info("broker %s stays on TCP: %s", broker_name, e)
            return None

    def invalidate(self, broker_name: str) -> None:
        with self._lock:
            entry = self._links.pop(broker_name, None)
        if entry and entry[0]:
            entry[0].close()

    def close(self) -> None:
        with self._lock:
            entries, self._links = list(self._links.values()), {}
        for link, _ in entries:
            if link:
                link.close()
