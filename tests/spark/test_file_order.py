"""Files are read in name order whatever their modification times (README: source).

Copied in one go (cp, rsync, an object-store sync), files share one
modification time; Spark's file source orders by it, so ties were read in
arbitrary order and the same files gave different answers. A file that lands
with a name before one already read is read anyway, counted and warned about.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import pytest

from lowwater.config import parse_config
from lowwater.spark.engine import Engine
from lowwater.testing.outputs import read_output
from lowwater.testing.scenario import Outcome, base_config, run_scenario

pytestmark = pytest.mark.spark

FILES = 6
PER_FILE = 5
T0 = 1_700_000_000


def the_log() -> list[list[dict]]:
    """Six files of a two-partition log in arrival order; some rows are delayed past L, a few past L + G."""
    rng = random.Random(12)
    files, offset = [], 0
    for i in range(FILES):
        rows = []
        for j in range(PER_FILE):
            arrival = 10.0 * i + 2 * j
            delay = rng.choice([0, 0, 1, 2, 9, 15])
            rows.append({
                "partition": str(j % 2), "offset": offset, "event_time": arrival - delay, "arrival_time": arrival,
                "key": rng.choice("ab"), "amount": float(rng.randint(1, 9)),
            })
            offset += 1
        files.append(rows)
    return files


def config(max_files: int | None) -> dict:
    cfg = base_config(
        source={"arrival_time": "arrival_time", "offset": "offset"},
        watermark={"max_out_of_orderness": "2s"},
        window={"allowed_lateness": "3s"},
    )
    if max_files is not None:
        cfg["source"]["max_files_per_batch"] = max_files
    return cfg


def land(landing: Path, name: str, rows: list[dict], mtime: int) -> None:
    f = landing / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(f, (mtime, mtime))


def run(spark, root: Path, cfg: dict, drain: bool = True) -> Outcome:  # noqa: ANN001
    engine = Engine(parse_config(cfg, base_dir=root), spark)
    summary = engine.summary(engine.run(once=True, drain=drain))

    def read(kind: str):  # noqa: ANN202
        import pandas as pd

        path = root / "out" / kind
        return read_output(spark, path) if path.exists() else pd.DataFrame()

    return Outcome(read("results"), read("late"), read("dead_letter"), read("metrics"), summary)


def test_name_order_whatever_the_modification_times(spark, tmp_path):
    log = the_log()
    rows = [r for f in log for r in f]
    # One file a step, in name order: what a run sees when the files land one by one.
    one_by_one = run_scenario(spark, config(None), rows, cuts=[PER_FILE * i for i in range(1, FILES)])
    assert one_by_one.summary["too_late"] > 0 and one_by_one.summary["late_updates"] > 0  # order matters here
    mtimes = {
        "equal": lambda i: T0,
        "reversed": lambda i: T0 + FILES - i,
        "increasing": lambda i: T0 + i,
    }
    # Each way of landing and each batch size once (every run costs seconds).
    for times, max_files in [("equal", 1), ("reversed", 2), ("increasing", None)]:
        root = tmp_path / f"{times}-{max_files}"
        (root / "landing").mkdir(parents=True)
        for i, f in enumerate(log):
            land(root / "landing", f"part-{i:03d}.jsonl", f, mtimes[times](i))
        got = run(spark, root, config(max_files))
        case = f"{times} modification times, max_files_per_batch={max_files}"
        assert got.emissions() == one_by_one.emissions(), case
        assert got.late_rows() == one_by_one.late_rows(), case
        for k, v in one_by_one.summary.items():
            if k != "steps":  # how many micro-batches the files made
                assert got.summary[k] == v, (case, k)
        assert got.summary["steps"] == -(-FILES // (max_files or FILES)) + 1, case  # batches + the drain
        assert got.summary["out_of_order_files"] == got.summary["arrival_regressions"] == 0, case


def test_a_file_landing_before_one_already_read_is_counted_and_named(spark, tmp_path, caplog):
    log = the_log()[:4]
    landing = tmp_path / "landing"
    landing.mkdir()
    cfg = config(1)
    land(landing, "part-000.jsonl", log[0], T0)
    land(landing, "part-002.jsonl", log[2], T0)
    first = run(spark, tmp_path, cfg, drain=False)
    assert first.summary["steps"] == 2 and first.summary["out_of_order_files"] == 0
    # part-001 lands after part-002 was read (it arrived earlier): read now, counted, named.
    land(landing, "part-003.jsonl", log[3], T0)
    land(landing, "part-001.jsonl", log[1] + [{"partition": "0"}], T0)  # and a dead letter: its rows count too
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        second = run(spark, tmp_path, cfg)
    s = second.summary
    assert (s["out_of_order_files"], s["out_of_order_rows"]) == (1, len(log[1]) + 1)
    assert s["arrival_regressions"] == 1  # part-001's arrivals precede part-002's; part-003's do not
    assert s["rows"] == sum(map(len, log)) + 1 and s["balanced"]
    m = second.metrics.sort_values("batch_id")
    assert list(m["out_of_order_files"]) == [0, 0, 1, 0, 0]  # steps: part-000, part-002, part-001, part-003, drain
    assert list(m["out_of_order_rows"]) == [0, 0, len(log[1]) + 1, 0, 0]
    assert list(m["arrival_regressions"]) == [0, 0, 1, 0, 0]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("part-001.jsonl" in w and "out of name order" in w for w in warned), warned
    assert any("earliest arrival" in w for w in warned), warned
    assert not any("part-003" in w for w in warned), warned
