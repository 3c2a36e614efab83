"""``whatif`` over ``[[source]]`` pipelines against ``run --once --drain``: each source with its own generator.

Differential (issue 13): a replayed lane that reproduces the configured
strategies gives the engine's on-time, late-update, too-late and dead-letter
counts, completeness and too-late rows per source/partition, for several
bounded sources, a punctuated source and an adaptive one. Which lane
reproduces the configuration (``advisor/lanes.py``): ``--compare config``
always; a grid point ``L`` when it sets every source's strategy back to the
configured one (all bounds equal to ``L``; a punctuated source at any ``L``;
an adaptive source at ``L = min_lateness``).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from lowwater.advisor.compare import compared_strategies
from lowwater.advisor.whatif import SweepSpec, run_whatif, source_strategies
from lowwater.core.accounting import Accounting
from lowwater.testing.scenario_files import Observed, Scenario
from lowwater.testing.scenario_spark import run_spark
from lowwater.testing.transcripts import load

from .helpers import run_cli_here

pytestmark = pytest.mark.spark
S = 1_000_000
SCENARIOS = Path(__file__).parent.parent / "scenarios"
COUNTS = ("rows", "on_time", "late_updates", "too_late", "dead_letter")


def replay(spark, s: Scenario, work: Path, bounds_us: list[int], compare: tuple[str, ...] = ("config",)):
    """The what-if of the files ``run_spark`` landed under ``work``: {L or label: row}."""
    cfg = s.pipeline(base_dir=work)
    compared = compared_strategies(list(compare), source_strategies(cfg), True)
    spec = SweepSpec(bounds_us, [cfg.window.allowed_lateness_us], chunk_rows=7, compare=compared)
    return {r.get("strategy") or r["lateness"]: r for r in run_whatif(spark, cfg, spec)}


def assert_same(row: dict, engine: Observed, several: bool) -> None:
    for k in COUNTS:
        assert row[k] == engine.counts[k], k
    acc = Accounting(**{k: engine.counts[k] for k in COUNTS})
    assert row["completeness"] == pytest.approx(acc.completeness())
    late = Counter(f"{src}/{part}" if several else part for src, part, _ in engine.too_late)
    assert row["too_late_by_partition"] == dict(late)


def test_three_sources_config_lane_equals_the_engine_and_the_grid_sets_every_bound(spark, tmp_path):
    s = load(SCENARIOS / "three_sources_slowest_governs.yaml")
    cuts = {"radar": [5], "optical": [1], "link": [2, 4]}  # sources cut independently: rows wait at the frontier
    engine = run_spark(spark, s, cuts, workdir=tmp_path / "configured")
    assert engine.counts["too_late"] == 1  # optical's row 67 s late
    rows = replay(spark, s, tmp_path / "configured", [100_000, 30 * S])
    assert_same(rows["config"], engine, several=True)
    assert rows["config"]["too_late_by_partition"] == {"optical/0": 1}
    # A grid point sets every source's bound (the shift trick: all bounded): L = 30 s everywhere is the
    # engine with every bound at 30 s, on the same files.
    uniform = copy.deepcopy(s.config)
    for src in uniform["source"]:
        src["watermark"] = {"strategy": "bounded", "max_out_of_orderness": "30s"}
    engine_30 = run_spark(spark, replace(s, config=uniform), s.cuts[0], workdir=tmp_path / "uniform")
    assert_same(rows[30.0], engine_30, several=True)
    # ... and L = 100 ms everywhere loses rows the configured 30 s optical bound keeps.
    assert rows[0.1]["too_late"] > rows["config"]["too_late"]


def test_punctuated_source_any_grid_point_equals_the_engine(spark, tmp_path):
    s = load(SCENARIOS / "punctuated_cdc.yaml")
    engine = run_spark(spark, s, s.cuts[1], workdir=tmp_path)
    assert (engine.counts["rows"], engine.counts["too_late"], engine.counts["markers"]) == (36, 0, 12)
    rows = replay(spark, s, tmp_path, [0, 5 * S])
    for lane in (0.0, 5.0, "config"):  # markers carry no bound: every L is the configured strategy
        assert_same(rows[lane], engine, several=False)


def test_adaptive_source_grid_point_at_its_floor_equals_the_engine(spark, tmp_path):
    s = load(SCENARIOS / "adaptive_burst.yaml")
    engine = run_spark(spark, s, s.cuts[2], workdir=tmp_path)
    assert engine.counts["too_late"] == 1
    rows = replay(spark, s, tmp_path, [2 * S, 20 * S])  # min_lateness = 2s: the grid's L is the floor
    assert_same(rows[2.0], engine, several=False)
    assert_same(rows["config"], engine, several=False)
    assert rows["config"]["lateness_range"][0] == 2.0 and rows["config"]["lateness_range"][1] > 2.0  # it widened


# -- the command line ----------------------------------------------------------------


def _toml_value(v) -> str:  # noqa: ANN001
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def write_pipeline(s: Scenario, root: Path) -> Path:
    """The scenario's files in one file per source and its configuration as TOML (``[[source]]`` tables)."""
    for name, rows in s.input.items():
        (root / "landing" / name).mkdir(parents=True)
        (root / "landing" / name / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = []
    for src in s.config["source"]:
        lines += ["[[source]]", *(f"{k} = {_toml_value(v)}" for k, v in src.items()), ""]
    window = dict(s.config["window"])
    aggs = window.pop("aggregations", {})
    lines += ["[window]", *(f"{k} = {_toml_value(v)}" for k, v in window.items()), "", "[window.aggregations]",
              *(f"{k} = {_toml_value(v)}" for k, v in aggs.items()), "", "[output]", 'path = "out"', ""]
    path = root / "pipeline.toml"
    path.write_text("\n".join(lines))
    return path


def test_cli_whatif_reads_every_source_of_the_config(tmp_path, spark):
    s = load(SCENARIOS / "three_sources_slowest_governs.yaml")
    config = write_pipeline(s, tmp_path)
    cwd = tmp_path / "elsewhere"  # paths resolve against the configuration file, not the working directory
    cwd.mkdir()
    proc = run_cli_here(["whatif", "--config", str(config), "--lateness", "0s,10s,30s", "--json",
                         str(tmp_path / "g.json"), "--compare", "config", "-q"], cwd)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "g.json").read_text())
    assert [r["lateness"] for r in rows] == [0.0, 10.0, 30.0, None]
    table = [m[1] for line in proc.stdout.splitlines() if (m := re.match(r"^\W+(\d+s)\W+\d+s\W", line))]
    assert table == ["0s", "10s", "30s"], proc.stdout
    assert rows[-1]["strategy"] == "config" and rows[-1]["too_late"] == 1 and rows[-1]["rows"] == 27
    assert "config" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{root}/landing/radar"], "error: INPUT {root}/landing/radar: --config has 3 sources (radar, optical, link), "
                                   "each read from its own source.<name>.path; leave out INPUT"),
        (["--event-time", "t"], "error: --event-time: --config has 3 sources (radar, optical, link); set these keys "
                                "in each [[source]] table"),
    ],
    ids=["input", "source flag"],
)
def test_cli_whatif_bad_combinations_are_one_line_and_exit_2(tmp_path, args, message):
    config = write_pipeline(load(SCENARIOS / "three_sources_slowest_governs.yaml"), tmp_path)
    proc = run_cli_here(["whatif", "--config", str(config), *[a.format(root=tmp_path) for a in args], "-q"],
                        tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [message.format(root=tmp_path)]
