"""Alerts through the engine: a partition that stalls, goes idle and rejoins, watched end to end.

One source, two partitions, one file a step (arrival clock in seconds):

    step 0: p0 at 1, p1 at 1        W_p = 1, 1       spread 0
    step 1..3: p0 at 3, 5, 7        p1 silent        spread 2, 4, 6   -> spread_growing fires at step 3
    step 4: p0 at 20                p1 idle (arrival 20 - 1 > idle_timeout 10 s): out of the spread
                                                     spread 0         -> spread_growing resolves
    step 5: p0 at 22                p1 still idle (since step 4, longer than idle_for) -> partition_idle fires
    step 6: p1 at 23, p0 at 24      p1 rejoins                         -> partition_idle resolves

The rules are the pure core's (``tests/core/test_alerts.py`` has their edge
cases); this checks that a real run's ``metrics/`` rows feed them, that every
transition is a row of ``alerts/`` and a JSON POST to a webhook on 127.0.0.1,
and that nothing else fires on a run without late rows.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest

from lowwater.config import parse_config
from lowwater.observe.hub import Observers
from lowwater.spark.engine import Engine

pytestmark = pytest.mark.spark

SCHEMA = "partition STRING, event_time DOUBLE, arrival_time DOUBLE, key STRING, amount DOUBLE"
STEPS = [[("0", 1), ("1", 1)], [("0", 3)], [("0", 5)], [("0", 7)], [("0", 20)], [("0", 22)], [("1", 23), ("0", 24)]]
EXPECTED = [("spread_growing", "firing", 3), ("spread_growing", "resolved", 4),
            ("partition_idle", "firing", 5), ("partition_idle", "resolved", 6)]


class _Receiver(BaseHTTPRequestHandler):
    posts: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_a_stalling_partition_trips_spread_and_idle_and_both_resolve_when_it_rejoins(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for i, rows in enumerate(STEPS):
        (landing / f"part-{i}.jsonl").write_text("".join(
            json.dumps({"partition": p, "event_time": float(t), "arrival_time": float(t), "key": "a", "amount": 1.0})
            + "\n" for p, t in rows))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Receiver.posts = []
    try:
        cfg = parse_config({
            "source": {"format": "jsonl", "path": "landing", "partition": "partition", "event_time": "event_time",
                       "arrival_time": "arrival_time", "time_unit": "s", "schema": SCHEMA,
                       "max_files_per_batch": 1},
            "watermark": {"max_out_of_orderness": "0s", "idle_timeout": "10s"},
            "window": {"type": "tumbling", "size": "10s", "key": ["key"], "aggregations": {"total": "sum(amount)"}},
            "late": {"policy": "side_output"},
            "output": {"path": "out"},
            "observe": {"pipeline": "stall"},
            "alerts": {"spread_steps": 3, "idle_for": "1ms", "holding_for": False,
                       "webhook": f"http://127.0.0.1:{server.server_port}/hook"},
        }, base_dir=tmp_path)
        engine = Engine(cfg, spark, observers=Observers(cfg))
        manifest = engine.run(once=True)
    finally:
        server.shutdown()
        server.server_close()
    assert manifest.step == len(STEPS) - 1
    metrics = pq.read_table(tmp_path / "out" / "metrics").to_pandas().sort_values("batch_id")
    assert list(metrics["spread_s"]) == [0.0, 2.0, 4.0, 6.0, 0.0, 0.0, 1.0]
    assert [list(x) for x in metrics["idle_partitions"]] == [[], [], [], [], ["1"], ["1"], []]

    alerts = pq.read_table(tmp_path / "out" / "alerts").to_pandas().sort_values(["batch_id", "rule"])
    assert [(r.rule, r.state, r.step) for r in alerts.itertuples()] == EXPECTED  # and nothing else fired
    assert set(alerts["pipeline"]) == {"stall"}
    # every transition reached the webhook as JSON, in order (posts never block the step; close() drains them)
    assert [(p["rule"], p["state"], p["step"]) for p in _Receiver.posts] == EXPECTED
    assert _Receiver.posts[2]["message"].startswith("partition(s) 1 idle for more than")
