"""The what-if replay against the engine: one semantic core, the same numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from lowwater.advisor.whatif import SweepSpec, advise, run_whatif
from lowwater.config import load_config, parse_config
from lowwater.demo.generator import PaymentsSpec, write_demo
from lowwater.spark.engine import Engine
from lowwater.testing.outputs import read_output
from lowwater.testing.scenario import base_config, run_scenario

from .helpers import run_cli_here
from .test_determinism import random_logs
from .test_scenarios import OUT_OF_ORDER, rows_of

pytestmark = pytest.mark.spark
S = 1_000_000


def whatif_of(spark, workdir: Path, cfg_dict: dict, bounds, graces):
    cfg = parse_config(cfg_dict, base_dir=workdir)
    return run_whatif(spark, cfg, SweepSpec([b * S for b in bounds], [g * S for g in graces], chunk_rows=7))


def test_hand_computed_grid(spark, tmp_path):
    run_scenario(spark, base_config(), rows_of(OUT_OF_ORDER), workdir=tmp_path)  # lands the files
    grid = whatif_of(spark, tmp_path, base_config(), [0, 2, 5], [0, 5])
    res = {(r["lateness"], r["allowed_lateness"]): r for r in grid}
    assert [res[(b, 0)]["too_late"] for b in (0, 2, 5)] == [2, 2, 1]
    assert (res[(2, 5)]["late_updates"], res[(2, 5)]["too_late"]) == (1, 1)
    assert res[(2, 0)]["emit_latency_mean"] == 4.0  # see tests/core/test_sweep.py
    text = advise(list(res.values()), 0.8, None)
    assert text.startswith("Smallest L meeting completeness >= 80.0000%: L=0s (G=5s)")  # 5 of 6 rows counted
    assert advise([r for r in res.values() if r["allowed_lateness"] == 0], 0.8, None).startswith(
        "Smallest L meeting completeness >= 80.0000%: L=5s (G=0s)"
    )
    assert "No candidate" in advise(list(res.values()), 0.9999, 0.5)


def test_a_kafka_config_replays_a_snapshot_of_its_topic(spark, tmp_path):
    """``whatif SNAPSHOT --config`` of a ``format = "kafka"`` pipeline: its ``kafka_*`` columns are the roles."""
    from lowwater.advisor.replay_config import replay_config

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "part-0.jsonl").write_text("".join(json.dumps({
        "event_time": r["event_time"], "key": r["key"], "amount": r["amount"], "kafka_topic": "t",
        "kafka_partition": 0, "kafka_offset": i, "kafka_timestamp": float(i)}) + "\n"
        for i, r in enumerate(rows_of(OUT_OF_ORDER))))
    (tmp_path / "pipeline.toml").write_text("""
[source]
format = "kafka"
bootstrap_servers = "broker1:9092"
topic = "t"
schema = "event_time DOUBLE, key STRING, amount DOUBLE"
event_time = "event_time"

[window]
type = "tumbling"
size = "10s"
key = ["key"]
aggregations = { total = "sum(amount)" }

