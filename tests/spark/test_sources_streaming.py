"""Several ``[[source]]`` directories through the real streaming query (``Engine.run``), cut very differently.

The three-source scenario (tests/scenarios/three_sources_slowest_governs.yaml):
radar and link land as one file each, optical as four files read one per
micro-batch (``max_files_per_batch = 1``), so Spark's first micro-batch
reaches arrival 62 s on radar and 7 s on optical. The arrival frontier holds
radar's and link's rows until optical catches up (or the drain); the
outputs must equal the scenario's expected ones, and a restart between files
must give the same answer (held rows survive in the checkpoint).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import parse_config
from lowwater.spark.engine import Engine
from lowwater.testing.scenario_files import _plain_copy, compare
from lowwater.testing.scenario_spark import _chunks, _observed
from lowwater.testing.transcripts import expected, load

pytestmark = pytest.mark.spark

SCENARIO = load(Path(__file__).parent.parent / "scenarios" / "three_sources_slowest_governs.yaml")
CUTS = {"radar": [], "link": [], "optical": [1, 3, 6]}  # optical: four files, the others one each


def _config(root: Path):  # noqa: ANN202
    data = _plain_copy(SCENARIO.config)
    for src in data["source"]:
        if src["name"] == "optical":
            src["max_files_per_batch"] = 1
    return parse_config(data, base_dir=root)


def _land(root: Path, optical_files: slice = slice(None)) -> None:
    """Write each source's files (optical: only ``optical_files`` of its four)."""
    for name, rows in SCENARIO.input.items():
        landing = root / "landing" / name
        landing.mkdir(parents=True, exist_ok=True)
        chunks = list(enumerate(_chunks(rows, CUTS[name])))
        for i, chunk in chunks[optical_files] if name == "optical" else chunks:
            (landing / f"part-{i:05d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunk))


def _outcome(spark, root: Path, cfg) -> tuple[dict, pd.DataFrame]:  # noqa: ANN001
    summary = json.loads((root / "out" / "summary.json").read_text())
    problems = compare(_observed(spark, SCENARIO, cfg, root / "out", summary), expected(SCENARIO))
    assert not problems, "\n".join(problems)
    return summary, pd.read_parquet(root / "out" / "metrics").sort_values("spark_batch")


def test_streaming_query_with_sources_cut_very_differently(spark, tmp_path):
    _land(tmp_path)
    cfg = _config(tmp_path)
    Engine(cfg, spark).run(once=True, drain=True)
    summary, metrics = _outcome(spark, tmp_path, cfg)
    assert summary["held_rows"] == 0 and summary["drained"] and summary["balanced"]
    # One micro-batch per optical file: radar and link arrive whole in the first and wait behind optical.
    steps = metrics[metrics["rows"] + metrics["held_rows"] > 0]
    assert len(steps) >= 4
    assert steps["held_rows"].iloc[0] > 0
    assert list(steps["held_rows"].iloc[:-1]) == sorted(steps["held_rows"].iloc[:-1], reverse=True)
    late = pd.read_parquet(tmp_path / "out" / "late")
    assert late["source"].tolist() == ["optical"]
    # Each source's watermark, each partition named source/partition.
    last = metrics[metrics["source_watermarks"].notna()].iloc[-1]
    assert sorted(dict(last["source_watermarks"])) == ["link", "optical", "radar"]
    assert sorted(dict(last["partition_watermarks"])) == ["link/0", "optical/0", "radar/0"]
    assert sorted(dict(last["partition_lateness_s"]).items()) == [("link/0", 10.0), ("optical/0", 30.0),
                                                                   ("radar/0", 0.1)]


def test_a_silent_source_holds_rows_until_it_delivers_across_a_restart(spark, tmp_path, caplog):
    """--once with optical's first two files: rows held, a warning naming optical; the rest then --drain."""
    _land(tmp_path, slice(0, 2))
    cfg = _config(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        first = Engine(cfg, spark).run(once=True)
    assert first.held_rows > 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["held_rows"] == first.held_rows and not summary["drained"]
    warned = [r.getMessage() for r in caplog.records if "held behind the arrival frontier" in r.getMessage()]
    assert len(warned) == 1 and "source 'optical'" in warned[0], caplog.text
    assert (tmp_path / "out" / "_checkpoint" / "lowwater" / "held").is_dir()

    _land(tmp_path, slice(2, None))
    Engine(cfg, spark).run(once=True, drain=True)
    summary, metrics = _outcome(spark, tmp_path, cfg)  # the same answer as one run
    assert summary["held_rows"] == 0 and summary["drained"]
    assert summary["rows"] == 27
