"""Crash and restart: kill -9 at several points, rerun the same command; the
outputs -- Parquet and PostgreSQL -- equal those of an uninterrupted run (SEMANTICS.md §8)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest
from psycopg import sql

from .test_cli import CONFIG

pytestmark = pytest.mark.spark


ROWS_PER_FILE = 400  # 12 files: 4.8k rows for the CI budget (30k rows also pass: docs/design.md)

PG_OUTPUT = """kind = "postgres"

[output.postgres]
results_table = "crash_results"
late_table = "crash_late"
dead_letter_table = "crash_dead_letter"
metrics_table = "crash_metrics"
"""


def land_many(root: Path, files: int = 12, rows_per_file: int = 400, seed: int = 3, pg: bool = False) -> None:
    rng = np.random.default_rng(seed)
    landing = root / "landing"
    landing.mkdir(parents=True)
    offsets = [0, 0]
    t = 0
    for i in range(files):
        rows = []
        for _ in range(rows_per_file):
            t += int(rng.integers(5, 40))
            p = int(rng.integers(0, 2))
            delay = int(rng.exponential(800)) if rng.random() > 0.05 else int(rng.integers(5_000, 30_000))
            rows.append({"partition": p, "offset": offsets[p], "event_time": t - delay, "arrival_time": t,
                         "key": f"k{int(rng.integers(0, 5))}", "amount": float(rng.integers(1, 100))})
            offsets[p] += 1
        f = landing / f"part-{i:03d}.jsonl"
        bad = ['{"partition": 0, "offset": -1, "key": "k0"' + "\n",  # malformed JSON
               json.dumps({"partition": 1, "offset": -1, "event_time": None, "arrival_time": t, "key": "k1",
                           "amount": 1.0}) + "\n"] if pg else []  # no event time
        f.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(bad))
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    text = CONFIG.format(fmt="jsonl")
    if pg:  # the URL comes from LOWWATER_PG_URL
        text = text.replace('[output]\npath = "out"\n', '[output]\npath = "out"\n' + PG_OUTPUT)
    (root / "pipeline.toml").write_text(text)


def run(root: Path, env: dict | None = None, kill_after: float | None = None) -> int:
    cmd = [sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"]
    full_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    if kill_after is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 137), err.decode()[-2000:]
        return proc.returncode
    # Kill -9 the whole process group (driver JVM and Python) once this run committed a step.
    state = root / "out" / "_checkpoint" / "lowwater" / "state"

    def newest() -> int:
        return max((int(p.name[9:21]) for p in state.glob("manifest-*.json")), default=-1)

    start = newest()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and newest() <= start:
        time.sleep(0.1)
    time.sleep(kill_after)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return -9


def outputs(root: Path, url: str) -> dict[str, list]:
    out = {}
    drop = ("duration_s", "watermark_lag_s", "source_file")
    for name in ("crash_results", "crash_late", "crash_metrics", "crash_dead_letter"):
        out[name] = pg_table(url, name, str(root / "out"), drop)
    with psycopg.connect(url) as conn:
        out["staging_left"] = conn.execute("SELECT count(*) FROM crash_results_staging").fetchone()[0]
    for kind in ("results", "late", "metrics"):
        df = pd.read_parquet(root / "out" / kind)
        drop = [c for c in ("duration_s", "watermark_lag_s", "source_file") if c in df.columns]
        df = df.drop(columns=drop).astype(str)
        out[kind] = sorted(map(tuple, df.itertuples(index=False)))
    out["summary"] = json.loads((root / "out" / "summary.json").read_text())
    return out


def pg_table(url: str, name: str, pipeline: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    """One pipeline's rows of a sink table, as sorted string tuples."""
    with psycopg.connect(url) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {} WHERE lw_pipeline = %s").format(sql.Identifier(name)),
                           (pipeline,))
        df = pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])
    df = df.drop(columns=["lw_pipeline", *[c for c in drop if c in df.columns]])
    return sorted(map(tuple, df.astype(str).itertuples(index=False)))


def test_kill_9_and_restart_gives_the_uninterrupted_outputs(tmp_path, pg_server):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    land_many(clean, rows_per_file=ROWS_PER_FILE, pg=True)
    land_many(crashed, rows_per_file=ROWS_PER_FILE, pg=True)
    pg = {"LOWWATER_PG_URL": pg_server.url}
    assert run(clean, env=pg) == 0
    # 1. crash after the step's Parquet writes and PostgreSQL staging, before its delivery
    assert run(crashed, env={**pg, "LOWWATER_FAULT": "before_deliver:3"}) == 137
    # 2. crash between the PostgreSQL commit and the manifest commit (replay must be skipped)
    assert run(crashed, env={**pg, "LOWWATER_FAULT": "before_commit:5"}) == 137
    # 3. crash right after a manifest commit, before Spark's commit log
    assert run(crashed, env={**pg, "LOWWATER_FAULT": "after_commit:7"}) == 137
    # 4. kill -9 at an arbitrary moment, mid-step (random delay after this run's first commit)
    rng = np.random.default_rng()
    run(crashed, env=pg, kill_after=float(rng.uniform(0.0, 2.0)))
    # 5. crash inside the drain step, after its delivery, before it commits
    assert run(crashed, env={**pg, "LOWWATER_FAULT": "before_commit:12"}) == 137
    assert run(crashed, env=pg) == 0
    a, b = outputs(clean, pg_server.url), outputs(crashed, pg_server.url)
    for kind in ("results", "late", "metrics", "crash_results", "crash_late", "crash_metrics", "crash_dead_letter"):
        assert b[kind] == a[kind], kind
    assert a["crash_results"] and a["crash_late"] and len(a["crash_metrics"]) == 13
    assert len(a["crash_results"]) == len(a["results"]) and len(a["crash_late"]) == len(a["late"])
    assert b["staging_left"] == 0
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert b["summary"][k] == a["summary"][k], k
    s = b["summary"]
    assert s["balanced"] and s["rows"] == 12 * (ROWS_PER_FILE + 2) and s["dead_letter"] == 24
    assert len(b["crash_dead_letter"]) == 24
    assert s["on_time"] + s["late_updates"] + s["too_late"] + s["dead_letter"] == s["rows"]
