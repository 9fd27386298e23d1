"""The master's HA service (RocketMQ's HAService + HAConnection): accepts slaves on
``haListenPort`` and streams them the CommitLog.

Per slave connection, two threads as in RocketMQ: a reader taking the slave's reported
offsets, and a writer that waits for the first report, then sends frames of up to 32 KiB
from where the slave stands (an empty slave, reporting 0, starts at the master's last file,
as RocketMQ does) and a heartbeat frame when it has been silent ``haSendHeartbeatInterval``.

What a slave acknowledges feeds the control block's replicated position (SYNC_MASTER
putters wait on it, shmq_wait_replicated), and two rules make that safe where RocketMQ
trusts the slave:
* an acknowledgement counts only up to what was actually sent on that connection, so a
  slave reporting an offset beyond the master's never releases a putter early;
* a slave whose first report is outside the log (past its end, before its first file, or
  not on a record boundary) is refused with a log line saying so, never streamed bytes
  that would not line up.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time

from shmq.native import lib

from .wire import TRANSFER_BATCH, HAProtocolError, ReportReader, frame_header

log = logging.getLogger("shmq.store.ha")


class HAService:
    def __init__(self, store, host: str, port: int, *, heartbeat_ms: int = 5000, housekeeping_ms: int = 20_000):
        self.store = store
        self.heartbeat_s = heartbeat_ms / 1000.0
        #: a slave silent this long is dropped (it reports at least every heartbeat), so a
        #: link that died without a FIN/RST does not keep counting as a slave
        self.housekeeping_s = housekeeping_ms / 1000.0
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._conns: set[HAConnection] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, name="shmq-ha-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("HA service listening on port %d", self.port)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        for c in conns:
            c.join()
        self._publish(0)

    @property
    def connections(self) -> list["HAConnection"]:
        with self._lock:
            return list(self._conns)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                s, addr = self._sock.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                if self._stop.is_set():
                    return
                log.exception("HA accept failed")
                time.sleep(0.1)
                continue
            conn = HAConnection(self, s, f"{addr[0]}:{addr[1]}")
            with self._lock:
                self._conns.add(conn)
            log.info("slave %s connected to the HA service", conn.peer)
            conn.start()

    def removed(self, conn: "HAConnection") -> None:
        with self._lock:
            self._conns.discard(conn)
            n = len(self._conns)
        log.info("slave %s disconnected (%d left)", conn.peer, n)
        self._publish(-1)

    def acked(self, conn: "HAConnection") -> None:
        self._publish(-1)

    def _publish(self, _unused: int) -> None:
        """The replicated position is the best acknowledgement of any live slave (RocketMQ's
        push2SlaveMaxOffset); the slave count tells putters whether to wait at all."""
        with self._lock:
            live = [c for c in self._conns if c.request_offset >= 0]
            best = max((c.acked for c in live), default=0)
        lib.shmq_set_replicated(self.store.cb.ctl, best, len(live))


class HAConnection:
    def __init__(self, service: HAService, sock: socket.socket, peer: str):
        self.service = service
        self.store = service.store
        self.sock = sock
        self.peer = peer
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request_offset = -1   # the slave's first report: where streaming starts
        self.sent = -1             # end of what was sent on this connection
        self.acked = 0             # the slave's last report, capped at ``sent``
        self.reported = 0          # the slave's last report as it came
        self._closed = threading.Event()
        self._first = threading.Event()
        self._exit_lock = threading.Lock()
        self._ack_lock = threading.Lock()
        self._exits = 0
        self._reader = threading.Thread(target=self._read_loop, name=f"shmq-ha-read-{peer}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"shmq-ha-write-{peer}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._first.set()
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self) -> None:
        for t in (self._reader, self._writer):
            if t is not threading.current_thread() and t.is_alive():
                t.join(5)

    # ------------------------------------------------------------------ reading ----
    def _read_loop(self) -> None:
        rr = ReportReader()
        last = time.monotonic()
        try:
            while not self._closed.is_set():
                r, _, _ = select.select([self.sock], [], [], 0.5)
                if not r:
                    if time.monotonic() - last > self.service.housekeeping_s:
                        log.warning("slave %s silent for %.0f s; dropping it", self.peer, self.service.housekeeping_s)
                        break
                    continue
                last = time.monotonic()
                data = self.sock.recv(65536)
                if not data:
                    break
                off = rr.feed(data)
                if off is not None:
                    self._on_report(off)
        except (OSError, HAProtocolError) as e:
            if not self._closed.is_set():
                log.warning("HA connection from %s: %s", self.peer, e)
        finally:
            self._finish()

    def _on_report(self, offset: int) -> None:
        self.reported = offset
        if self.request_offset < 0:
            why = self._refusal(offset)
            if why:
                log.error("refusing slave %s: %s", self.peer, why)
                self.close()
                return
            self.request_offset = offset
            log.info("slave %s requests offset %d", self.peer, offset)
            self._first.set()
            return
        self._reack()

    def _reack(self) -> None:
        """acked = the slave's last report capped at what was sent. Both threads call it: the
        reader when a report comes, the writer once a frame is sent (a report can overtake
        the writer's bookkeeping of the frame it acknowledges; without this it would wait
        for the slave's next heartbeat)."""
        with self._ack_lock:
            acked = min(self.reported, self.sent)
            if acked <= self.acked:
                return
            self.acked = acked
        self.service.acked(self)

    def _refusal(self, offset: int) -> str | None:
        """Why a slave starting at ``offset`` cannot be served, or None."""
        store = self.store
        commit, first = store.commit_pos, store.cb.min_pos
        if offset == 0:
            return None
        if offset > commit:
            return (f"it reports offset {offset}, past this master's log end {commit}: its log holds data this "
                    f"master never had (did it follow another master?); give it a fresh store")
        if offset < first:
            return (f"it reports offset {offset}, before this master's first CommitLog file at {first} "
                    f"(older files were deleted); give it a fresh store")
        fsize = store.commitlog.file_size
        if offset != commit and offset % fsize and store.commitlog.check(offset) < 0:
            return f"its offset {offset} is not at a record boundary of this master's log"
        return None

    # ------------------------------------------------------------------ writing ----
    def _write_loop(self) -> None:
        try:
            self._first.wait()
            if self._closed.is_set():
                return
            self.sent = self._start_offset()
            log.info("master streams to slave %s from %d (it requested %d)", self.peer, self.sent,
                     self.request_offset)
            self.service.acked(self)  # the slave now counts as connected
            last = 0.0
            while not self._closed.is_set():
                if self._send_some():
                    last = time.monotonic()
                    continue
                if time.monotonic() - last >= self.service.heartbeat_s:
                    self.sock.sendall(frame_header(self.sent, 0))
                    last = time.monotonic()
                self.store.wait(self.sent, min(0.5, self.service.heartbeat_s))
        except OSError as e:
            if not self._closed.is_set():
                log.warning("HA connection to %s: %s", self.peer, e)
        finally:
            self._finish()

    def _start_offset(self) -> int:
        if self.request_offset > 0:
            return self.request_offset
        fsize = self.store.commitlog.file_size
        commit = self.store.commit_pos
        return max(commit - commit % fsize, self.store.cb.min_pos)

    def _send_some(self) -> bool:
        """One frame of what the slave lacks, never crossing a file; False if nothing new."""
        commit = self.store.commit_pos
        pos = self.sent
        if pos >= commit:
            return False
        fsize = self.store.commitlog.file_size
        idx, off = divmod(pos, fsize)
        # Past this file the log went on in the next one: the rest of this file (a BLANK
        # filler and zeros) goes too, as RocketMQ sends whole files.
        limit = fsize if commit >= (idx + 1) * fsize else commit - idx * fsize
        n = min(limit - off, TRANSFER_BATCH)
        view = self.store.commitlog.view(pos, n)
        self.sock.sendall(frame_header(pos, n) + view)
        self.sent = pos + n
        if self.reported > pos:
            self._reack()
        return True

    def _finish(self) -> None:
        """Each thread calls this on its way out: the first tells the service, the last
        closes the socket (the other may still be inside select or send on it)."""
        with self._exit_lock:
            self._exits += 1
            first, last = self._exits == 1, self._exits == 2
        self.close()
        if first:
            self.service.removed(self)
        if last:
            try:
                self.sock.close()
            except OSError:
                pass


__all__ = ["HAService", "HAConnection"]
