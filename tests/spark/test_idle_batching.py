"""Idleness that batching cannot fool (issue 31): any ``max_files_per_batch`` on any source, one answer.

The shape of flights joined with the weather (nycflights13 as a stream): a
fast source, ``flights``, one file per hour of landings and none in the quiet
hours of the night, so a step of ``n`` files reaches further on the arrival
clock than ``n`` files of ``weather``, which delivers every hour and has
``idle_timeout = "90m"``. Weather's files are all landed and waiting: it is
not silent, so it never goes idle while it has unread files, and the flights
it may still precede wait for it (held), whatever the cut (before issue 31
it went idle as soon as flights had read 90 minutes past it, and the cut runs
judged weather rows too late). Every cut gives
the one-batch run's pairs, unmatched flights and late rows, which are the
core's row-by-row answer (``testing/join_scenarios.run_join_log``); a
tumbling-window pipeline over the same two sources gives one answer too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import parse_config
from lowwater.spark.engine import Engine
from lowwater.testing.join_scenarios import _observed, run_join_log

pytestmark = pytest.mark.spark

H = 3600
DAYS = 2
DAY_H = 5  # a short "day": flights land in hours 3 and 4 only, the weather comes every hour
ORIGINS = ("EWR", "JFK", "LGA")
SCHEMAS = {
    "flights": "origin STRING, dep DOUBLE, landed DOUBLE, flight STRING, one DOUBLE",
    "weather": "origin STRING, hour DOUBLE, published DOUBLE, temp DOUBLE, one DOUBLE",
}


def the_logs() -> dict[str, list[list[dict]]]:
    """Per source, its files in name (= arrival) order, each a list of rows in arrival order."""
    flights, weather = [], []
    for day in range(DAYS):
        for h in range(DAY_H):
            at = (day * DAY_H + h) * H
            weather.append([{"origin": o, "hour": float(at), "published": float(at + 600), "temp": float(h + i),
                             "one": 1.0} for i, o in enumerate(ORIGINS)])
            if h < 3:
                continue  # the night: no landings, no file
            rows = []
            for k in range(6):
                landed = at + 300 + k * 500
                duration = (1 + (k + h + day) % 3) * H + 17 * 60 * k  # 1 to 4.5 h in the air
                rows.append({"origin": ORIGINS[k % 3], "dep": float(landed - duration), "landed": float(landed),
                             "flight": f"{day}-{h}-{k}", "one": 1.0})
            flights.append(rows)
    return {"flights": flights, "weather": weather}


def land(root: Path, logs: dict[str, list[list[dict]]]) -> None:
    for name, files in logs.items():
        folder = root / name
        folder.mkdir(parents=True)
        for i, rows in enumerate(files):
            (folder / f"{i:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def config(landing: Path, root: Path, max_files: dict[str, int], shape: dict):  # noqa: ANN201
    cols = {"flights": ("dep", "landed", {"strategy": "bounded", "max_out_of_orderness": "3h"}),
            "weather": ("hour", "published", {"strategy": "bounded", "max_out_of_orderness": "20m",
                                              "idle_timeout": "90m"})}
    sources = []
    for name, (event, arrival, wm) in cols.items():
        src = {"name": name, "format": "jsonl", "path": str(landing / name), "partition": "origin",
               "event_time": event, "arrival_time": arrival, "schema": SCHEMAS[name], "watermark": wm}
        if name in max_files:
            src["max_files_per_batch"] = max_files[name]
        sources.append(src)
    return parse_config({"source": sources, **shape, "late": {"policy": "side_output"},
                         "output": {"path": str(root / "out")}}, base_dir=root)


JOIN = {"join": {"left": "flights", "right": "weather", "on": ["origin"], "lower": "-1h", "upper": "0s",
                 "type": "left_outer", "columns": {"left": ["flight"], "right": ["temp"]}}}
WINDOW = {"window": {"type": "tumbling", "size": "1h", "key": ["origin"], "aggregations": {"n": "sum(one)"}}}


def _run(spark, landing: Path, root: Path, max_files: dict[str, int], shape: dict):  # noqa: ANN001, ANN202
    """``--once --drain`` through the streaming query; the config, summary.json's content and metrics/."""
    cfg = config(landing, root, max_files, shape)
    engine = Engine(cfg, spark)
    summary = engine.summary(engine.run(once=True, drain=True))
    return cfg, summary, pd.read_parquet(root / "out" / "metrics")


def test_any_files_per_batch_on_either_source_gives_the_row_by_row_join(spark, tmp_path):
    logs, landing = the_logs(), tmp_path / "landing"
    land(landing, logs)
    rows = {name: [r for f in files for r in f] for name, files in logs.items()}
    want = run_join_log(config(landing, tmp_path / "core", {}, JOIN), rows)  # the core, row by row
    # Weather every hour from 0: only a flight that left before it has no partner; nothing is late.
    assert want.counts["left"]["unmatched"] == sum(r["dep"] < 0 for r in rows["flights"]) > 0
    assert want.too_late == [] and want.counts["left"]["matched"] > 0
    for i, max_files in enumerate([{}, {"flights": 2, "weather": 1}]):
        cfg, summary, metrics = _run(spark, landing, tmp_path / f"join{i}", max_files, JOIN)
        got = _observed(spark, cfg, tmp_path / f"join{i}" / "out", summary)
        assert (got.joined, got.too_late, got.counts) == (want.joined, want.too_late, want.counts), max_files
        # No file landed out of its source's arrival order: no step says so, whichever source reads ahead.
        assert metrics["arrival_regressions"].sum() == 0, max_files
        if max_files:
            assert len(metrics) > 4 and metrics["held_rows"].max() > 0  # flights waited for the weather


def test_a_window_over_two_sources_does_not_depend_on_their_files_per_batch(spark, tmp_path):
    logs, landing = the_logs(), tmp_path / "landing"
    land(landing, logs)
    answers = []
    for i, max_files in enumerate([{}, {"flights": 4, "weather": 2}]):  # flights to 9:47 at once
        root = tmp_path / f"window{i}"
        _cfg, summary, metrics = _run(spark, landing, root, max_files, WINDOW)
        results = pd.read_parquet(root / "out" / "results")
        late = pd.read_parquet(root / "out" / "late") if (root / "out" / "late").exists() else pd.DataFrame()
        answers.append((sorted(map(tuple, results[["origin", "window_start", "n", "kind", "revision"]].astype(str)
                                   .itertuples(index=False))), len(late),
                        {k: summary[k] for k in ("rows", "on_time", "late_updates", "too_late")},
                        int(metrics["arrival_regressions"].sum())))
    assert answers[0][0] and answers[0][2]["rows"] == sum(len(f) for files in logs.values() for f in files)
    assert answers[1] == answers[0]
    assert answers[1][3] == 0  # no step says its files landed out of arrival order
