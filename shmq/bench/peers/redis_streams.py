"""Redis Streams through redis-py: producers XADD, consumers XREADGROUP (one consumer group,
NOACK: the group's last-delivered id is the consumed offset, as a RocketMQ consumer offset).
A batch is a pipeline of XADDs (one round trip). The harness starts its own ``redis-server``
(Debian's package) on a free loopback port with a temp dir, no snapshots; for sync-flush
with ``appendonly yes`` and ``appendfsync always`` (an fsync before each answer, batched
across clients: Redis's group commit). Skipped, saying why, when redis-server or redis-py
is missing."""
from __future__ import annotations

import shutil
import time

from .base import FuncReceiver, FuncSender, ServerPeer

STREAM = "bench"
GROUP = "bench"


class RedisPeer(ServerPeer):
    name = "redis"
    description = "Redis Streams (XADD / XREADGROUP via redis-py), redis-server on loopback TCP"
    durable = True

    def skip_reason(self, sc, env):
        if shutil.which("redis-server") is None:
            return "redis-server not found (Debian: apt-get install redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "redis-py is not installed (pip install shmq[bench])"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        import redis

        from ..services import ServiceUnavailable, free_port
        self._env = env
        durable = ["--appendonly", "yes", "--appendfsync", "always"] if sc.durable else ["--appendonly", "no"]
        last = None
        for _ in range(3):  # a free port may be taken between probing and binding: retry
            port = free_port()
            argv = [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--dir", tmpdir,
                    "--save", "", "--daemonize", "no", "--protected-mode", "yes", *durable]
            try:
                p, _ = env.spawn(argv, r"Ready to accept connections", f"redis-{port}.log", timeout=15)
            except ServiceUnavailable as e:
                last = e
                continue
            self._pid = p.pid
            r = redis.Redis(host="127.0.0.1", port=port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    r.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
            r.close()
            return {"port": port}
        raise last or RuntimeError("redis-server did not start")

    @classmethod
    def open_sender(cls, ch, sc, idx):
        import redis
        r = redis.Redis(host="127.0.0.1", port=ch["port"])
        xadd = r.xadd

        def send_batch(bodies):
            pipe = r.pipeline(transaction=False)
            for b in bodies:
                pipe.xadd(STREAM, {"d": b})
            pipe.execute()

        return FuncSender(lambda body: xadd(STREAM, {"d": body}), send_batch, r.close)

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        import redis
        r = redis.Redis(host="127.0.0.1", port=ch["port"])
        name = f"c{idx}"
        xreadgroup = r.xreadgroup

        def recv(timeout):
            got = xreadgroup(GROUP, name, {STREAM: ">"}, count=256, block=max(1, int(timeout * 1000)), noack=True)
            if not got:
                return []
            return [fields[b"d"] for _, fields in got[0][1]]

        return FuncReceiver(recv, r.close)
