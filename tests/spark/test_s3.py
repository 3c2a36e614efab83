"""On an S3-compatible server (moto, ``s3_server``): the object-store primitives, the lock, and a pipeline whose
landing, output and checkpoint are ``s3a://`` -- killed, refused, reordered and reconciled (ADR 0029).

The run-level checks reuse the local tests' helpers and compare with the same pipeline run on the local file
system: an object store must change no result.
"""

from __future__ import annotations

import json
import socket

import pytest

from lowwater.config import parse_config
from lowwater.io.lock import LOCK_NAME, OutputLockedError, hold
from lowwater.runtime.fs import HadoopFS

pytestmark = [pytest.mark.spark]


def test_object_store_writes_are_puts_and_creates_are_conditional(spark, s3_server):
    fs = HadoopFS(spark)
    d = s3_server.url("primitives")
    path = f"{d}/once"
    assert fs.conditional_create(path) is None  # the client offers it and the store refused a second create
    assert fs.create_new(path, "first") is True
    assert fs.create_new(path, "second") is False  # If-None-Match: * -> 412
    assert fs.read_text(path) == "first"
    tag = fs.etag(path)
    assert tag
    assert fs.replace_if(path, "stale", "not-its-etag") is False  # If-Match
    assert fs.replace_if(path, "swapped", tag) is True
    assert fs.replace_if(path, "again", tag) is False  # the etag changed with the swap
    assert fs.read_text(path) == "swapped"
    fs.write_text_atomic(f"{d}/manifest.json", '{"a": 1}')
    fs.write_text_atomic(f"{d}/manifest.json", '{"a": 2}')
    assert fs.read_text(f"{d}/manifest.json") == '{"a": 2}'
    assert fs.list_names(d) == ["manifest.json", "once"]  # no temporary object, nothing renamed, no probe left


def _cfg(out: str) -> object:
    return parse_config({
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": out},
    }, base_dir=".")


def test_the_lock_on_s3_refuses_a_live_holder_takes_over_a_gone_one_and_needs_conditional_writes(spark, s3_server):
    fs = HadoopFS(spark)
    out = s3_server.url("locked")
    lock = f"{out}/{LOCK_NAME}"
    live = {"host": "elsewhere", "pid": 1, "since": "2026-01-01T00:00:00Z", "token": "t1", "proc_start": None}
    fs.write_text_atomic(lock, json.dumps(live))
    fs.write_text_atomic(f"{lock}.beat", json.dumps({"token": "t1", "at": 4e12}))  # a heartbeat from the future
    with pytest.raises(OutputLockedError, match="in use by another lowwater run \\(host elsewhere, pid 1"):
        hold(_cfg(out), remote=fs)
    fs.delete(f"{lock}.beat")  # no heartbeat since 2026-01-01: gone
    held = hold(_cfg(out), remote=fs)
    mine = json.loads(fs.read_text(lock))
    assert mine["host"] == socket.gethostname() and mine["token"] != "t1"
    held.release()
    assert not fs.exists(lock)

    # A bucket whose client sends no If-None-Match (S3A's conditional create switched off): one line, no lock.
    bucket = "lowwater-no-conditional"
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{bucket}.create.conditional.enabled", "false")
    s3_server._request("PUT", f"/{bucket}")
    plain = f"s3a://{bucket}/out"
    with pytest.raises(OutputLockedError) as refused:
        hold(_cfg(plain), remote=fs)
    assert str(refused.value).startswith(f"output.path: {plain} is on an object store where two runs could both")
    assert "no conditional create" in str(refused.value) and "\n" not in str(refused.value)
    assert not fs.exists(f"{plain}/{LOCK_NAME}")


# --- A pipeline on S3: crashed and killed, refused while it runs, files read in name order -------------------

FILES, ROWS_PER_FILE = 3, 200


def _s3_pipeline(root, s3_server, prefix: str) -> str:  # noqa: ANN001
    """``root``'s local pipeline (``test_crash.land_many``) moved to S3: its files uploaded in reverse name order
    (modification times then run against the names), landing, output and checkpoint under ``prefix``."""
    from tests.spark.test_cli import CONFIG

    for f in sorted((root / "landing").iterdir(), reverse=True):
        s3_server.put(f"{prefix}/landing/{f.name}", f.read_bytes())
        assert s3_server.get(f"{prefix}/landing/{f.name}") == f.read_bytes()
    text = CONFIG.format(fmt="jsonl").replace('path = "landing"', f'path = "{s3_server.url(prefix)}/landing"')
    text = text.replace('path = "out"', f'path = "{s3_server.url(prefix)}/out"')
    (root / "pipeline.toml").write_text(text + s3_server.toml())
    return f"{s3_server.url(prefix)}/out"


