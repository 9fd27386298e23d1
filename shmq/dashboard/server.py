"""The dashboard's HTTP server: the standard library's ThreadingHTTPServer, a JSON API over
:class:`~shmq.dashboard.api.DashboardApi`, and the static page (``static/``: plain HTML, CSS
and a small hand-written JavaScript, no build step, nothing fetched at run time).

Loopback by default. Writes (create/delete topic, reset, resend) are POSTs with a JSON body
and need the ``X-Shmq-Dashboard: 1`` header, which a cross-site form cannot send, so another
web page open in the same browser cannot drive them.
"""
from __future__ import annotations

import json
import logging
import mimetypes
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from shmq import palette
from shmq.errors import ShmqError

from .api import DashboardApi, now_ms
from .sampler import Sampler

log = logging.getLogger("shmq.dashboard")
STATIC = os.path.join(os.path.dirname(__file__), "static")
MAX_BODY = 64 * 1024


def _time(text: str | None, default: int) -> int:
    if not text:
        return default
    if text.lstrip("-").isdigit():
        return int(text)
    from datetime import datetime
    return int(datetime.fromisoformat(text).timestamp() * 1000)


class Handler(BaseHTTPRequestHandler):
    server: "DashboardServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:  # quiet: the access log goes to debug
        log.debug("%s %s", self.address_string(), fmt % args)

    # ---- answers --------------------------------------------------------------------------
    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, data, code: int = 200) -> None:
        self._send(code, json.dumps(data, default=str).encode(), "application/json")

    def _static(self, path: str) -> None:
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        full = os.path.realpath(os.path.join(STATIC, name))
        if not full.startswith(os.path.realpath(STATIC) + os.sep) or not os.path.isfile(full):
            self._json({"error": f"no such page: {path}"}, 404)
            return
        with open(full, "rb") as f:
            self._send(200, f.read(), mimetypes.guess_type(full)[0] or "application/octet-stream")

    def _call(self, fn, *args) -> None:
        try:
            self._json(fn(*args))
        except ShmqError as e:
            self._json({"error": str(e) or e.__class__.__name__}, 502)
        except (ValueError, KeyError, TypeError) as e:
            self._json({"error": f"bad request: {e}"}, 400)

    # ---- routes ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        u = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        parts = [unquote(p) for p in u.path.split("/") if p]
        api = self.server.api
        if not parts or parts[0] != "api":
            self._static(u.path)
        elif parts[1:] == ["palette"]:
            self._json(palette.as_json())
        elif parts[1:] == ["cluster"]:
            self._call(api.cluster)
        elif parts[1:] == ["topics"]:
            self._call(api.topics)
        elif len(parts) == 3 and parts[1] == "topics":
            self._call(api.topic, parts[2])
        elif parts[1:] == ["groups"]:
            self._call(api.groups)
        elif len(parts) == 3 and parts[1] == "groups":
            self._call(api.group, parts[2])
        elif parts[1:] == ["series"]:
            self._json(self.server.sampler.series())
        elif parts[1:] == ["messages"]:
            self._messages(q)
        else:
            self._json({"error": f"no such API: {u.path}"}, 404)

    def _messages(self, q: dict) -> None:
        api = self.server.api
        if q.get("key"):
            self._call(api.by_key, q["topic"], q["key"])
        elif q.get("id"):
            self._call(api.by_id, q["id"], q.get("topic") or None)
        elif q.get("topic"):
            now = now_ms()
            self._call(api.by_time, q["topic"], _time(q.get("begin"), now - 3_600_000), _time(q.get("end"), now + 1000))
        else:
            self._json({"error": "give topic and key, or id, or topic and a time range"}, 400)

    def do_POST(self) -> None:
        if self.headers.get("X-Shmq-Dashboard") != "1":
            self._json({"error": "missing X-Shmq-Dashboard header"}, 403)
            return
        try:
            n = int(self.headers.get("Content-Length", "0"))
            if n > MAX_BODY:
                raise ValueError("body too large")
            body = json.loads(self.rfile.read(n) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as e:
            self._json({"error": f"bad request: {e}"}, 400)
            return
        parts = [unquote(p) for p in urlparse(self.path).path.split("/") if p]
        api = self.server.api
        if parts == ["api", "topics"]:
            self._call(api.create_topic, str(body["topic"]), int(body.get("queues", 4)))
        elif len(parts) == 4 and parts[:2] == ["api", "topics"] and parts[3] == "delete":
            self._call(api.delete_topic, parts[2])
        elif len(parts) == 4 and parts[:2] == ["api", "groups"] and parts[3] == "reset":
            self._call(api.reset, parts[2], str(body["topic"]), _time(str(body.get("timestamp", "")), now_ms()))
        elif len(parts) == 4 and parts[:2] == ["api", "dlq"] and parts[3] == "resend":
            self._call(api.dlq_resend, parts[2], body.get("msgId"))
        else:
            self._json({"error": "no such API"}, 404)


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, namesrv: str, host: str = "127.0.0.1", port: int = 8080, interval: float = 2.0,
                 access_key: str | None = None, secret_key: str | None = None):
        super().__init__((host, port), Handler)
        self.api = DashboardApi(namesrv, access_key=access_key, secret_key=secret_key)
        self.sampler = Sampler(self.api, interval)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> threading.Thread:
        self.sampler.start()
        t = threading.Thread(target=self.serve_forever, name="shmq-dashboard", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.sampler.stop()
        self.api.close()
