"""Build (or reuse) the SparkSession a pipeline runs on.

Spark's log level is set by ``log4j2.properties`` (errors only). With
``quiet`` the JVM's own stderr also passes through a filter that drops the
start-up lines no user acts on: the JVM's incubator-module warning and
Spark's "Setting default log level ..." banner (printed for every PySpark
driver, whatever the log configuration). Everything else still reaches stderr.

The JVM is started with SIGTERM ignored, as PySpark already starts it with
SIGINT ignored: a SIGTERM sent to the whole process group (a service
manager's or a supervisor's stop) then reaches the Python driver, which
decides how the run ends, and not the JVM under it (docs/adr/0023). The JVM
still ends with the driver: it exits when its stdin (a pipe from the driver)
closes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from lowwater.config import SparkConfig

DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.adaptive.enabled": "true",
    # PySpark 4 captures the Python call site of every DataFrame call (a JVM round trip
    # each): ~20 ms of driver time per micro-batch step, for error messages only.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark names a whole-stage class after its stage's id, which differs from query to query, so a
    # step's identical code missed Spark's code cache and was compiled again (~10 ms a class, ~15 a
    # step). One class name lets a step reuse the last step's compiled code (ADR 0050).
    "spark.sql.codegen.useIdInClassName": "false",
    # Spark keeps 100 compiled classes (in 4 segments of Guava's cache, evicting early); a step of a
    # pipeline generates ~20-60, so identical code was compiled again within a run.
    "spark.sql.codegen.cache.maxEntries": "2000",
}

# JVM start-up lines dropped under ``quiet`` (matched as substrings).
BANNER = (b"Using incubator modules", b"Setting default log level", b"To adjust logging level use")


def _forward(stream, banner: tuple[bytes, ...]) -> None:  # noqa: ANN001 - a binary pipe
    for line in iter(stream.readline, b""):
        if not any(b in line for b in banner):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def _shielded_popen(*args, **kwargs) -> subprocess.Popen:  # noqa: ANN002, ANN003 - Popen's own arguments
    """``subprocess.Popen`` for the JVM gateway: the child ignores SIGTERM besides what PySpark sets (SIGINT).

    An ignored signal stays ignored across ``exec`` (bash's ``spark-submit``,
    then ``java``), and the JVM installs no shutdown handler for it.
    """
    inner = kwargs.get("preexec_fn")

    def preexec() -> None:
        if inner is not None:
            inner()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    return subprocess.Popen(*args, **{**kwargs, "preexec_fn": preexec})


def _launch_gateway(conf: dict[str, str], quiet: bool) -> None:
    """Start the JVM gateway (SIGTERM ignored; with ``quiet`` its stderr filtered) before the builder would."""
    from pyspark import SparkConf, SparkContext, java_gateway

    if SparkContext._gateway is not None or os.name != "posix":
        return
    spark_conf = SparkConf(loadDefaults=False)
    for k, v in conf.items():
        spark_conf.set(k, v)
    popen = java_gateway.Popen
    java_gateway.Popen = _shielded_popen  # PySpark sets its own preexec_fn; this wraps it
    try:
        gateway = java_gateway.launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE} if quiet else {})
    finally:
        java_gateway.Popen = popen
    if quiet:
        threading.Thread(target=_forward, args=(gateway.proc.stderr, BANNER), daemon=True, name="jvm-stderr").start()
    SparkContext._ensure_initialized(gateway=gateway)


# Exit codes of Spark's JVM that name their cause (Spark's SparkExitCode).
JVM_EXITS = {50: "an uncaught error in one of its threads, a task's fatal error included",
             52: "out of memory (spark.driver.memory)"}


def jvm_ended(error: BaseException | None = None) -> str | None:
    """How the JVM this process started ended, if it has (None: running, or not started here).

    A JVM gone under a run surfaces in Python as py4j's ``ConnectionRefusedError``,
    which does not say why; the exit code or signal does (Spark exits 50 after a
    task's fatal error, 52 when out of memory; SIGKILL is another process's, e.g.
    the kernel's out-of-memory killer). Its own last error lines are on stderr.
    After a lost connection (``error``'s chain) it waits up to 2 s for the exit.
    """
    from py4j.protocol import Py4JNetworkError
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    lost, e = False, error
    for _ in range(10):  # the error's chain, as far as py4j wraps it
        if e is None or lost:
            break
        lost, e = isinstance(e, (ConnectionError, Py4JNetworkError)), e.__cause__ or e.__context__
    try:
        code = proc.wait(timeout=2) if lost else proc.poll()
    except subprocess.TimeoutExpired:
        return None
    if code is None:
        return None
    if code < 0:
        return f"Spark's JVM (pid {proc.pid}) was killed by {signal.Signals(-code).name}"
    why = JVM_EXITS.get(code)
    return f"Spark's JVM (pid {proc.pid}) exited with code {code}" + (f": {why}" if why else "")


def get_spark(
    cfg: SparkConfig | None = None, quiet: bool = False, jars: list[str] | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Return the active session or start one from ``cfg`` (quiet logs, UTC).

    ``jars`` (local paths, e.g. Spark's Kafka connector: ``io/kafka.jars_for``)
    are added to ``spark.jars`` when the session starts; ``conf`` (e.g. Delta's
    extension: ``io/delta.delta_session``) is set before the user's ``[spark] conf``.
    """
    cfg = cfg or SparkConfig()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = session_conf(cfg, jars, conf)
    _launch_gateway(settings, quiet)
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_conf(
    cfg: SparkConfig, jars: list[str] | None = None, extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The settings a new session starts with: lowwater's defaults, then the user's ``[spark] conf``.

    The user's ``spark.driver.extraJavaOptions`` is appended to lowwater's log
    configuration, not put in its place (which silently dropped lowwater's
    errors-only logging); a ``-Dlog4j2.configurationFile`` of the user's comes
    later on the command line and wins.
    """
    conf = dict(DEFAULT_CONF)
    log4j = Path(__file__).with_name("log4j2.properties")
    conf["spark.sql.shuffle.partitions"] = str(cfg.shuffle_partitions)
    conf.update(extra or {})
    conf.update(cfg.conf)
    user = cfg.conf.get("spark.driver.extraJavaOptions")
    conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}" + (f" {user}" if user else "")
    if jars:
        conf["spark.jars"] = ",".join([j for j in conf.get("spark.jars", "").split(",") if j] + list(jars))
    conf["spark.master"] = cfg.master
    conf["spark.app.name"] = cfg.app_name
    return conf


@contextmanager
def settings_in_force(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` on the session for the ``with`` block (a job that plans and runs inside it), the session's
    own values restored after, whatever happens."""
    conf = spark.conf
    before = {k: conf.get(k) for k in settings}
    for k, v in settings.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:  # a setting with no default that the session did not have
                conf.unset(k)
            else:
                conf.set(k, v)


def persist_with(df: DataFrame, settings: dict[str, str], level: StorageLevel | None = None) -> DataFrame:
    """``df.persist(level)`` with ``settings`` in force while Spark defines the cache (it reads them then), the
    session's own values restored after."""
    with settings_in_force(df.sparkSession, settings):
        return df.persist(level) if level is not None else df.persist()
