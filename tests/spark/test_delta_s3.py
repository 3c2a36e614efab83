"""``[output] kind = "delta"`` with ``s3a://`` landing, output and checkpoint on the S3-compatible server (moto,
``s3_server``): killed, refused, crashed around the manifest, replayed and reconciled, the Delta tables equal the
same pipeline's on local files, and every step is in each table once (ADR 0026, 0029).

Two processes with Delta's and S3A's jars (the shared session has no Delta), started together: ``lowwater run``
killed -9 at a random moment of a step -- while it runs, a second run (in this process) is refused -- and one script
that runs the local pipeline cleanly (and ``reconcile --apply`` once) meanwhile, then, told the step after the kill,
on S3 crashes that step between its writes and its manifest (``before_commit``), then between its manifest and Spark's
commit (``after_commit``), then drains and applies reconcile twice; it reads every table back with Spark, this
process with delta-rs. Delta writes its log on S3A with its single-driver log store: one writer, which
lowwater's lock makes lowwater's one run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from lowwater.io.delta import CURRENT
from lowwater.io.lock import LOCK_NAME
from lowwater.runtime.fs import HadoopFS
from lowwater.testing.landing import land_jsonl
from lowwater.testing.s3 import KEY, SECRET

from .helpers import fast_jvm, run_cli_here
from .test_cli import CONFIG
from .test_delta import KINDS, rows
from .test_s3 import _newest_step, _s3_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES = 3  # steps 0..2 read a file each, step 3 drains
TABLES = (*KINDS, CURRENT)
PER_RUN = ("duration_s", "watermark_lag_s", "source_file")  # wall clock, and the landing's own path

SCRIPT = """
import json, os, sys, time
import lowwater.spark.engine as engine_module
from lowwater.cli import app
from lowwater.config import load_config
from lowwater.io.delta import delta_session
from lowwater.io.s3 import s3_session
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.session import get_spark
from lowwater.spark.engine import Engine

local, remote, drop, tables = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
cfg = load_config(f"{remote}/pipeline.toml")
(jars, conf), (s3_jars, s3_conf) = delta_session(cfg), s3_session(cfg)
spark = get_spark(cfg.spark, jars=jars + s3_jars, conf={**conf, **s3_conf})
here = os.getcwd()
out = {"local": load_config(f"{local}/pipeline.toml").output.path, "remote": cfg.output.path}

def cli(root, *args):
    os.chdir(root)
    try:
        app(list(args))
    except SystemExit as e:
        return e.code or 0
    return 0

def crash(point):  # as test_crash.crash_here: nothing of the engine runs after the fault point
    def fault(p, s):
        if (p, s) == (point, step):
            raise RuntimeError(f"crash at {p}")
    real, engine_module._fault = engine_module._fault, fault
    os.chdir(remote)
    try:
        Engine(load_config("pipeline.toml"), spark).run(drain=True)
    except Exception as e:
        assert f"crash at {point}" in str(e), e
    else:
        raise AssertionError(f"no crash at {point} of step {step}")
    finally:
        engine_module._fault = real

def txns(table):  # every (appId, version) in the table's log
    fs, log = HadoopFS(spark), f"{table}/_delta_log"
    return [(a["txn"]["appId"], a["txn"]["version"]) for n in fs.list_names(log) if n.endswith(".json")
            for a in map(json.loads, fs.read_text(f"{log}/{n}").splitlines()) if "txn" in a]

got = {"codes": [cli(local, "run", "pipeline.toml", "--drain", "-q"),  # while the other run goes on
                 cli(local, "reconcile", "pipeline.toml", "--apply", "-q")]}
deadline = time.monotonic() + 600  # the step comes after the other run's kill
while not os.path.exists(f"{here}/step") and time.monotonic() < deadline:
    time.sleep(0.2)
with open(f"{here}/step") as f:
    step = int(f.read())
