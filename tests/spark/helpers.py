"""Small helpers to compare engine outputs with hand-written tables."""

from __future__ import annotations

import pandas as pd

# JVM flags for the short-lived ``lowwater`` processes the tests start: the C1 compiler only and the serial
# collector. Such a process lives for a few micro-batches of tiny data, where C2's compiler threads and a
# parallel collector only compete for the CPUs (on a loaded 2-CPU machine one run took 40-58 s with them
# instead of 86-97 s). How Spark computes is the same either way. SPARK_SUBMIT_OPTS reaches the driver JVM
# that PySpark's spark-submit starts, and prints nothing (JDK_JAVA_OPTIONS would print a note on stderr).
# The code cache as a default JVM's (C1 only would reserve 48 MB): a Delta-on-S3 run filled that mid-run ("CodeCache
# is full. Compiler has been disabled."), the rest of it interpreted -- slower, and deeper stacks for the same calls.
FAST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"


def fast_jvm(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a test's ``lowwater`` process, with :data:`FAST_JVM_OPTS` added to ``SPARK_SUBMIT_OPTS``."""
    opts = " ".join(x for x in (env.get("SPARK_SUBMIT_OPTS", ""), FAST_JVM_OPTS) if x)
    return {**env, "SPARK_SUBMIT_OPTS": opts}


def secs(ts) -> float:  # noqa: ANN001
    """A UTC timestamp from the outputs as seconds since the epoch."""
    return pd.Timestamp(ts).value / 1e9


def emitted(outcome, *cols: str) -> list[tuple]:  # noqa: ANN001
    """Results as (key, start s, end s, count, <cols>, kind, revision), sorted."""
    r = outcome.results
    if r.empty:
        return []
    out = []
    for row in r.itertuples(index=False):
        d = row._asdict()
        out.append((
            d.get("key"), secs(d["window_start"]), secs(d["window_end"]), d["count"],
            *(d[c] for c in cols), d["kind"], d["revision"],
        ))
    return sorted(out, key=lambda t: tuple((x is None, x) for x in t))


def late_rows(outcome) -> list[tuple]:  # noqa: ANN001
    """Too-late rows as (partition, event_time, window start s, window end s, watermark s), sorted."""
    late = outcome.late
    if late.empty:
        return []
    return sorted(
        (str(r.partition), r.event_time, secs(r.window_start), secs(r.window_end), secs(r.watermark))
        for r in late.itertuples(index=False)
    )


def run_cli_here(args: list[str], cwd, env: dict[str, str] | None = None):  # noqa: ANN001, ANN201
    """``lowwater ARGS`` in this process, on the tests' SparkSession (``get_spark`` returns the active one).

    Returns a :class:`subprocess.CompletedProcess` like ``test_cli.run_cli``. For
    tests whose subject is not the process itself (start-up, signals, crashes):
    a separate process costs a JVM start (~10-20 s) each. The CLI's signal
    handlers and logger levels are put back afterwards, and the output locks the
    command took are given back, as its process would at exit (``io/lock.py``).
    """
    import logging
    import os
    import signal
    import subprocess

    from typer.testing import CliRunner

    from lowwater.cli import app
    from lowwater.io import lock

    held = set(lock._HELD)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    names = ("lowwater", "py4j", "DataFrameQueryContextLogger", "SQLQueryContextLogger")
    levels = {n: logging.getLogger(n).level for n in names}
    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    finally:
        os.chdir(before)
        for s, h in handlers.items():
            signal.signal(s, h)
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        for k in set(lock._HELD) - held:  # what lock._release_all does at the exit of a process
            lock._HELD[k].count = 1
            lock._release(k)
    return subprocess.CompletedProcess(["lowwater", *args], result.exit_code, result.stdout, result.stderr)
