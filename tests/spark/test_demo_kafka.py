"""``lowwater demo --kafka``: a local broker, the payments stream produced while the engine reads it (issue 17)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from .helpers import run_cli_here

pytestmark = pytest.mark.spark


def test_demo_on_kafka_reads_the_stream_continuously_with_per_partition_watermarks(spark, tmp_path, caplog):  # noqa: ARG001
    caplog.set_level("INFO", logger="lowwater")
    args = ["demo", "--kafka", "--dir", "demo", "--duration", "300", "--rate", "4", "--speed", "100",
            "--seconds", "300", "--no-dashboard", "--master", "local[2]"]
    proc = run_cli_here(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "lowwater demo --kafka: broker at 127.0.0.1:" in proc.stdout
    out = tmp_path / "demo" / "out"
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    metrics = pd.read_parquet(out / "metrics")
    produced = int(proc.stdout.split("produced ")[1].split(" records")[0].replace(",", ""))
    assert produced > 1000 and metrics["rows"].sum() == produced  # everything produced was read, once
    last = metrics.sort_values("spark_batch").iloc[-1]
    assert sorted(dict(last["partition_watermarks"]), key=int) == [str(p) for p in range(8)]
    assert set(metrics["holding_partition"].dropna()) <= {str(p) for p in range(8)}
    lines = [r.getMessage() for r in caplog.records if " partitions 0=" in r.getMessage()]
    assert lines and "held back by" in lines[-1] and " 7=" in lines[-1]
    assert summary is None or summary["balanced"]
