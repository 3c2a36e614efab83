"""``[output] kind = "delta"``: Delta tables equal to the Parquet outputs, exactly once across a crash (ADR 0026).

One process with Delta's jars (the shared session has none): a run crashes
between step 2's writes and its manifest (the ``before_commit`` fault point,
where ``LOWWATER_FAULT`` kills a process), ``lowwater run`` replays step 2 and
drains, then the tables are read back with Spark in the same process. The
test reads them again with delta-rs (``deltalake``) and checks the Delta logs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from lowwater.config import ConfigError, load_config
from lowwater.io.delta import CURRENT, delta_session
from lowwater.testing.landing import land_jsonl

from .helpers import fast_jvm
from .test_cli import CONFIG

KINDS = ("results", "late", "dead_letter", "metrics")
WALL_CLOCK = ("duration_s", "watermark_lag_s")  # a replayed step measures its own; Delta keeps the first's

# One process (ADR 0015: the subject is the sink, not the process): a run that crashes between step 2's writes
# and its manifest (the fault raises there, as test_crash.crash_here), the same command again, ``reconcile --apply``
# twice, then every table read back with Spark batch reads into a JSON file.
SCRIPT = """
import json, os, sys
import lowwater.spark.engine as engine_module
from lowwater.cli import app
from lowwater.config import load_config
from lowwater.io.delta import delta_session
from lowwater.spark.engine import Engine
from lowwater.runtime.session import get_spark

cfg = load_config("pipeline.toml")
jars, conf = delta_session(cfg)
spark = get_spark(cfg.spark, jars=jars, conf=conf)

def fault(point, step):
    if (point, step) == ("before_commit", 2):
        raise RuntimeError("crash")

real, engine_module._fault = engine_module._fault, fault
try:
    Engine(cfg, spark).run(drain=True)
except Exception as e:
    assert "crash" in str(e), e
else:
    raise AssertionError("no crash")
engine_module._fault = real
logs = sorted(os.listdir("out/delta/metrics/_delta_log"))
crashed = [json.loads(ln)["txn"]["version"] for f in logs if f.endswith(".json")
           for ln in open(f"out/delta/metrics/_delta_log/{f}") if '"txn"' in ln]
try:
    app(["run", "pipeline.toml", "--drain", "-q"])
except SystemExit as e:
    assert not e.code, e.code
codes = []
for _ in range(2):  # corrections, then nothing more: twice equals once
    try:
        app(["reconcile", "pipeline.toml", "--apply", "-q"])
        codes.append(0)
    except SystemExit as e:
        codes.append(e.code or 0)
out = {"crashed": crashed, "reconcile": codes}
for kind in sys.argv[1:]:
    df = spark.read.format("delta").load(f"out/delta/{kind}")
    out[kind] = {"columns": df.columns, "rows": df.count()}
hist = spark.sql(f"DESCRIBE HISTORY delta.`{os.path.abspath('out/delta/results')}`").select("operation").collect()
out["history"] = [r.operation for r in hist]
with open("spark_read.json", "w") as f:
    json.dump(out, f)
"""


def cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})})
    return subprocess.run([sys.executable, *args], cwd=root, env=full, capture_output=True, timeout=400,
                          start_new_session=True, check=False)


def rows(df: pd.DataFrame) -> list[tuple]:
    df = df.drop(columns=[c for c in WALL_CLOCK if c in df.columns])
    return sorted(map(tuple, df[sorted(df.columns)].astype(str).itertuples(index=False)))


def txn_versions(table: Path) -> list[tuple[str, int]]:
    """Every (appId, version) a commit of ``table`` recorded (Delta's idempotent-write actions)."""
    out = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                out.append((action["txn"]["appId"], int(action["txn"]["version"])))
    return out


@pytest.mark.spark
@pytest.mark.slow
def test_delta_tables_equal_parquet_and_a_replayed_step_adds_nothing(tmp_path):
    land_jsonl(tmp_path / "landing", 3, 300, seed=11, dead_letters=True)
    text = CONFIG.format(fmt="jsonl").replace('[output]\npath = "out"\n', '[output]\npath = "out"\nkind = "delta"\n')
    (tmp_path / "pipeline.toml").write_text(text)

    done = cli(tmp_path, "-c", SCRIPT, *KINDS, CURRENT)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    spark_read = json.loads((tmp_path / "spark_read.json").read_text())

    assert max(spark_read["crashed"]) == 2  # step 2 reached Delta before the crash, not the manifest
    delta = tmp_path / "out" / "delta"
    parquet = {k: pd.read_parquet(tmp_path / "out" / k) for k in KINDS}
    assert len(parquet["late"]) and len(parquet["dead_letter"]) and (parquet["results"]["revision"] > 0).any()
    for kind in KINDS:
        table = DeltaTable(str(delta / kind))
        got = table.to_pandas()
        # The documented schema: the Parquet output's columns (batch_id a column), read alike by Spark and delta-rs.
        assert set(got.columns) == set(parquet[kind].columns), kind
        assert set(spark_read[kind]["columns"]) == set(got.columns) and spark_read[kind]["rows"] == len(got), kind
        want = parquet[kind].assign(batch_id=parquet[kind]["batch_id"].astype("int64"))
        assert rows(got) == rows(want), kind
        # Each step once per table: no (appId, version) twice, versions increasing per app id.
        txns = txn_versions(delta / kind)
        assert max(Counter(txns).values()) == 1, kind
        for app in {a for a, _ in txns}:
            assert [v for a, v in txns if a == app] == sorted({v for a, v in txns if a == app}), kind
        writes = [op for op in (h["operation"] for h in table.history()) if op == "WRITE"]
        assert len(writes) == len(txns) + 1, kind  # + the commit that created the table
    corrections = [(a, v) for a, v in txn_versions(delta / "results") if a.endswith("-correction-results")]
    assert len(corrections) == 1 and (parquet["results"]["kind"] == "correction").any()
    assert spark_read["reconcile"][0] == spark_read["reconcile"][1] == 0
    steps = sorted(parquet["metrics"]["batch_id"].astype(int))
    assert [v for _, v in txn_versions(delta / "metrics")] == steps
    assert spark_read["history"].count("WRITE") == len(txn_versions(delta / "results")) + 1

    # results_current: the last emission per window, as PostgreSQL's _current view orders them.
    res = parquet["results"].query("kind != 'retraction'").assign(
        final=lambda d: d["kind"] != "provisional", batch_id=lambda d: d["batch_id"].astype("int64"))
    last = res.sort_values(["revision", "final", "batch_id"]).groupby(
        ["key", "window_start", "window_end"], dropna=False).tail(1).drop(columns="final")
    current = DeltaTable(str(delta / CURRENT)).to_pandas()
    assert len(last) < len(parquet["results"]) and rows(current) == rows(last)
    assert spark_read[CURRENT]["rows"] == len(current)
    merges = [v for _, v in txn_versions(delta / CURRENT)]
    assert len(merges) == len(set(merges)) and set(merges) >= set(res["batch_id"])


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
