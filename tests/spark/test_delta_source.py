"""``[source] format = "delta"``: an append-only Delta table read in commit order (``io/delta_log.py``).

The table is written with delta-rs (no Spark), one commit per file of ``test_file_order``'s log; read two
commits a micro-batch and across a restart, or all commits in one micro-batch, it gives the results of the same
rows read one file a step from a landing directory: the commit order is the arrival order, whatever the cut.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.spark.test_file_order import FILES, PER_FILE, config, run, the_log

pytestmark = pytest.mark.spark


def commit(table, rows: list[dict]) -> None:  # noqa: ANN001
    from deltalake import write_deltalake

    df = pd.DataFrame(rows).astype({"offset": "int64", "event_time": "float64", "arrival_time": "float64",
                                    "amount": "float64"})
    write_deltalake(str(table), df, mode="append")


def test_a_delta_table_is_read_in_commit_order_whatever_the_cut_and_across_a_restart(spark, tmp_path):
    from lowwater.testing.scenario import run_scenario

    log = the_log()
    rows = [r for f in log for r in f]
    one_by_one = run_scenario(spark, config(None), rows, cuts=[PER_FILE * i for i in range(1, FILES)])
    assert one_by_one.summary["too_late"] > 0 and one_by_one.summary["late_updates"] > 0  # order matters here

    # Two commits a micro-batch (another cut than the reference's), three commits, a stop, then the rest.
    table = tmp_path / "landing"
    cfg = config(2)
    cfg["source"]["format"] = "delta"
    for f in log[:3]:
        commit(table, f)
    first = run(spark, tmp_path, cfg, drain=False)
    assert first.summary["steps"] == 2  # commits 0-1, then 2
    for f in log[3:]:
        commit(table, f)
    got = run(spark, tmp_path, cfg)
    assert got.emissions() == one_by_one.emissions()
    assert got.late_rows() == one_by_one.late_rows()
    for k, v in one_by_one.summary.items():
        if k != "steps":
            assert got.summary[k] == v, k
    assert got.summary["out_of_order_files"] == 0
    assert not got.late.empty
    assert got.late["source_file"].str.match(rf"^{table}@0000000000000000000[0-5]/part-.*\.parquet$").all()

    # The other extreme cut: the six commits there before the run, read in one micro-batch.
    whole = tmp_path / "whole"
    for f in log:
        commit(whole / "landing", f)
    one_batch = {**cfg, "source": {k: v for k, v in cfg["source"].items() if k != "max_files_per_batch"}}
    at_once = run(spark, whole, one_batch)
    assert at_once.summary["steps"] == 2  # all six commits, then the drain
    assert at_once.emissions() == one_by_one.emissions() and at_once.late_rows() == one_by_one.late_rows()
    assert {k: v for k, v in at_once.summary.items() if k != "steps"} == {
        k: v for k, v in one_by_one.summary.items() if k != "steps"}
