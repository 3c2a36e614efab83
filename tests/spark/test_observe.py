"""Watching a run: the Prometheus endpoint and Spark's own progress show the figures of ``metrics/``.

One tiny run (two files, one a step, one row too late in the second) is
shared by every assertion: a hook scrapes the endpoint over HTTP right after
each step commits (and, after step 0, loads the dashboard in headless
Chromium while the query runs), and a ``StreamingQueryListener`` registered
here records Spark's progress events.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql.streaming import StreamingQueryListener

from lowwater.config import parse_config
from lowwater.observe.dashboard import Dashboard
from lowwater.observe.hub import Observers
from lowwater.observe.spark_progress import OBSERVATION, query_name
from lowwater.spark.engine import Engine
from lowwater.testing.browser import plotted
from lowwater.testing.scenario import base_config

pytestmark = pytest.mark.spark

#   step 0:  partition 0: 1, 12   partition 1: 2, 14     -> W = min(12, 14) = 12
#   step 1:  partition 1: 3 (window [0, 10) ended before W = 12: too late), 33; partition 0: 25
FILES = [[("0", 1), ("1", 2), ("0", 12), ("1", 14)], [("1", 3), ("0", 25), ("1", 33)]]


class _Recorder(StreamingQueryListener):
    def __init__(self) -> None:
        self.progress: list = []

    def onQueryStarted(self, event) -> None:  # noqa: N802, ANN001 - Spark's names
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802, ANN001
        self.progress.append(event.progress)

    def onQueryIdle(self, event) -> None:  # noqa: N802, ANN001
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802, ANN001
        pass


def _scrape(port: int) -> dict[tuple, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "pipeline"))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


@dataclass
class Watched:
    ports: set[int]
    manifest: object
    scraped: dict[int, dict]
    progress: list
    metrics: dict[int, dict]
    out: Path
    browsed: dict[str, list[int]]


@pytest.fixture(scope="module")
def watched(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("observe")
    landing = tmp / "landing"
    landing.mkdir()
    for i, rows in enumerate(FILES):
        (landing / f"part-{i}.jsonl").write_text("".join(
            json.dumps({"partition": p, "event_time": t, "key": "a", "amount": 1.0}) + "\n" for p, t in rows))
    cfg = parse_config(base_config(source={"max_files_per_batch": 1},
                                   observe={"prometheus_port": 0, "spark_progress": True, "pipeline": "t",
                                            "spark_progress_interval": "1s"},
                                   alerts={}), tmp)
    engine = Engine(cfg, spark, observers=Observers(cfg))
    scraped: dict[int, dict] = {}
    ports: set[int] = set()
    board = Dashboard(tmp / "out", port=0)
    browsed: dict[str, list[int]] = {}

    def scrape(step: int, *_: object) -> None:  # runs right after the step committed, inside the run
        ports.add(engine.observers.prometheus.port)
        scraped[step] = _scrape(engine.observers.prometheus.port)
        if step == 0:  # the query is running: the page shows the steps so far
            browsed["during"] = plotted(board.url)["steps"]
        if step == len(FILES) - 1:  # the companion reports at its interval and does not flush at the end
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(
                    p.name == query_name("t") and p.observedMetrics.get(OBSERVATION) is not None
                    and p.observedMetrics[OBSERVATION]["step"] == step for p in recorder.progress):
                time.sleep(0.2)

    engine.observers.hooks.append(scrape)
    recorder = _Recorder()
    spark.streams.addListener(recorder)
    try:
        manifest = engine.run(once=True)
        browsed["after"] = plotted(board.url)["steps"]
    finally:
        spark.streams.removeListener(recorder)
        board.close()
    metrics = {s: pq.read_table(tmp / "out" / "metrics" / f"batch_id={s}").to_pylist()[0]
               for s in range(manifest.step + 1)}
    return Watched(ports, manifest, scraped, recorder.progress, metrics, tmp / "out", browsed)


def test_scraped_endpoint_equals_the_metrics_row_of_each_step(watched):
    manifest, scraped, metrics = watched.manifest, watched.scraped, watched.metrics
    assert sorted(scraped) == list(range(manifest.step + 1)) == [0, 1]
    totals = {"on_time": 0, "too_late": 0}
    for step, row in metrics.items():
        got = scraped[step]
        for column in totals:
            totals[column] += row[column]
        low = row["low_watermark"]
        assert got.get(("lowwater_low_watermark_seconds", ())) == (None if low is None else low.timestamp())
        for name, w in row["partition_watermarks"]:
            key = ("lowwater_watermark_seconds", (("partition", name), ("source", "default")))
            assert got.get(key) == (None if w is None else w.timestamp()), (step, name)
        assert got.get(("lowwater_partition_spread_seconds", ())) == row["spread_s"]
        assert got[("lowwater_open_windows", ())] == row["open_windows"]
        assert got[("lowwater_state_bytes", ())] == row["state_bytes"]
        assert got[("lowwater_rows_total", (("class", "on_time"),))] == totals["on_time"]
        assert got[("lowwater_rows_total", (("class", "too_late"),))] == totals["too_late"]
        assert got[("lowwater_step_duration_seconds_count", ())] == step + 1
    assert totals["too_late"] == 1  # event time 3 on partition 1, after W reached 12
    assert metrics[1]["too_late"] == 1


def test_the_late_row_trips_the_late_rate_alert_everywhere(watched):
    scraped = watched.scraped
    firing = {s: got.get(("lowwater_alert_firing", (("rule", "late_rate"),))) for s, got in scraped.items()}
    assert firing == {0: 0.0, 1: 1.0}
    out = watched.out
    rows = pq.read_table(out / "alerts" / "batch_id=1").to_pylist()
    assert [(r["rule"], r["state"], r["step"], r["pipeline"]) for r in rows] == [("late_rate", "firing", 1, "t")]
    assert rows[0]["value"] == pytest.approx(1 / 7)  # 1 too late of 7 valid rows over the last 5 steps
    assert not (out / "alerts" / "batch_id=0").exists()  # a step without a transition writes nothing


def test_endpoint_is_closed_when_the_run_ends(watched):
    ports = watched.ports
    assert len(ports) == 1  # one endpoint for the whole run
    with pytest.raises(urllib.error.URLError):
        _scrape(ports.pop())


def test_a_spark_listener_receives_the_figures_of_the_last_step(watched):
    manifest, progress, metrics = watched.manifest, watched.progress, watched.metrics
    ours = [p for p in progress if p.name == query_name("t") and p.observedMetrics.get(OBSERVATION) is not None]
    assert ours, f"no progress of {query_name('t')} among {sorted({p.name for p in progress}, key=str)}"
    seen = ours[-1].observedMetrics[OBSERVATION]
    last = metrics[manifest.step]
    assert seen["step"] == manifest.step
    assert seen["low_watermark_s"] == last["low_watermark"].timestamp()
    assert seen["too_late"] == last["too_late"] == 1
    assert seen["rows"] == last["rows"]
    assert seen["open_windows"] == last["open_windows"]
    assert seen["late_rate"] == pytest.approx(1 / 3)
    assert seen["holding_partition"] == last["holding_partition"]
    # and the query's own lastProgress JSON carries them too (what the Spark UI and monitoring read)
    assert OBSERVATION in json.loads(ours[-1].json)["observedMetrics"]



def test_the_dashboard_shows_a_new_step_while_the_query_runs(watched):
    browsed = watched.browsed
    assert browsed == {"during": [0], "after": [0, 1]}
