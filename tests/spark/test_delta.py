"""``[output] kind = "delta"`` without its jars, and what the Delta tests share (ADR 0026).

The Delta sink itself -- tables equal to the Parquet outputs, each step once across a crash between its
writes and its manifest and after it, ``reconcile --apply`` twice, ``DESCRIBE HISTORY``, read by Spark and by
delta-rs -- is tested on the S3-compatible server against the same pipeline on local files, in one run
(``tests/spark/test_delta_s3.py``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lowwater.config import ConfigError, load_config
from lowwater.io.delta import delta_session

from .test_cli import CONFIG

KINDS = ("results", "late", "dead_letter", "metrics")
WALL_CLOCK = ("duration_s", "watermark_lag_s")  # a replayed step measures its own; Delta keeps the first's


def rows(df: pd.DataFrame) -> list[tuple]:
    df = df.drop(columns=[c for c in WALL_CLOCK if c in df.columns])
    return sorted(map(tuple, df[sorted(df.columns)].astype(str).itertuples(index=False)))


def test_kind_delta_without_its_jars_is_one_line(tmp_path, monkeypatch):
    text = CONFIG.format(fmt="jsonl").replace('[output]\npath = "out"\n', '[output]\npath = "out"\nkind = "delta"\n')
    (tmp_path / "pipeline.toml").write_text(text)
    cfg = load_config(tmp_path / "pipeline.toml")
    assert cfg.output.kind == "delta"
    monkeypatch.setenv("LOWWATER_DELTA_JARS", str(tmp_path))
    with pytest.raises(ConfigError, match=r'output.kind: "delta" needs Delta Lake\'s jars.*spark.jars.packages'):
        delta_session(cfg)
    monkeypatch.delenv("LOWWATER_DELTA_JARS")
    jars, conf = delta_session(cfg)
    assert any("delta-spark" in Path(j).name for j in jars)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