crash("before_commit")
got["reached"] = [v for _, v in txns(f"{out['remote']}/delta/metrics")]
crash("after_commit")
got["codes"] += [cli(remote, "run", "pipeline.toml", "--drain", "-q")]
got["codes"] += [cli(remote, "reconcile", "pipeline.toml", "--apply", "-q") for _ in range(2)]
for where, root in out.items():
    for t in tables:
        path = f"{root}/delta/{t}"
        df = spark.read.format("delta").load(path)
        pdf = df.drop(*drop).toPandas()
        hist = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("operation").collect()
        got[f"{where}/{t}"] = {"columns": df.columns, "txns": txns(path), "history": [r.operation for r in hist],
                               "rows": sorted(map(list, pdf[sorted(pdf.columns)].astype(str).itertuples(index=False)))}
with open(f"{here}/spark_read.json", "w") as f:
    json.dump(got, f)
"""


def _steps(txns: list) -> list[tuple[str, int]]:
    """A table's (kind of append, step) pairs, without the pipeline's random id (``lowwater-<hex>-<kind>``)."""
    return sorted((app.split("-", 2)[2], int(v)) for app, v in txns)


def test_delta_on_s3_killed_crashed_refused_and_reconciled_equals_the_local_run(spark, s3_server, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "s3"
    for root in (local, remote):
        land_jsonl(root / "landing", FILES, 300, seed=11, dead_letters=True)
    (local / "pipeline.toml").write_text(CONFIG.format(fmt="jsonl").replace("[output]\n", '[output]\nkind = "delta"\n'))
    out = _s3_pipeline(remote, s3_server, "delta")
    (remote / "pipeline.toml").write_text((remote / "pipeline.toml").read_text().replace(
        "[output]\n", '[output]\nkind = "delta"\n'))
    fs = HadoopFS(spark)

    # 1. ``lowwater run`` killed -9 at a random moment of a step after its second; meanwhile a second run refuses.
    #    The script runs the local pipeline meanwhile, and the rest once it is told the step to crash.
    env = fast_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable})
    with open(tmp_path / "script.err", "wb") as script_err:
        script = subprocess.Popen([sys.executable, "-c", SCRIPT, str(local), str(remote), ",".join(PER_RUN), *TABLES],
                                  cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=script_err,
                                  start_new_session=True)
    # It waits after its first commit until the second run has been refused, and before the drain's commit until
    # it is killed (spark/faults.py): a run whose steps outpace this process's look at its manifests (S3 requests
    # through a loaded JVM) cannot finish before the kill.
    go, never = tmp_path / "go", tmp_path / "never"
    proc = subprocess.Popen([sys.executable, "-m", "lowwater.cli", "run", "pipeline.toml", "--drain", "-q"],
                            cwd=remote, env={**env, "LOWWATER_FAULT": f"after_commit:0:wait:{go};"
                                                                      f"before_commit:{FILES}:wait:{never}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and f'"pid": {proc.pid},' not in (
                fs.read_text(f"{out}/{LOCK_NAME}") if fs.exists(f"{out}/{LOCK_NAME}") else ""):
            time.sleep(0.25)  # each look is S3 requests: moto's CPU and this JVM's, taken from the two runs
        second = run_cli_here(["run", "pipeline.toml", "--once", "-q"], remote)  # while the first one holds it
        go.touch()
        committed = []
        while time.monotonic() < deadline and len(committed) < 2 and proc.poll() is None:
            if _newest_step(fs, out) >= len(committed):
                committed.append(time.monotonic())
            time.sleep(0.2)
        delay = float(np.random.default_rng().uniform(0.0, committed[-1] - committed[0]))  # within about a step
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        text = err.decode()  # where it began and how it ended (an early exit's first lines name its cause)
        if proc.returncode != -signal.SIGKILL:  # in full on the test's stderr: pytest cuts a long assertion message
            crashes = [f"{f}:\n{f.read_text()[:3000]}" for f in sorted(remote.glob("hs_err_pid*.log"))]
            print(f"lowwater run ended {proc.returncode} before the kill; its stderr:", text, *crashes,
                  sep="\n", file=sys.stderr)
        assert proc.returncode == -signal.SIGKILL, ("finished before the kill", text[:3000], text[-2000:])
        assert second.returncode == 2, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"error: output.path: {out} is in use by another lowwater run"), lines
        assert f"host {socket.gethostname()}, pid {proc.pid}, since " in lines[0]
        killed_at = _newest_step(fs, out)
        assert 1 <= killed_at < FILES, (killed_at, delay)  # the drain did not commit

        # 2. the local run; on S3 the next step crashed before its manifest, then after it; drained; reconciled twice
        step = killed_at + 1
        (tmp_path / "step.tmp").write_text(str(step))
        (tmp_path / "step.tmp").rename(tmp_path / "step")
        script.wait(timeout=600)
    finally:
        for p in (proc, script):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=60)
    assert script.returncode == 0, (tmp_path / "script.err").read_text()[-3000:]
    got = json.loads((tmp_path / "spark_read.json").read_text())
    assert got["codes"] == [0] * 5, got["codes"]
    assert max(got["reached"]) == step  # the crashed step's append was in Delta, its manifest not

    opts = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}
    parquet = {k: pd.read_parquet(local / "out" / k) for k in KINDS}
    assert len(parquet["late"]) and len(parquet["dead_letter"]) and (parquet["results"]["kind"] == "correction").any()
    for t in TABLES:
        mine, theirs = got[f"remote/{t}"], got[f"local/{t}"]
        # Spark batch reads: the same columns and rows as the local tables
        assert mine["columns"] == theirs["columns"] and mine["rows"] == theirs["rows"], t
        assert len(mine["rows"]) > 0, t
        # each step once in each log, the same steps as one local run; DESCRIBE HISTORY as after one run
        assert max(Counter(map(tuple, mine["txns"])).values()) == 1, t
        assert _steps(mine["txns"]) == _steps(theirs["txns"]), t
        assert Counter(mine["history"]) == Counter(theirs["history"]), (t, mine["history"], theirs["history"])
        # delta-rs through its own S3 client: the same rows, the documented columns (the Parquet output's)
        s3 = DeltaTable(f"{out.replace('s3a://', 's3://')}/delta/{t}", storage_options=opts).to_pandas()
        files = DeltaTable(str(local / "out" / "delta" / t)).to_pandas()
        assert rows(s3.drop(columns=["source_file"], errors="ignore")) == rows(
            files.drop(columns=["source_file"], errors="ignore")), t
        if t in KINDS:  # as pandas reads the Parquet output, batch_id (a directory there) a long
            want = {c: str(d) for c, d in parquet[t].assign(batch_id=0).dtypes.items()}
            assert {c: str(d) for c, d in s3.dtypes.items()} == want, t
    # The local run's Delta tables equal its Parquet outputs (written by the same steps), row for row, and
    # results_current is the last emission per window, as PostgreSQL's _current view orders them.
    for kind in KINDS:
        want = parquet[kind].assign(batch_id=parquet[kind]["batch_id"].astype("int64"))
        assert rows(DeltaTable(str(local / "out" / "delta" / kind)).to_pandas()) == rows(want), kind
    res = parquet["results"].query("kind != 'retraction'").assign(
        final=lambda d: d["kind"] != "provisional", batch_id=lambda d: d["batch_id"].astype("int64"))
    last = res.sort_values(["revision", "final", "batch_id"]).groupby(
        ["key", "window_start", "window_end"], dropna=False).tail(1).drop(columns="final")
    current = DeltaTable(str(local / "out" / "delta" / CURRENT)).to_pandas()
    assert len(last) < len(parquet["results"]) and rows(current) == rows(last)
    assert {v for a, v in _steps(got["remote/metrics"]["txns"])} == set(range(FILES + 1))
    assert [a for a, _ in _steps(got["remote/results"]["txns"])].count("correction-results") == 1
    assert not fs.exists(f"{out}/{LOCK_NAME}")
