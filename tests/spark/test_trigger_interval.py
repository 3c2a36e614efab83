"""`[trigger] interval`: a continuous run starts a micro-batch every interval (Spark's processing-time trigger)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from lowwater.config import parse_config
from lowwater.spark.engine import Engine
from lowwater.testing.scenario import base_config

pytestmark = pytest.mark.spark


def test_configured_interval_is_the_query_trigger(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [{"partition": "0", "event_time": t, "key": "a", "amount": 1.0} for t in (1, 2, 12)]
    (landing / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = parse_config(base_config(trigger={"interval": "1500ms"}), tmp_path)
    assert cfg.trigger_interval_us == 1_500_000
    engine = Engine(cfg, spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            engine.run()  # continuous: returns when the query is stopped
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not engine.reports:
        time.sleep(0.2)
    try:
        assert engine.reports, "no micro-batch ran within 120 s"
        trigger = engine.query._jsq.streamingQuery().trigger().toString()  # noqa: SLF001 - the JVM's own trigger
        assert trigger == "ProcessingTimeTrigger(1500)"
        assert engine.reports[0].accounting.rows == 3 and engine.reports[0].windows_fired == 1
    finally:
        engine.query.stop()
        t.join(60)
    assert not t.is_alive() and not errors
