"""On a real standalone cluster (a master and two 1-core workers on localhost):
the same pipeline and the same replay give the same outputs as local mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lowwater.testing.cluster import LocalStandaloneCluster

from .test_cli import land, run_cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WHATIF = ["whatif", "landing", "--config", "pipeline.toml", "--lateness", "0s,2s", "--allowed-lateness", "0s,5s",
          "--json", "w.json", "-q"]


def results_table(path):
    r = pd.read_parquet(path / "out" / "results")
    cols = ["key", "window_start", "window_end", "count", "total", "biggest", "kind", "revision"]
    return sorted(tuple(x) for x in r[cols].astype(str).itertuples(index=False))


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "lowwater.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p: subprocess.Popen, timeout: int = 300) -> None:
    _, stderr = p.communicate(timeout=timeout)
    assert p.returncode == 0, stderr[-3000:]


def test_run_and_whatif_on_a_standalone_cluster(tmp_path):
    local_dir, cluster_dir = tmp_path / "local", tmp_path / "cluster"
    local_dir.mkdir()
    land(local_dir, "jsonl")
    shutil.copytree(local_dir, cluster_dir)
    # The local-mode references run while the cluster comes up (they need no cluster).
    local = start_cli(["run", "pipeline.toml", "--once", "--drain", "-q"], local_dir)
    local_w = start_cli([*WHATIF, "--master", "local[1]"], local_dir)
    try:
        with LocalStandaloneCluster(workers=2, cores_per_worker=1, memory_per_worker="1g",
                                    work_dir=tmp_path / "spark-cluster") as cluster:
            assert cluster.alive_workers() == 2
            assert cluster.master_url.startswith("spark://127.0.0.1:")
            sets = [x for k, v in {**cluster.driver_conf, "spark.executor.memory": "512m"}.items()
                    for x in ("--set", f'spark.conf.{k}="{v}"')]
            t0 = time.monotonic()
            on_cluster = run_cli(["run", "pipeline.toml", "--once", "--drain", "-q", "--set",
                                  f"spark.master={cluster.master_url}", *sets], cluster_dir, timeout=300,
                                 env=cluster.client_env())
            assert on_cluster.returncode == 0, on_cluster.stderr[-3000:]
            cluster_w = run_cli([*WHATIF, "--master", cluster.master_url], cluster_dir, timeout=300,
                                env=cluster.client_env())
            assert cluster_w.returncode == 0, cluster_w.stderr[-3000:]
            ran_s = time.monotonic() - t0
            # The work really ran on the workers: each launched an executor for both applications.
            for i in range(2):
                apps = list((tmp_path / "spark-cluster" / f"worker-{i}").glob("app-*"))
                assert len(apps) == 2, (i, apps, ran_s)
        finish(local)
        finish(local_w)
    finally:
        for p in (local, local_w):
            if p.poll() is None:
                p.kill()
                p.wait()

    assert results_table(cluster_dir) == results_table(local_dir)
    assert len(results_table(local_dir)) > 0
    s_local = json.loads((local_dir / "out" / "summary.json").read_text())
    s_cluster = json.loads((cluster_dir / "out" / "summary.json").read_text())
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert s_cluster[k] == s_local[k], k
    assert s_local["rows"] == 8 and s_local["balanced"]
    assert json.loads((cluster_dir / "w.json").read_text()) == json.loads((local_dir / "w.json").read_text())
