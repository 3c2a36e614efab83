"""The dashboard in a real browser (headless Chromium): it plots exactly what ``metrics/`` holds (no Spark).

The run's outputs are written here as the engine writes them (one metrics row
a step, ``metrics/batch_id=N``); the Spark end-to-end check is in
``tests/spark/test_observe.py``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lowwater.observe.dashboard import Dashboard, RunReader, write_report
from lowwater.spark.metrics import METRICS_ARROW, metrics_table
from lowwater.testing.browser import plotted, screenshot


def _row(step: int) -> dict:
    ts = lambda s: datetime.fromtimestamp(s, UTC)  # noqa: E731
    row = dict.fromkeys(METRICS_ARROW.names, 0)
    return row | {
        "spark_batch": step, "low_watermark": ts(100 + 10 * step), "spread_s": 3.0, "watermark_lag_s": 5.0 + step,
        "partition_watermarks": [("0", ts(100 + 10 * step)), ("1", ts(103 + 10 * step))],
        "idle_partitions": ["1"] if step == 2 else [], "holding_partition": "0", "rows": 100, "on_time": 90,
        "too_late": step, "dead_letter": 0, "late_updates": 10 - step, "open_windows": 4 + step,
        "state_bytes": 1000 * step, "duration_s": 0.5, "partition_lateness_s": [], "source_watermarks": None,
    }


def _write_step(out, step: int) -> None:
    d = out / "metrics" / f"batch_id={step}"
    d.mkdir(parents=True)
    pq.write_table(metrics_table(_row(step)), d / "part-00000.parquet")


@pytest.fixture
def run_dir(tmp_path):
    out = tmp_path / "out"
    empty = out / "metrics" / "batch_id=-1"  # the schema file every output has: not a step
    empty.mkdir(parents=True)
    pq.write_table(METRICS_ARROW.empty_table(), empty / "part-00000.parquet")
    for step in range(3):
        _write_step(out, step)
    return out


def test_reader_reads_every_step(run_dir):
    m = RunReader(run_dir).metrics()
    assert [r["step"] for r in m] == [0, 1, 2]
    assert m[1]["partition_watermarks"] == {"0": "1970-01-01T00:01:50Z", "1": "1970-01-01T00:01:53Z"}
    assert m[2]["late_rate"] == 0.02 and m[2]["input_rows_per_s"] == 200.0


def test_browser_plots_the_metrics_and_sees_a_new_step(run_dir, tmp_path):
    board = Dashboard(run_dir, port=0)
    try:
        seen = plotted(board.url)
        assert seen["steps"] == [0, 1, 2]
        m = RunReader(run_dir).metrics()
        charts = seen["charts"]
        w = charts["chart-watermark"]
        assert w[0]["y"] == [r["low_watermark"] for r in m] and w[1]["y"] == [5.0, 6.0, 7.0]
        parts = {t["name"]: t["y"] for t in charts["chart-partitions"]}
        assert parts == {p: [r["partition_watermarks"][p] for r in m] for p in ("0", "1")}
        assert charts["chart-late"][0]["y"] == [0, 1, 2]  # too late per step
        assert charts["chart-state"][0]["y"] == [4, 5, 6]  # open windows
        shot = screenshot(board.url, tmp_path / "dashboard.png")
        assert shot.stat().st_size > 10_000  # charts, not a blank page
        _write_step(run_dir, 3)  # the run goes on: the page shows the new step
        assert plotted(board.url)["steps"] == [0, 1, 2, 3]
    finally:
        board.close()


def test_static_report_is_self_contained(run_dir):
    report = write_report(run_dir)
    text = report.read_text()
    assert "/plotly.min.js" not in text and "Plotly" in text and len(text) > 1_000_000  # plotly.js inlined
    seen = plotted(report.as_uri())
    assert seen["steps"] == [0, 1, 2]


def test_cli_writes_the_report_and_refuses_a_path_without_metrics(run_dir, tmp_path):
    from typer.testing import CliRunner

    from lowwater.cli import app

    done = CliRunner().invoke(app, ["dashboard", str(run_dir), "--report"])
    assert done.exit_code == 0 and (run_dir / "report.html").exists()
    bad = CliRunner().invoke(app, ["dashboard", str(tmp_path / "nothing")])
    assert bad.exit_code == 2 and "no metrics/ directory" in bad.output


def test_a_drained_step_is_not_plotted_at_the_largest_timestamp(run_dir):
    drained = _row(3) | {"low_watermark": datetime(2262, 4, 11, tzinfo=UTC), "watermark_lag_s": -9e9}
    d = run_dir / "metrics" / "batch_id=3"
    d.mkdir()
    pq.write_table(metrics_table(drained), d / "part-00000.parquet")
    last = RunReader(run_dir).metrics()[-1]
    assert last["drained"] and last["low_watermark"] is None and last["watermark_lag_s"] is None


def _write_alerts(out, step: int, *events: tuple[str, str]) -> None:
    from lowwater.observe.alerting import ALERTS_ARROW

    d = out / "alerts" / f"batch_id={step}"
    d.mkdir(parents=True)
    rows = [{"step": step, "spark_batch": step, "at": datetime(2026, 1, 1, tzinfo=UTC), "rule": rule, "state": state,
             "message": f"{rule} {state}", "value": 1.0, "threshold": 0.5, "pipeline": "flights"}
            for rule, state in events]
    pq.write_table(pa.Table.from_pylist(rows, ALERTS_ARROW), d / "part-00000.parquet")


def test_page_names_the_pipeline_says_finished_or_live_and_shows_resolved_alerts_as_resolved(run_dir, tmp_path):
    """``[observe] pipeline`` in the title; "(finished)" unless a live run holds the output path's lock; an alert
    that fired and resolved is history, not red; one still firing is."""
    import json
    import os
    import socket

    from lowwater.io.lock import LOCK_NAME, _proc_start
    from lowwater.testing.browser import dump_dom

    _write_alerts(run_dir, 1, ("watermark_lag", "firing"))
    _write_alerts(run_dir, 2, ("watermark_lag", "resolved"), ("late_rate", "firing"))
    board = Dashboard(run_dir, port=0, pipeline="flights")
    try:
        dom = dump_dom(board.url)
        assert '<span id="pipeline">flights</span>' in dom and "<title>lowwater: flights</title>" in dom
        status = re.search(r'<div id="status">(.*?)</div>', dom).group(1)
        assert status.endswith("; ALERT: late_rate (finished)"), status
        table = re.search(r'<table id="alerts">(.*?)</table>', dom, re.S).group(1)
        rows = re.findall(r"<tr( class=\"firing\")?>(.*?)</tr>", table, re.S)
        red = [body for cls, body in rows if cls]
        assert len(red) == 1 and "late_rate" in red[0]
        assert "fired (resolved at step 2)" in table and "watermark_lag" not in "".join(red)
        # A live run (another process, alive) holds the lock: the page says so.
        ppid = os.getppid()
        (run_dir / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": ppid, "since": "2026-01-01",
                                                     "token": "t", "proc_start": _proc_start(ppid)}))
        assert re.search(r'<div id="status">.*\(live\)</div>', dump_dom(board.url))
    finally:
        board.close()
    report = write_report(run_dir)  # the pipeline name from the alerts when the run is not the one serving
    dom = dump_dom(report.as_uri())
    assert '<span id="pipeline">flights</span>' in dom and "(report of a running run)" in dom