[output]
path = "out"
""")
    cfg = replay_config(str(snapshot), tmp_path / "pipeline.toml", *[None] * 11)
    grid = run_whatif(spark, cfg, SweepSpec([0, 2 * S, 5 * S], [0], chunk_rows=7))
    assert [r["too_late"] for r in sorted(grid, key=lambda r: r["lateness"])] == [2, 2, 1]  # the hand grid's
    # Several topics (ADR 0043): a topic u whose partition 0 runs 1000 s ahead, each record just after one of
    # t's. Its own generator: W is t-0's, so t's verdicts are the hand grid's and u's rows are on time (one
    # generator for both partitions 0 would judge nearly all of t's rows too late against u's progress).
    (snapshot / "part-1.jsonl").write_text("".join(json.dumps({
        "event_time": 1000.0 + i, "key": "u", "amount": 1.0, "kafka_topic": "u", "kafka_partition": 0,
        "kafka_offset": i, "kafka_timestamp": i + 0.5}) + "\n" for i in range(6)))
    (tmp_path / "pipeline.toml").write_text(
        (tmp_path / "pipeline.toml").read_text().replace('topic = "t"', 'topics = ["t", "u"]'))
    cfg = replay_config(str(snapshot), tmp_path / "pipeline.toml", *[None] * 11)
    assert cfg.source.topic_column == "kafka_topic"
    grid = run_whatif(spark, cfg, SweepSpec([0, 2 * S, 5 * S], [0], chunk_rows=7))
    assert [(r["rows"], r["too_late"]) for r in sorted(grid, key=lambda r: r["lateness"])] == [(12, 2), (12, 2),
                                                                                                (12, 1)]


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=random_logs())
def test_whatif_equals_run_once_drain(spark, tmp_path_factory, case):
    cfg, rows, cuts = case
    work = tmp_path_factory.mktemp("diff")
    engine = run_scenario(spark, cfg, rows, cuts=cuts, workdir=work)
    bound = cfg["watermark"]["max_out_of_orderness"]
    grace = cfg["window"]["allowed_lateness"]
    # run_scenario reads one file per micro-batch: max_files_per_batch = 1 cuts the replay the same way.
    cfg = {**cfg, "source": {**cfg["source"], "max_files_per_batch": 1}}
    results = whatif_of(spark, work, cfg, [int(bound[:-1])], [int(grace[:-1])])
    assert len(results) == 1
    r, s = results[0], engine.summary
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter"):
        assert r[k] == s[k], k
    assert r["windows_fired"] + r["windows_drain_only"] == s["windows_fired"]
    assert r["peak_open_windows"] == int(engine.metrics["open_windows"].max())
    # The same too-late rows, by partition (the side output has one row per too-late (row, window)).
    late = engine.late
    by_part = {} if late.empty else late.drop_duplicates(["partition", "offset"]).groupby("partition").size().to_dict()
    assert r["too_late_by_partition"] == {str(k): int(v) for k, v in by_part.items()}


def test_peak_open_windows_equals_the_engine_on_the_demo_log(spark, tmp_path):
    """`whatif` reports the engine's own peak: open (key, window) entries at micro-batch ends (3 files each)."""
    spec = PaymentsSpec(rate_per_s=10, duration_s=240, quiet_from_s=100, quiet_for_s=60, file_span_s=30)
    cfg = load_config(write_demo(tmp_path, spec))
    assert cfg.source.max_files_per_batch == 3
    Engine(cfg, spark).run(once=True, drain=True)
    per_step = read_output(spark, f"{cfg.output.path}/metrics")["open_windows"]
    bound, grace = cfg.watermark.max_out_of_orderness_us, cfg.window.allowed_lateness_us
    whatif = run_whatif(spark, cfg, SweepSpec([bound], [grace], chunk_rows=1_000))  # chunks cut across batches
    assert len(per_step) >= 5 and whatif[0]["peak_open_windows"] == int(per_step.max())
    # Two windows' entries at once at some batch ends, one at others: the figure depends on the cut.
    assert per_step.max() > per_step[per_step > 0].min()


def test_cli_whatif_and_delays_on_single_files(tmp_path, spark):
    """INPUT is one file, its format from the extension; this short log fires no window, and the advice says so."""
    rows = rows_of("""
    p  t   a
    0  1   1
    1  2   3
    0  12  12
    1  5   30
    """)  # W ends at min(12, 5) = 5: no 10s window closes before the end of the log
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    # In this process, on the tests' session: the CLI's own start-up is tested in test_cli.py.
    cmd = ["whatif", str(log), "--event-time", "event_time",
           "--arrival-time", "arrival_time", "--partition", "partition", "--lateness", "0s,5s",
           "--target-completeness", "0.5", "--latency-budget", "100s",
           "--json", str(tmp_path / "w.json"), "--plot", str(tmp_path / "w.png"), "-q", "--master", "local[1]"]
    proc = run_cli_here(cmd, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / "w.json").read_text())
    # [0, 10) and [10, 20) of key "a" fire only on a drain.
    assert [(r["lateness"], r["dead_letter"], r["rows"], r["windows_fired"], r["windows_drain_only"]) for r in got] == [
        (0.0, 1, 5, 0, 2), (5.0, 1, 5, 0, 2)]
    assert "No window fired before the end of the log for any L (2 would fire only on a drain)" in proc.stdout
    assert "Smallest L" not in proc.stdout and "None" not in proc.stdout
    assert "…" not in proc.stdout  # piped: the table at full width, no column cut
    assert (tmp_path / "w.png").stat().st_size > 5_000  # a figure that says why there is nothing to draw
    bad = run_cli_here(cmd[:2] + ["--event-time", "nope", "-q"], tmp_path)
    assert bad.returncode == 2 and "'nope'" in bad.stderr and "Traceback" not in bad.stderr
    csv_log = tmp_path / "events.csv"
    with csv_log.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    prof = run_cli_here(["delays", str(csv_log), "--event-time", "event_time", "--arrival-time", "arrival_time",
                         "--partition", "partition", "-q", "--master", "local[1]"], tmp_path)
    assert prof.returncode == 0, prof.stderr[-2000:]
    assert "p99.9" in prof.stdout and "25s" in prof.stdout  # partition 1's 30 - 5, read as CSV
    # The advised L is the out-of-orderness (event time behind the newest seen before on the partition), not the
    # arrival delay: on p0, t=10 arrives at 105 after t=100 arrived at 100 (90 s behind, 95 s delayed).
    behind = tmp_path / "behind.jsonl"
    behind.write_text("".join(json.dumps({"partition": 0, "event_time": t, "arrival_time": a}) + "\n"
                              for t, a in ((100, 100), (10, 105), (101, 110))))
    prof = run_cli_here(["delays", str(behind), "--event-time", "event_time", "--arrival-time", "arrival_time",
                         "--partition", "partition", "-q", "--master", "local[1]"], tmp_path)
    assert prof.returncode == 0, prof.stderr[-2000:]
    assert "L for 99.9% of rows on their own partition: ~1m 30s (out-of-orderness" in prof.stdout, prof.stdout
    assert "arrival delay p99.9 is ~1m 35s, not what L covers" in prof.stdout, prof.stdout


