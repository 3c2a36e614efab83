"""Where alerts go: ``[alerts]`` parsing, the rows and log lines of transitions, the webhook (no Spark)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from lowwater.config import ConfigError
from lowwater.config.observe import AlertsConfig, parse_alerts
from lowwater.core.alerts import AlertRules
from lowwater.observe.alerting import ALERTS_ARROW, Alerting
from lowwater.observe.webhook import Webhook


def test_alerts_section_absent_is_off_and_empty_is_the_defaults():
    assert parse_alerts(None) is None
    assert parse_alerts({}) == AlertsConfig()


def test_alerts_thresholds_durations_and_switching_off():
    cfg = parse_alerts({"late_rate": 0.01, "idle_for": "2m", "holding_for": False, "spread_steps": 3,
                        "webhook": "http://127.0.0.1:9/hook", "webhook_timeout": "500ms", "webhook_retries": 1})
    assert cfg.rules == AlertRules(late_rate=0.01, idle_for_us=120_000_000, holding_for_us=None, spread_steps=3)
    assert (cfg.webhook_timeout_s, cfg.webhook_retries) == (0.5, 1)


@pytest.mark.parametrize(("raw", "key"), [
    ({"late_rate": -1}, "alerts.late_rate"),
    ({"lag_factor": "3x"}, "alerts.lag_factor"),
    ({"late_steps": False}, "alerts.late_steps"),    # a window cannot be switched off
    ({"idle_for": "soon"}, "alerts.idle_for"),
    ({"webhook": "ftp://x"}, "alerts.webhook"),
    ({"lag": 3}, "alerts.lag"),                      # typo
])
def test_bad_alerts_name_their_key(raw, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_alerts(raw)


class _Receiver(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:  # noqa: ANN002 - quiet
        pass


def test_transitions_are_rows_log_lines_and_webhook_posts(caplog):
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    written = {}
    cfg = parse_alerts({"webhook": f"http://127.0.0.1:{server.server_port}/hook"})
    alerting = Alerting(cfg, "p", lambda step, table: written.__setitem__(step, table), clock=lambda: 0)
    try:
        with caplog.at_level("INFO", logger="lowwater"):
            alerting.on_step(0, {"rows": 100, "too_late": 5})   # 5 % too late: fires
            alerting.on_step(1, {"rows": 100, "too_late": 0})   # still 2.5 % over the last steps
            for s in range(2, 7):
                alerting.on_step(s, {"rows": 100})               # out of the 5-step window at step 5
    finally:
        alerting.close()
        server.shutdown()
    assert sorted(written) == [0, 5]
    assert written[0].schema == ALERTS_ARROW
    assert [(r["rule"], r["state"]) for r in written[0].to_pylist()] == [("late_rate", "firing")]
    assert [(r["rule"], r["state"]) for r in written[5].to_pylist()] == [("late_rate", "resolved")]
    assert [(p["rule"], p["state"], p["step"]) for p in _Receiver.got] == [
        ("late_rate", "firing", 0), ("late_rate", "resolved", 5)]
    assert "alert late_rate firing at step 0" in caplog.text
    assert alerting.firing["late_rate"] is False


def test_a_dead_webhook_never_waits_and_gives_up_after_its_retries():
    hook = Webhook("http://127.0.0.1:9/hook", timeout_s=0.2, retries=2, backoff_s=0.01)  # port 9: nothing listens
    t0 = time.monotonic()
    for i in range(3):
        hook.post({"rule": "late_rate", "n": i})
    assert time.monotonic() - t0 < 0.05  # the step only queues
    hook.close(wait_s=10)
    assert (hook.delivered, hook.dropped, hook.attempts) == (0, 3, 9)  # 1 + 2 retries each, then dropped
