"""How the ``shmq`` admin commands print: aligned tables or ``--json``, a progress bar on
stderr for long work (only on a terminal, so pipes and tests get clean output), and errors
as one human line plus a hint instead of a traceback."""
from __future__ import annotations

import dataclasses
import json
import sys
import time

from shmq.errors import (BrokerError, NoPermission, RemotingConnectError, RemotingError, RemotingTimeout,
                         ShmqError, TopicNotExist)


def _plain(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_plain(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return obj


class Out:
    def __init__(self, as_json: bool = False, stream=None):
        self.as_json = as_json
        self.stream = stream or sys.stdout

    def table(self, header: list[str], rows: list[list], records: list | None = None) -> None:
        """A table, or with --json the rows as objects keyed by the header (or ``records``)."""
        if self.as_json:
            data = _plain(records) if records is not None else [dict(zip(header, r)) for r in rows]
            print(json.dumps(data, indent=1, default=str), file=self.stream)
            return
        cells = [[("" if x is None else str(x)) for x in r] for r in rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
        for r in [header, *cells]:
            print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip(), file=self.stream)

    def obj(self, data, text: str | None = None) -> None:
        """One object: JSON with --json (and by default when no text form is given)."""
        if self.as_json or text is None:
            print(json.dumps(_plain(data), indent=1, default=str), file=self.stream)
        else:
            print(text, file=self.stream)

    def line(self, text: str) -> None:
        if not self.as_json:
            print(text, file=self.stream)


class Progress:
    """``with Progress("resend", total) as p: p(n)``: a bar on stderr when it is a terminal."""

    def __init__(self, what: str, total: int | None = None, stream=None):
        self.what = what
        self.total = total
        self.stream = stream or sys.stderr
        self.shown = self.stream.isatty()
        self._last = 0.0
        self.n = 0

    def __call__(self, n: int) -> None:
        self.n = n
        now = time.monotonic()
        if not self.shown or now - self._last < 0.1:
            return
        self._last = now
        if self.total:
            done = min(int(30 * n / self.total), 30)
            bar = "#" * done + "." * (30 - done)
            self.stream.write(f"\r{self.what} [{bar}] {n}/{self.total}")
        else:
            self.stream.write(f"\r{self.what}: {n}")
        self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.shown:
            self._last = 0.0
            self(self.n)
            self.stream.write("\n")
            self.stream.flush()


def hint_for(e: Exception, namesrv: str = "") -> str:
    """What to try next, for the errors people meet daily."""
    if isinstance(e, TopicNotExist) or "No topic route info" in str(e) or "topic not exist" in str(e).lower():
        return f"the topic does not exist: `shmq topicList -n {namesrv}` lists topics, `shmq updateTopic -t NAME -c CLUSTER` creates one"
    if isinstance(e, NoPermission) or "ACL" in str(e) or "accessKey" in str(e):
        return "the broker refused the request: with ACL on, give --access-key and --secret-key of an account allowed to do it"
    if isinstance(e, RemotingConnectError):
        return f"nothing answers there: is the NameServer/broker running? (`shmq clusterList -n {namesrv}` shows the brokers)"
    if isinstance(e, RemotingTimeout):
        return "the broker did not answer in time: it may be overloaded or stopped (SIGSTOP); retry, or check its log"
    if isinstance(e, BrokerError) and getattr(e, "code", None) == 3:
        return "this broker does not serve that request code (an older shmq, or a feature it lacks)"
    if isinstance(e, RemotingError):
        return "the connection failed: check the address and that the process is up"
    return ""


def fail(e: Exception, namesrv: str = "") -> int:
    msg = str(e) or e.__class__.__name__
    print(f"shmq: error: {msg}", file=sys.stderr)
    h = hint_for(e, namesrv)
    if h:
        print(f"hint: {h}", file=sys.stderr)
    return 1


def guarded(run):
    """Wrap a command's run(args): ShmqError and bad input become one line and a hint."""
    def wrapped(args) -> int:
        try:
            return run(args)
        except ShmqError as e:
            return fail(e, getattr(args, "namesrv", ""))
        except (ValueError, KeyError) as e:
            print(f"shmq: error: {e}", file=sys.stderr)
            return 2
    return wrapped
