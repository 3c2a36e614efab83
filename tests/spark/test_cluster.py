"""On a real standalone cluster (a master and two 1-core workers on localhost):
the same pipeline, the same replay and the same Kafka topic give the same outputs as local mode.

One cluster start and one driver process (a JVM start; its application gets one
executor on each worker) for the three commands; the local-mode references run in
this process, on the shared session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lowwater.testing.cluster import LocalStandaloneCluster

from .helpers import FAST_JVM_OPTS, fast_jvm, run_cli_here
from .test_cli import land
from .test_join_crash import land as land_join
from .test_join_crash import outputs as join_outputs
from .test_kafka import kafka_pipeline, produce, stream

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WHATIF = ["whatif", "landing", "--config", "pipeline.toml", "--lateness", "0s,2s", "--allowed-lateness", "0s,5s",
          "--json", "w.json", "-q"]
RUN = ["run", "pipeline.toml", "--once", "--drain", "-q"]

# Several CLI commands in one driver process, as the tests run them in theirs (helpers.run_cli_here):
# argv[1] is a JSON list of [directory, args]; stops at the first that fails, with its exit code.
DRIVER = """
import json, os, sys
from typer.testing import CliRunner
from lowwater.cli import app
for cwd, args in json.loads(sys.argv[1]):
    os.chdir(cwd)
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    sys.stderr.write(f"--- lowwater {' '.join(args)}: exit {r.exit_code}\\n{r.stderr}")
    if r.exit_code:
        sys.exit(r.exit_code)
"""


def results_table(path: Path, cols: tuple[str, ...] = ("total", "biggest")) -> list[tuple]:
    r = pd.read_parquet(path / "out" / "results")
    cols = ["key", "window_start", "window_end", "count", *cols, "kind", "revision"]
    return sorted(tuple(x) for x in r[cols].astype(str).itertuples(index=False))


def late_table(path: Path) -> list[tuple]:
    r = pd.read_parquet(path / "out" / "late")
    return sorted(tuple(x) for x in r.drop(columns=["source_file"], errors="ignore").astype(str).itertuples(
        index=False))


def summary(path: Path) -> dict:
    return json.loads((path / "out" / "summary.json").read_text())


COUNTS = ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions")


def test_run_whatif_and_kafka_on_a_standalone_cluster(tmp_path, spark, kafka_broker):
    local_dir, cluster_dir = tmp_path / "local", tmp_path / "cluster"
    local_dir.mkdir()
    land(local_dir, "jsonl")
    cluster_dir.mkdir()
    land(cluster_dir, "jsonl")
    # A tiny topic: four partitions of 12 records (one lagging, which holds the watermark).
    produce(kafka_broker, "on-cluster", stream(48, quiet=False))
    kafka_local = kafka_pipeline(tmp_path / "kafka-local", kafka_broker, "on-cluster").parent
    kafka_cluster = kafka_pipeline(tmp_path / "kafka-cluster", kafka_broker, "on-cluster").parent
    join_local, join_cluster = tmp_path / "join-local", tmp_path / "join-cluster"  # the interval join's keyed pass
    land_join(join_local)
    land_join(join_cluster)

    # The local-mode references, in this process (they need no cluster; a cluster started beside them, in a
    # thread, twice did not answer its status page within the start timeout on the loaded machine).
    for cwd, args in ((local_dir, RUN), (local_dir, [*WHATIF, "--master", "local[1]"]), (kafka_local, RUN),
                      (join_local, RUN)):
        proc = run_cli_here(args, cwd)
        assert proc.returncode == 0, (args, proc.stderr[-3000:])
    with LocalStandaloneCluster(workers=2, cores_per_worker=1, memory_per_worker="1g",
                                work_dir=tmp_path / "spark-cluster", start_timeout_s=120) as cluster:
        assert cluster.alive_workers() == 2
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        # The executors are short-lived JVMs too (helpers.FAST_JVM_OPTS); the driver gets them by fast_jvm.
        conf = {**cluster.driver_conf, "spark.executor.memory": "512m",
                "spark.executor.extraJavaOptions": FAST_JVM_OPTS}
        sets = [x for k, v in conf.items() for x in ("--set", f'spark.conf.{k}="{v}"')]
        on_cluster = ["--set", f"spark.master={cluster.master_url}", *sets]
        # The Kafka run first: its session starts with the connector's jars (spark.jars), which the
        # executors fetch from the driver; the file run and the replay reuse that session.
        commands = [(str(kafka_cluster), [*RUN, *on_cluster]), (str(cluster_dir), [*RUN, *on_cluster]),
                    (str(cluster_dir), [*WHATIF, "--master", cluster.master_url]),
                    (str(join_cluster), [*RUN, *on_cluster])]
        driver = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], capture_output=True,
                                text=True, timeout=900, env=fast_jvm(cluster.client_env()))
        assert driver.returncode == 0, driver.stderr[-4000:]
        # The work really ran on the workers: each launched an executor for the application, which fetched
        # the connector's jars from the driver and ran tasks; the executors read the topic's records.
        logs = []
        for i in range(2):
            apps = list((tmp_path / "spark-cluster" / f"worker-{i}").glob("app-*"))
            assert len(apps) == 1, (i, apps)
            logs.append("".join(f.read_text(errors="replace") for f in apps[0].glob("*/stderr")))
            assert "Running task" in logs[i] and "spark-sql-kafka" in logs[i], (i, logs[i][-2000:])
        assert "KafkaDataConsumer: From Kafka topicPartition=on-cluster-" in "".join(logs)

    assert results_table(cluster_dir) == results_table(local_dir)
    assert len(results_table(local_dir)) > 0
    s_local, s_cluster = summary(local_dir), summary(cluster_dir)
    for k in COUNTS:
        assert s_cluster[k] == s_local[k], k
    assert s_local["rows"] == 8 and s_local["balanced"]
    assert json.loads((cluster_dir / "w.json").read_text()) == json.loads((local_dir / "w.json").read_text())

    # The topic: the same results, late rows and counts on the cluster as in local mode.
    assert results_table(kafka_cluster, ("total",)) == results_table(kafka_local, ("total",))
    assert late_table(kafka_cluster) == late_table(kafka_local)
    k_local, k_cluster = summary(kafka_local), summary(kafka_cluster)
    for k in COUNTS:
        assert k_cluster[k] == k_local[k], k
    assert k_local["rows"] == 48 and k_local["balanced"] and k_local["windows_fired"] > 0

    # The interval join, run keyed on the executors: the same joined/, late/ and per-side counts.
    j_local, j_cluster = join_outputs(join_local), join_outputs(join_cluster)
    assert j_local["joined"] and j_local["late"] and j_local["summary"]["join"]["left"]["balanced"]
    assert j_cluster["joined"] == j_local["joined"] and j_cluster["late"] == j_local["late"]
    assert j_cluster["summary"]["join"] == j_local["summary"]["join"]
