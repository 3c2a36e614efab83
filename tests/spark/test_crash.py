"""Crash and restart: kill -9 at several points, rerun the same command; the
outputs equal those of an uninterrupted run (SEMANTICS.md §8)."""

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
import pytest

from .test_cli import CONFIG

pytestmark = pytest.mark.spark


def land_many(root: Path, files: int = 12, rows_per_file: int = 400, seed: int = 3) -> None:
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
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    (root / "pipeline.toml").write_text(CONFIG.format(fmt="jsonl"))


def run(root: Path, env: dict | None = None, kill_after: float | None = None) -> int:
    cmd = [sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"]
    full_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    if kill_after is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 137), err.decode()[-2000:]
        return proc.returncode
    # Kill -9 the whole process group (driver JVM and Python) once a few steps have committed.
    state = root / "out" / "_checkpoint" / "lowwater" / "state"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(state.glob("manifest-*.json"))) < 3:
        time.sleep(0.2)
    time.sleep(kill_after)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return -9


def outputs(root: Path) -> dict[str, list]:
    out = {}
    for kind in ("results", "late", "metrics"):
        df = pd.read_parquet(root / "out" / kind)
        drop = [c for c in ("duration_s", "watermark_lag_s", "source_file") if c in df.columns]
        df = df.drop(columns=drop).astype(str)
        out[kind] = sorted(map(tuple, df.itertuples(index=False)))
    out["summary"] = json.loads((root / "out" / "summary.json").read_text())
    return out


def test_kill_9_and_restart_gives_the_uninterrupted_outputs(tmp_path):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    land_many(clean)
    land_many(crashed)
    assert run(clean) == 0
    # 1. crash between a step's output writes and its manifest commit
    assert run(crashed, env={"LOWWATER_FAULT": "before_commit:4"}) == 137
    # 2. crash right after a manifest commit, before Spark's commit log
    assert run(crashed, env={"LOWWATER_FAULT": "after_commit:7"}) == 137
    # 3. kill -9 at an arbitrary moment, mid-step
    run(crashed, kill_after=1.3)
    # 4. crash inside the drain step, before it commits
    assert run(crashed, env={"LOWWATER_FAULT": "before_commit:12"}) == 137
    assert run(crashed) == 0
    a, b = outputs(clean), outputs(crashed)
    assert b["results"] == a["results"]
    assert b["late"] == a["late"]
    assert b["metrics"] == a["metrics"]
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert b["summary"][k] == a["summary"][k], k
    assert a["summary"]["balanced"] and a["summary"]["rows"] == 12 * 400
