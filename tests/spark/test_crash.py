"""Crash and restart: kill -9 at several points, rerun the same command; the
outputs -- Parquet and PostgreSQL -- equal those of an uninterrupted run (SEMANTICS.md §8).

One ``lowwater run`` process is really killed (a JVM start, ~10-20 s): SIGKILL of its
process group at a random moment, which also leaves its lock and a PostgreSQL
connection behind. The fault points (between a step's writes and its delivery,
after a commit, inside the drain) are crashes of a run in this process
(:func:`crash_here`: the step stops there, uncommitted, as ``LOWWATER_FAULT`` leaves
it in a process; test_kafka_ops kills a process at such a point), and the last
restart is the same command in this process (``run_cli_here``).
"""

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

import lowwater.spark.engine as engine_module
from lowwater.config import load_config
from lowwater.spark.engine import Engine
from lowwater.testing.landing import land_jsonl

from .helpers import fast_jvm, run_cli_here
from .test_cli import CONFIG

pytestmark = [pytest.mark.spark, pytest.mark.slow]


FILES, ROWS_PER_FILE = 6, 2_000  # 12k rows (+2 bad rows a file); one file a step (well under a second each)

PG_OUTPUT = """kind = "postgres"

[output.postgres]
results_table = "crash_results"
late_table = "crash_late"
dead_letter_table = "crash_dead_letter"
metrics_table = "crash_metrics"
"""


def land_many(root: Path, files: int = 10, rows_per_file: int = 400, seed: int = 3, pg: bool = False) -> None:
    """``files`` JSONL files of ``rows_per_file`` rows (``testing/landing.land_jsonl``) and the pipeline; with
    ``pg`` each file also gets one malformed line and one row without event time."""
    land_jsonl(root / "landing", files, rows_per_file, seed=seed, dead_letters=pg)
    text = CONFIG.format(fmt="jsonl")
    if pg:  # the URL comes from LOWWATER_PG_URL
        text = text.replace('[output]\npath = "out"\n', '[output]\npath = "out"\n' + PG_OUTPUT)
    (root / "pipeline.toml").write_text(text)


def run(root: Path, env: dict | None = None, kill_after: float | None = None) -> int:
    cmd = [sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"]
    full_env = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})})
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    if kill_after is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 137), err.decode()[-2000:]
        return proc.returncode
    # Kill -9 the whole process group (driver JVM and Python) once this run committed a step.
    start = newest_step(root)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and newest_step(root) <= start:
        time.sleep(0.02)
    time.sleep(kill_after)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it finished first: the next run's assertions notice
        pass
    return proc.wait()


def newest_step(root: Path) -> int:
    """The last step with a committed manifest (-1: none)."""
    state = root / "out" / "_checkpoint" / "lowwater" / "state"
    return max((int(p.name[9:21]) for p in state.glob("manifest-*.json")), default=-1)


class Crash(Exception):
    """Stands for kill -9 at a fault point of a run in this process: the step in flight is not committed."""


def crash_here(spark, root: Path, point: str, step: int, monkeypatch) -> None:  # noqa: ANN001
    """``lowwater run pipeline.toml --drain`` on ``root`` in this process, crashing at ``point`` of ``step``.

    Nothing of the engine runs after the fault point (the exception leaves the step
    uncommitted, as ``LOWWATER_FAULT`` does in a process); only the lock is released,
    which a real kill leaves behind (the killed processes cover taking it over).
    """

    def fault(p: str, s: int) -> None:
        if (p, s) == (point, step):
            raise Crash(f"{p}:{s}")

    with monkeypatch.context() as m:
        m.setattr(engine_module, "_fault", fault)
        with pytest.raises(Exception, match=f"Crash|{point}:{step}"):
            Engine(load_config(root / "pipeline.toml"), spark).run(drain=True)


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


def test_kill_9_and_restart_gives_the_uninterrupted_outputs(tmp_path, pg_server, spark, monkeypatch):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    land_many(clean, files=FILES, rows_per_file=ROWS_PER_FILE, pg=True)
    land_many(crashed, files=FILES, rows_per_file=ROWS_PER_FILE, pg=True)
    pg = {"LOWWATER_PG_URL": pg_server.url}
    drain = FILES
    # The uninterrupted reference runs in this process, on the shared session (one JVM start
    # fewer; a different Spark session and process must give the same outputs, SEMANTICS.md §8).
    monkeypatch.setenv("LOWWATER_PG_URL", pg_server.url)
    t0 = time.monotonic()
    Engine(load_config(clean / "pipeline.toml"), spark).run(drain=True)
    step_s = (time.monotonic() - t0) / (FILES + 1)  # a step of a warm session, start-up included
    # Kill points (steps 0 .. FILES-1 read one file each; the drain is step FILES):
    # 1. a crash after the step's Parquet writes and PostgreSQL staging, before its delivery (in this process)
    crash_here(spark, crashed, "before_deliver", 1, monkeypatch)
    # 2. kill -9 of a real process at an arbitrary moment mid-step: a random delay after this run's first
    #    commit, within one step of the warm reference run (the new process's steps are no faster), so the kill
    #    lands in the next step's reading, folding, writing, staging or delivery; each CI run draws another moment
    rng = np.random.default_rng()
    delays = [float(rng.uniform(0.0, step_s))]
    assert run(crashed, env=pg, kill_after=delays[0]) == -signal.SIGKILL, "finished before the kill"
    assert newest_step(crashed) < 3, ("the kill came after step 3's commit", delays)  # 3. needs step 3 uncommitted
    # 3. crash right after a manifest commit, before Spark's commit log (the batch is replayed)
    crash_here(spark, crashed, "after_commit", 3, monkeypatch)
    # 4. crash inside the drain step, after its PostgreSQL delivery, before its manifest commit:
    #    the restart replays the drain, which PostgreSQL recognises and skips
    crash_here(spark, crashed, "before_commit", drain, monkeypatch)
    # 5. the same command again finishes (in this process: the restart's process is not the subject)
    last = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], crashed, env=pg)
    assert last.returncode == 0, last.stderr[-3000:]
    a, b = outputs(clean, pg_server.url), outputs(crashed, pg_server.url)
    for kind in ("results", "late", "metrics", "crash_results", "crash_late", "crash_metrics", "crash_dead_letter"):
        assert b[kind] == a[kind], (kind, delays)
    assert a["crash_results"] and a["crash_late"] and len(a["crash_metrics"]) == FILES + 1
    assert len(a["crash_results"]) == len(a["results"]) and len(a["crash_late"]) == len(a["late"])
    assert b["staging_left"] == 0
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert b["summary"][k] == a["summary"][k], k
    s = b["summary"]
    assert s["balanced"] and s["rows"] == FILES * (ROWS_PER_FILE + 2) and s["dead_letter"] == 2 * FILES
    assert len(b["crash_dead_letter"]) == 2 * FILES
    assert s["on_time"] + s["late_updates"] + s["too_late"] + s["dead_letter"] == s["rows"]
