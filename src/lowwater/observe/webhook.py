"""The alert webhook: a JSON POST of every firing and resolving, off the step's thread.

A step only puts the payload on a bounded queue (:meth:`Webhook.post` never
waits for the network); one daemon thread delivers them in order, each with
``timeout_s`` per attempt and at most ``retries`` retries (backoff 0.5 s, 1 s,
2 s, ...). A receiver that is down costs the pipeline nothing but a log line:
payloads that cannot be delivered, or that find the queue full, are dropped
and counted (:attr:`Webhook.dropped`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.request
from typing import Any

log = logging.getLogger("lowwater")

QUEUE_SIZE = 256


class Webhook:
    """Delivers JSON payloads to ``url`` from a background thread (see the module docstring)."""

    def __init__(self, url: str, timeout_s: float = 2.0, retries: int = 3, backoff_s: float = 0.5) -> None:
        self.url, self.timeout_s, self.retries, self.backoff_s = url, timeout_s, retries, backoff_s
        self.delivered = 0
        self.dropped = 0
        self.attempts = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._deliver_all, name="lowwater-webhook", daemon=True)
        self._thread.start()

    def post(self, payload: dict[str, Any]) -> None:
        """Queue ``payload`` for delivery; returns at once (a full queue drops it, counted)."""
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.dropped += 1
            log.warning("alert webhook: queue full, dropped an alert for %s", payload.get("rule"))

    def close(self, wait_s: float | None = None) -> None:
        """Deliver what is queued (waiting at most ``wait_s``, default one attempt's timeout), then stop."""
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(self.timeout_s if wait_s is None else wait_s)

    def _deliver_all(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            self._deliver(payload)

    def _deliver(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, default=str).encode()
        for attempt in range(self.retries + 1):
            self.attempts += 1
            request = urllib.request.Request(self.url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - configured URL
                    if 200 <= response.status < 300:
                        self.delivered += 1
                        return
            except Exception as e:  # noqa: BLE001 - any failure is a retry, then a drop
                error = e
            else:
                error = RuntimeError(f"HTTP {response.status}")
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt)
        self.dropped += 1
        log.warning("alert webhook: gave up on %s after %d attempt(s): %s", payload.get("rule"),
                    self.retries + 1, error)
