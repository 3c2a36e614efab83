"""On a real standalone cluster (a master and two 1-core workers on localhost):
the same pipeline and the same replay give the same outputs as local mode."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from lowwater.testing.cluster import LocalStandaloneCluster

from .test_cli import land, run_cli

pytestmark = pytest.mark.spark


def results_table(path):
    r = pd.read_parquet(path / "out" / "results")
    cols = ["key", "window_start", "window_end", "count", "total", "biggest", "kind", "revision"]
    return sorted(tuple(x) for x in r[cols].astype(str).itertuples(index=False))


def test_run_and_whatif_on_a_standalone_cluster(tmp_path):
    local_dir, cluster_dir = tmp_path / "local", tmp_path / "cluster"
    local_dir.mkdir()
    land(local_dir, "jsonl")
    shutil.copytree(local_dir, cluster_dir)
    local = run_cli(["run", "pipeline.toml", "--drain", "-q"], local_dir)
    assert local.returncode == 0, local.stderr[-2000:]
    whatif_args = ["whatif", "landing", "--config", "pipeline.toml", "--lateness", "0s,2s", "--allowed-lateness",
                   "0s,5s", "--json", "w.json", "-q"]
    local_w = run_cli([*whatif_args, "--master", "local[2]"], local_dir)
    assert local_w.returncode == 0, local_w.stderr[-2000:]

    with LocalStandaloneCluster(workers=2, cores_per_worker=1, memory_per_worker="1g",
                                work_dir=tmp_path / "spark-cluster") as cluster:
        assert cluster.alive_workers() == 2
        on_cluster = run_cli(["run", "pipeline.toml", "--drain", "-q", "--set", f"spark.master={cluster.master_url}",
                              "--set", "spark.conf.spark.executor.memory=\"512m\""], cluster_dir, timeout=400)
        assert on_cluster.returncode == 0, on_cluster.stderr[-3000:]
        cluster_w = run_cli([*whatif_args, "--master", cluster.master_url], cluster_dir, timeout=400)
        assert cluster_w.returncode == 0, cluster_w.stderr[-3000:]

    assert results_table(cluster_dir) == results_table(local_dir)
    s_local = json.loads((local_dir / "out" / "summary.json").read_text())
    s_cluster = json.loads((cluster_dir / "out" / "summary.json").read_text())
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert s_cluster[k] == s_local[k], k
    assert json.loads((cluster_dir / "w.json").read_text()) == json.loads((local_dir / "w.json").read_text())