DELAYED = """
p  t   a   key
0  1   1   a
0  4   4   a
0  2   5   a
0  13  13  a
0  9   14  a
0  25  25  b
0  21  26  b
0  31  31  b
0  3   32  a
"""


def test_compare_replays_each_strategy_exactly(spark, tmp_path):
    """--compare on Spark: a bounded strategy equals its grid row; an adaptive one equals the pure replay."""
    from lowwater.advisor.compare import compared_strategies
    from lowwater.advisor.replay import Log, replay
    from lowwater.advisor.sweep import FIELDS
    from lowwater.advisor.whatif import source_strategies

    cfg_dict = base_config(source={"arrival_time": "arrival_time"})
    rows = rows_of(DELAYED)
    run_scenario(spark, cfg_dict, rows, workdir=tmp_path)  # lands the files
    cfg = parse_config(cfg_dict, base_dir=tmp_path)
    compare = compared_strategies(["bounded 2s", "adaptive q=1 rows=3 max=10s"], source_strategies(cfg), True)
    results = run_whatif(spark, cfg, SweepSpec([0, 2 * S], [0], chunk_rows=4, compare=compare))
    grid = {r["lateness"]: r for r in results if "strategy" not in r}
    got = {r["strategy"]: r for r in results if "strategy" in r}
    assert list(got) == ["bounded 2s", "adaptive q=1 rows=3 max=10s"]
    same = [k for k in FIELDS if k != "lateness"]
    assert {k: got["bounded 2s"][k] for k in same} == {k: grid[2.0][k] for k in same}
    log = Log(np.array([r["partition"] for r in rows]), np.array([r["event_time"] for r in rows]) * S,
              np.array([hash(r["key"]) for r in rows]), np.array([r["arrival_time"] for r in rows]) * S)
    pure = replay({"a": compare["adaptive q=1 rows=3 max=10s"]}, cfg.window.assigner(), 0, log)["a"]
    adaptive = got["adaptive q=1 rows=3 max=10s"]
    for k in ("on_time", "late_updates", "too_late", "windows_fired", "windows_drain_only", "emit_latency_mean",
              "lateness_range"):
        assert adaptive[k] == pure[k], k
    assert adaptive["lateness_range"][1] > adaptive["lateness_range"][0] == 0  # L widened on the delays


def test_cli_bad_compare_is_one_line_and_exit_2(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text(json.dumps({"partition": "0", "event_time": 1.0, "arrival_time": 1.0}) + "\n")
    base = ["whatif", str(log), "--event-time", "event_time", "-q"]  # refused before Spark starts
    for value, expected in (
        ("adaptive q=2 rows=3", "error: --compare 'adaptive q=2 rows=3': compare.target_quantile: expected a number"),
        ("adaptive rows=3", "error: --compare 'adaptive rows=3': adaptive watermarks need an arrival clock"),
        ("bounded 3s nope", "error: --compare 'bounded 3s nope': 'nope': expected KEY=VALUE"),
        ("{strategy = ", "error: --compare '{strategy = ': not a TOML inline table"),
    ):
        proc = run_cli_here([*base, "--compare", value], tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(expected), proc.stderr
