"""Two ``lowwater run`` on one output path, as a user starts them: the second refuses.

One JVM start in all: the run that finds the checkpoint drained. The first run is
the CLI in this process (on the shared session; it holds the lock with this
process's pid, and its first step waits until the second run has answered); the
second, concurrent run is a process that refuses before Spark starts; the solo
reference runs in this process too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from lowwater.config import load_config
from lowwater.io.lock import LOCK_NAME
from lowwater.spark.engine import Engine
from tests.spark.helpers import run_cli_here
from tests.spark.test_cli import land, run_cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def table(path) -> list[tuple]:  # noqa: ANN001
    df = pd.read_parquet(path)
    if "source_file" in df.columns:  # the two runs read copies of one landing zone
        df["source_file"] = df["source_file"].str.rsplit("/", n=1).str[-1]
    return sorted(tuple(str(v) for v in row) for row in df[sorted(df.columns)].itertuples(index=False))


def test_second_run_refuses_naming_the_holder_and_the_first_equals_a_solo_run(spark, tmp_path, monkeypatch,
                                                                              caplog):
    work, solo = tmp_path / "work", tmp_path / "solo"
    work.mkdir()
    land(work, "jsonl")
    shutil.copytree(work, solo)
    # A lock left by a killed run: taken over, with a log line.
    (work / "out").mkdir()
    stale = {"host": socket.gethostname(), "pid": dead_pid(), "since": "2026-01-01T00:00:00Z", "token": "old",
             "proc_start": None}
    (work / "out" / LOCK_NAME).write_text(json.dumps(stale))

    # The second run, started once the first holds the lock; the first's first step waits for its answer.
    lock = work / "out" / LOCK_NAME
    answered = threading.Event()
    answer: dict = {}

    def second_run() -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if lock.exists() and json.loads(lock.read_text() or "{}").get("pid") == os.getpid():
                    break
                time.sleep(0.05)
            else:
                return
            t0 = time.monotonic()
            answer["second"] = run_cli(["run", "pipeline.toml", "--once", "-q"], work, timeout=120)
            answer["refused_in"] = time.monotonic() - t0
        finally:
            answered.set()

    step = Engine.process_batch

    def process_batch_after_the_answer(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        answered.wait(180)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "process_batch", process_batch_after_the_answer)
    other = threading.Thread(target=second_run, daemon=True)
    other.start()
    with caplog.at_level(logging.WARNING, logger="lowwater"):
        first = run_cli_here(["run", "pipeline.toml", "--once", "--drain", "-q"], work)
    other.join(180)
    monkeypatch.undo()
    assert "second" in answer, "the first run never took the lock"
    second, refused_in = answer["second"], answer["refused_in"]
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: output.path:"), second.stderr
    assert f"host {socket.gethostname()}, pid {os.getpid()}, since " in lines[0]
    assert refused_in < 30  # before Spark starts (a JVM start alone takes 10-20 s here)

    assert first.returncode == 0, first.stderr[-3000:]
    taken = [r.getMessage() for r in caplog.records if "taking over the lock" in r.getMessage()]
    assert len(taken) == 1 and f"pid {stale['pid']}" in taken[0] and "is not running" in taken[0]
    assert not (work / "out" / LOCK_NAME).exists()  # released at the end

    engine = Engine(load_config(solo / "pipeline.toml"), spark)
    engine.run(drain=True)
    for kind in ("results", "late", "dead_letter"):
        if (solo / "out" / kind).exists() or (work / "out" / kind).exists():
            assert table(work / "out" / kind) == table(solo / "out" / kind), kind
    got = json.loads((work / "out" / "summary.json").read_text())
    want = json.loads((solo / "out" / "summary.json").read_text())
    assert got == want and got["balanced"] and got["rows"] == 8

    # The checkpoint is drained: a later file is refused, in one line, and stays unprocessed.
    later = pd.DataFrame([(0, 4, 40_000, 40_100, "a", 9.0)],
                         columns=["partition", "offset", "event_time", "arrival_time", "key", "amount"])
    f = work / "landing" / "part-009.jsonl"
    later.to_json(f, orient="records", lines=True)
    os.utime(f, (1_700_000_009, 1_700_000_009))
    refused = run_cli(["run", "pipeline.toml", "--once", "-q"], work)
    assert refused.returncode == 2, refused.stderr[-3000:]
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "was drained" in errors[0] and "--after-drain" in errors[0], refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr and "ERROR" not in refused.stderr, refused.stderr[-3000:]
    assert json.loads((work / "out" / "summary.json").read_text()) == got
