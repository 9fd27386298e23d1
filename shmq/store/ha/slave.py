"""The slave's HA client (RocketMQ's HAService.HAClient): one connection to the master's HA
port, reporting this store's received offset and writing what comes back through the
replica writer.

It reports at connect, after every frame that moved the log, and every
``haSendHeartbeatInterval``; a master silent for ``haHousekeepingInterval`` (20 s) is
dropped and dialled again. The master address is either fixed (``haMasterAddress``) or
learned from the NameServers' register answer (``set_master``), as RocketMQ does. A frame
for an offset other than where the slave stands closes the connection with a log line
(RocketMQ: "master pushed offset not equal the max phy offset in slave").
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time

from .replica import ReplicaWriter
from .wire import FrameReader, HAProtocolError, report

log = logging.getLogger("shmq.store.ha")

HOUSEKEEPING_S = 20.0


class HAClient:
    def __init__(self, store, master: str | None = None, *, heartbeat_ms: int = 5000,
                 housekeeping_s: float = HOUSEKEEPING_S):
        self.store = store
        self.replica = ReplicaWriter(store)
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.housekeeping_s = housekeeping_s
        self._master = master or None
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shmq-ha-client", daemon=True)
        self.last_error = ""

    @property
    def master(self) -> str | None:
        return self._master

    def set_master(self, addr: str | None) -> None:
        """The master's HA address (host:port); a change drops the current connection."""
        addr = addr or None
        if addr != self._master:
            log.info("HA master address %s -> %s", self._master, addr)
            self._master = addr
            self._drop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._drop()
        self._thread.join()

    def _drop(self) -> None:
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            addr = self._master
            if not addr:
                self._stop.wait(0.5)
                continue
            try:
                self._session(addr)
            except (OSError, HAProtocolError) as e:
                if not self._stop.is_set():
                    self.last_error = str(e)
                    log.warning("HA connection to master %s: %s", addr, e)
            finally:
                self.connected.clear()
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None
            self._stop.wait(1.0)  # RocketMQ's HAClient waits 5 s; a short wait catches up sooner

    def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=3.0)
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        reported = self.replica.received
        sock.sendall(report(reported))
        log.info("slave connected to master %s, reporting offset %d", addr, reported)
        self.connected.set()
        frames = FrameReader()
        last_read = last_write = time.monotonic()
        while not self._stop.is_set() and addr == self._master:
            r, _, _ = select.select([sock], [], [], min(1.0, self.heartbeat_s))
            now = time.monotonic()
            if r:
                data = sock.recv(1 << 20)
                if not data:
                    raise OSError("the master closed the connection")
                last_read = now
                for offset, body in frames.feed(data):
                    self._apply(offset, body)
            elif now - last_read > self.housekeeping_s:
                raise OSError(f"no data or heartbeat from the master for {self.housekeeping_s:g} s")
            received = self.replica.received
            if received > reported or now - last_write >= self.heartbeat_s:
                sock.sendall(report(received))
                reported, last_write = received, now

    def _apply(self, offset: int, body: bytes) -> None:
        received = self.replica.received
        if received != 0 and offset != received:
            raise HAProtocolError(f"master pushed offset {offset}, not equal to this slave's max offset "
                                  f"{received}; reconnecting")
        if body:
            self.replica.append(offset, body)


__all__ = ["HAClient"]
