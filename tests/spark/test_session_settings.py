"""``runtime/session``: a job's own Spark settings (the session's values back after it); a new session's settings."""

from __future__ import annotations

import pytest

from lowwater.config import SparkConfig
from lowwater.runtime.session import session_conf, settings_in_force

pytestmark = pytest.mark.spark

SET = "spark.sql.codegen.aggregate.map.twolevel.enabled"  # has a default
UNSET = "spark.sql.adaptive.coalescePartitions.minPartitionNum"  # has none: get() is None when unset


def test_settings_are_in_force_inside_and_the_sessions_own_are_back_after_even_on_error(spark):
    spark.conf.set(SET, "true")
    spark.conf.unset(UNSET)
    with pytest.raises(ZeroDivisionError), settings_in_force(spark, {SET: "false", UNSET: "2"}):
        assert (spark.conf.get(SET), spark.conf.get(UNSET)) == ("false", "2")
        _ = 1 / 0
    assert spark.conf.get(SET) == "true"
    assert spark.conf.get(UNSET, None) is None  # unset again, not set to a value it never had


def test_a_users_driver_java_options_come_after_lowwaters_log_configuration_not_in_its_place(spark):
    opts = "-XX:+UseSerialGC -Dlog4j2.configurationFile=file:/mine.properties"
    conf = session_conf(SparkConfig(master="local[1]", conf={"spark.driver.extraJavaOptions": opts,
                                                              "spark.jars": "a.jar"}), jars=["kafka.jar"])
    ours, theirs = conf["spark.driver.extraJavaOptions"].split(" ", 1)
    assert ours.startswith("-Dlog4j2.configurationFile=file:") and ours.endswith("/log4j2.properties")
    assert theirs == opts  # later on the command line: the user's log configuration, if any, wins
    assert conf["spark.jars"] == "a.jar,kafka.jar" and conf["spark.master"] == "local[1]"
    assert session_conf(SparkConfig())["spark.driver.extraJavaOptions"] == ours  # nothing of the user's: ours alone
    # The tests' own session started this way: lowwater's log configuration is on its driver (after Spark's flags).
    assert spark.sparkContext.getConf().get("spark.driver.extraJavaOptions").endswith(" " + ours)


def test_a_jvm_gone_under_the_run_is_named_by_its_exit_code_or_signal(monkeypatch):
    """What the CLI says instead of py4j's ``ConnectionRefusedError`` (no session needed: stand-in gateways)."""
    import signal
    import subprocess
    import sys
    from types import SimpleNamespace

    from pyspark import SparkContext

    from lowwater.runtime.session import jvm_ended

    def gateway(proc):  # noqa: ANN001, ANN202
        monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=proc))

    lost = RuntimeError("An error occurred while calling o1.run")  # as py4j chains a lost connection
    lost.__cause__ = ConnectionRefusedError(111, "Connection refused")
    exited = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(50)"])
    gateway(exited)
    assert jvm_ended(lost) == (f"Spark's JVM (pid {exited.pid}) exited with code 50: an uncaught error in one of its "
                           "threads, a task's fatal error included")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gateway(running)
        assert jvm_ended(ValueError("not a lost connection")) is None  # at once: no wait for a running JVM
        running.send_signal(signal.SIGKILL)
        assert jvm_ended(lost) == f"Spark's JVM (pid {running.pid}) was killed by SIGKILL"
    finally:
        running.kill()
        running.wait()
    gateway(None)  # the session was not started by this process (no proc)
    assert jvm_ended() is None
