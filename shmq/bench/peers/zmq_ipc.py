"""pyzmq PUSH/PULL over ipc:// (Unix domain sockets in the run's temp dir). Each consumer
binds its own endpoint; every producer connects to all of them (PUSH round-robins over its
peers). A batch is one multipart message. Default high-water marks (1000) give back-pressure,
except for a pull backlog, which needs them unlimited."""
from __future__ import annotations

import os

from .base import FuncReceiver, FuncSender, Peer


class ZmqPeer(Peer):
    name = "pyzmq"
    description = "pyzmq PUSH/PULL over ipc://, one endpoint per consumer"

    def skip_reason(self, sc, env):
        try:
            import zmq  # noqa: F401
        except ImportError:
            return "pyzmq is not installed (pip install shmq[bench])"
        return super().skip_reason(sc, env)

    def __init__(self):
        self._dir = None
        self._env = None

    def setup(self, sc, env, tmpdir):
        self._env, self._dir = env, env.socket_dir()
        return [f"ipc://{os.path.join(self._dir, f'c{j}.ipc')}" for j in range(max(sc.consumers, 1))]

    def teardown(self):
        if self._dir is not None:
            self._env.remove_tmpdir(self._dir)
            self._dir = None

    @classmethod
    def open_sender(cls, endpoints, sc, idx):
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 0)
        if sc.backlog:
            s.setsockopt(zmq.SNDHWM, 0)
        for ep in endpoints:
            s.connect(ep)
        send, send_multipart = s.send, s.send_multipart

        def close():
            s.close(0)
            ctx.term()

        return FuncSender(lambda body: send(body, copy=True), lambda bodies: send_multipart(bodies), close)

    @classmethod
    def open_receiver(cls, endpoints, sc, idx):
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PULL)
        s.setsockopt(zmq.LINGER, 0)
        if sc.backlog:
            s.setsockopt(zmq.RCVHWM, 0)
        s.bind(endpoints[idx])
        poll, recv_multipart, NOBLOCK, Again = s.poll, s.recv_multipart, zmq.NOBLOCK, zmq.Again

        def recv(timeout):
            if not poll(int(timeout * 1000)):
                return []
            out = []
            try:
                for _ in range(256):
                    out.extend(recv_multipart(NOBLOCK))
            except Again:
                pass
            return out

        def close():
            s.close(0)
            ctx.term()

        return FuncReceiver(recv, close)
