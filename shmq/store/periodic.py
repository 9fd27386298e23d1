"""A background thread that calls ``run_once()`` every interval until stopped; a round that
raises is logged and the next one runs anyway (a service must not die silently). The owner's
cleanup and the broker's transaction check-back are such services."""
from __future__ import annotations

import logging
import threading


class PeriodicService:
    def __init__(self, interval_s: float, name: str, log: logging.Logger):
        self.interval_s = interval_s
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def run_once(self):  # pragma: no cover - each service defines its round
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                self._log.exception("%s: round failed", self._thread.name)