def _newest_step(fs: HadoopFS, out: str) -> int:
    names = fs.list_names(f"{out}/_checkpoint/lowwater/state")
    return max((int(n[9:21]) for n in names if n.startswith("manifest-")), default=-1)


def _outputs(spark, fs: HadoopFS, out: str) -> dict:  # noqa: ANN001
    got: dict = {}
    for kind in ("results", "late", "metrics"):
        df = spark.read.parquet(f"{out}/{kind}").toPandas()
        df = df.drop(columns=[c for c in ("duration_s", "watermark_lag_s", "source_file") if c in df.columns])
        got[kind] = sorted(map(tuple, df.astype(str).itertuples(index=False)))
    got["summary"] = json.loads(fs.read_text(f"{out}/summary.json"))
    return got


@pytest.mark.slow
def test_on_s3_killed_crashed_and_refused_a_run_equals_the_local_run(spark, s3_server, tmp_path, monkeypatch):
    import os
    import signal
    import subprocess
    import sys
    import time

    import numpy as np

    from lowwater.config import load_config
    from lowwater.spark.engine import Engine
    from tests.spark.helpers import fast_jvm, run_cli_here
    from tests.spark.test_crash import crash_here, land_many

    local, remote = tmp_path / "local", tmp_path / "s3"
    land_many(local, files=FILES, rows_per_file=ROWS_PER_FILE)
    land_many(remote, files=FILES, rows_per_file=ROWS_PER_FILE)
    t0 = time.monotonic()
    Engine(load_config(local / "pipeline.toml"), spark).run(drain=True)
    step_s = (time.monotonic() - t0) / (FILES + 1)
    out = _s3_pipeline(remote, s3_server, "crash")
    fs = HadoopFS(spark)

    # 1. a real process, killed -9 at a random moment after its first commit; meanwhile a second run refuses
    # It waits after its first commit until the second run has been refused, and before the drain's commit until
    # it is killed (spark/faults.py): a run whose steps outpace this process's looks at S3 cannot finish first.
    go, never = tmp_path / "go", tmp_path / "never"
    env = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable,
                    "LOWWATER_FAULT": f"after_commit:0:wait:{go};before_commit:{FILES}:wait:{never}"})
    proc = subprocess.Popen([sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"],
                            cwd=remote, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and f'"pid": {proc.pid},' not in (
                fs.read_text(f"{out}/{LOCK_NAME}") if fs.exists(f"{out}/{LOCK_NAME}") else ""):
            time.sleep(0.25)  # each look is S3 requests: moto's CPU and this JVM's, taken from the run
        second = run_cli_here(["run", "pipeline.toml", "--once", "-q"], remote)  # while the first one holds it
        go.touch()
        while time.monotonic() < deadline and _newest_step(fs, out) < 0 and proc.poll() is None:
            time.sleep(0.2)
        delay = float(np.random.default_rng().uniform(0.0, step_s))
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    text = err.decode()  # where it began and how it ended (an early exit's first lines name its cause)
    assert proc.returncode == -signal.SIGKILL, ("finished before the kill", text[:3000], text[-2000:])
    assert second.returncode == 2, second.stdout + second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: output.path: {out} is in use by another lowwater run"), lines
    assert f"host {socket.gethostname()}, pid {proc.pid}, since " in lines[0]
    killed_at = _newest_step(fs, out)
    assert 0 <= killed_at < FILES, killed_at  # the drain (step FILES) did not commit
    assert fs.exists(f"{out}/{LOCK_NAME}")  # left by the kill: the next run takes it over
    # 2. a crash right after the next manifest commit, before Spark's commit log (the batch is replayed; at the
    #    drain when the kill came after the last file's step)
    crash_here(spark, remote, "after_commit", killed_at + 1, monkeypatch)
    # 3. a crash inside the drain, after its writes, before its manifest commit
    crash_here(spark, remote, "before_commit", FILES, monkeypatch)
    last = run_cli_here(["run", "pipeline.toml", "--drain", "-q"], remote)
    assert last.returncode == 0, last.stderr[-3000:]

    a, b = _outputs(spark, HadoopFS(spark), str(local / "out")), _outputs(spark, fs, out)
    for kind in ("results", "late", "metrics"):
        assert b[kind] == a[kind], (kind, delay)
    assert a["results"] and a["late"] and len(a["metrics"]) == FILES + 1
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert b["summary"][k] == a["summary"][k], k
    assert b["summary"]["balanced"] and b["summary"]["out_of_order_files"] == 0
    assert not fs.exists(f"{out}/{LOCK_NAME}")
    assert not [n for n in fs.list_names(f"{out}/_checkpoint/lowwater/state") if n.endswith(".tmp")]


def test_reconcile_and_apply_twice_on_s3_outputs(spark, s3_server, tmp_path):
    from tests.spark.helpers import run_cli_here
    from tests.spark.test_reconcile import FILES as LOG
    from tests.spark.test_reconcile import IN_FLIGHT, SUMS, _land, _toml

    for i, rows in enumerate(LOG):
        (tmp_path / "landing").mkdir(exist_ok=True)
        _land(tmp_path / "landing", i, rows)
    out = s3_server.url("reconcile/out")
    text = _toml('type = "tumbling"\nsize = "10s"', aggregations=SUMS).replace('[output]\npath = "out"',
                                                                               f'[output]\npath = "{out}"')
    (tmp_path / "pipeline.toml").write_text(text + s3_server.toml())
    run = run_cli_here(["run", "pipeline.toml", "--once", "-q"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    _land(tmp_path / "landing", 9, IN_FLIGHT)  # lands after the run: in flight

    def results() -> list[tuple]:
        df = spark.read.parquet(f"{out}/results").toPandas()
        return sorted(map(tuple, df.astype(str).itertuples(index=False)))

    first = run_cli_here(["reconcile", "pipeline.toml", "-q", "--apply", "--json", "s1.json"], tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    s = json.loads((tmp_path / "s1.json").read_text())
    # The same answers as on local files (test_reconcile): two too-late rows worth 300, nothing unexplained.
    assert s["unexplained"] == 0 and s["causes"]["too_late"]["rows"] == 2 and s["causes"]["too_late"]["total"] == 300
    assert s["corrections"] > 0
    once = results()
    assert sum(1 for r in once if "correction" in r) == s["corrections"]
    second = run_cli_here(["reconcile", "pipeline.toml", "-q", "--apply", "--json", "s2.json"], tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    again = json.loads((tmp_path / "s2.json").read_text())
    assert again["corrections"] == 0 and again["unexplained"] == 0
    assert results() == once  # twice == once, row for row
    fs = HadoopFS(spark)
    assert fs.list_names(f"{out}/reconcile") and not fs.exists(f"{out}/{LOCK_NAME}")


def test_the_python_api_session_gets_s3a_and_delta_for_an_s3a_delta_output(monkeypatch):
    """``lw.delta("s3a://...")`` without a session of one's own: the session gets S3A's and Delta's jars and settings,
    as ``lowwater run`` gives them (no JVM: the session builder is replaced)."""
    import lowwater.runtime.session as session_module
    from lowwater.api.running import _session
    from lowwater.config import parse_config

    cfg = parse_config({
        "source": {"format": "jsonl", "path": "landing", "event_time": "t", "schema": "t DOUBLE"},
        "window": {"type": "tumbling", "size": "10s", "aggregations": {"n": "count(t)"}},
        "output": {"path": "s3a://lake/out", "kind": "delta"},
        "spark": {"s3": {"endpoint": "http://127.0.0.1:9000", "path_style_access": True}},
    }, base_dir=".")
    asked = {}
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))  # none of the user's
    monkeypatch.setattr(session_module, "get_spark", lambda spark_cfg, **kw: asked.update(kw) or "session")
    assert _session(cfg) == "session"
    names = [j.rsplit("/", 1)[-1] for j in asked["jars"]]
    assert any(n.startswith("hadoop-aws") for n in names) and any(n.startswith("delta-spark") for n in names)
    assert asked["conf"]["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert asked["conf"]["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
