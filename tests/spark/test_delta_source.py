"""``[source] format = "delta"``: an append-only Delta table read in commit order (``io/delta_log.py``).

The table is written with delta-rs (no Spark), one commit per file of ``test_file_order``'s log; read in one
micro-batch, a commit a micro-batch, or across a restart, it gives the results of the same rows read one file a
step from a landing directory: the commit order is the arrival order, whatever the cut.
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

    for max_files in (None, 1):
        root = tmp_path / f"max-{max_files}"
        table = root / "landing"
        cfg = config(max_files)
        cfg["source"]["format"] = "delta"
        head = 2 if max_files else FILES  # a commit a step: two commits, a stop, then the rest (a restart)
        for f in log[:head]:
            commit(table, f)
        if head < FILES:
            first = run(spark, root, cfg, drain=False)
            assert first.summary["steps"] == head
            for f in log[head:]:
                commit(table, f)
        got = run(spark, root, cfg)
        case = f"max_files_per_batch={max_files}"
        assert got.emissions() == one_by_one.emissions(), case
        assert got.late_rows() == one_by_one.late_rows(), case
        for k, v in one_by_one.summary.items():
            if k != "steps":
                assert got.summary[k] == v, (case, k)
        assert got.summary["out_of_order_files"] == 0
        late = got.late
        assert late.empty or late["source_file"].str.contains(f"{table}@0000000000000000000[0-9]/part-").all()
