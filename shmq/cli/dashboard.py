"""``shmq dashboard``: serve the web dashboard (argument parsing only; shmq.dashboard does the work)."""
from __future__ import annotations

import signal
import sys
import threading


def add_parser(sub):
    p = sub.add_parser("dashboard", help="serve the web dashboard (loopback by default)")
    p.add_argument("-n", "--namesrv", default="127.0.0.1:9876", help="NameServer address(es), ';'-separated")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between chart samples")
    p.add_argument("--access-key", default=None, help="ACL account the dashboard signs its requests with")
    p.add_argument("--secret-key", default=None, help="ACL secret of --access-key")
    return p


def run(args) -> int:
    from shmq.dashboard.server import DashboardServer
    try:
        srv = DashboardServer(args.namesrv, args.host, args.port, args.interval, args.access_key, args.secret_key)
    except OSError as e:
        print(f"shmq dashboard: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    srv.start()
    print(f"shmq dashboard on {srv.url} (NameServer {args.namesrv})", flush=True)
    stop.wait()
    srv.close()
    return 0
