"""Shared fixtures: one local SparkSession and (started on first use) one Kafka broker and one S3-compatible
server for the whole test session."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    """A small local[2] SparkSession shared by every Spark test (started once)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lowwater.config import SparkConfig
    from lowwater.io.kafka import connector_jars
    from lowwater.io.s3 import s3_jars
    from lowwater.runtime.session import get_spark
    from tests.spark.helpers import fast_jvm

    # The driver JVM with the C1 compiler only and the serial collector, as the tests' ``lowwater`` processes
    # (helpers.FAST_JVM_OPTS): its work is thousands of small jobs over tiny data, where C2's compiler threads
    # and a parallel collector compete for the CPUs with the work (the same test files took 23-31 % less CPU
    # with them on the loaded 2-CPU machine). How Spark computes is the same. Given through SPARK_SUBMIT_OPTS
    # for the launch only, so the session's spark.driver.extraJavaOptions stay lowwater's own
    # (test_session_settings) and no later process inherits it.
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = fast_jvm(dict(os.environ))["SPARK_SUBMIT_OPTS"]
    try:
        session = get_spark(
            SparkConfig(
                master="local[2]",
                app_name="lowwater-tests",
                shuffle_partitions=2,
                conf={"spark.ui.enabled": "false", "spark.sql.adaptive.coalescePartitions.enabled": "true"},
            ),
            jars=connector_jars() + s3_jars(),  # Spark's Kafka and S3A connectors: the Kafka and S3 tests share it
        )
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server on a free port (FAILS, never skips, if PostgreSQL is missing).

    Its directory is not under pytest's tmp root: other pytest sessions reset that to
    0700, which would lock the ``postgres`` user out of its own data directory.
    """
    import shutil
    import tempfile
    from pathlib import Path

    from lowwater.testing.postgres import TestServer

    root = Path(tempfile.mkdtemp(prefix="lowwater-pg-"))
    server = TestServer(root)
    try:
        server.init()
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_broker():
    """A single-node KRaft broker on free 127.0.0.1 ports (FAILS, never skips, if its jars are missing)."""
    import shutil
    import tempfile
    from pathlib import Path

    from lowwater.testing.kafka import TestBroker

    root = Path(tempfile.mkdtemp(prefix="lowwater-kafka-"))
    broker = TestBroker(root)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(spark):
    """moto's S3 server on a free 127.0.0.1 port with one bucket, and the shared session set to reach it (FAILS,
    never skips, if moto is missing)."""
    import shutil
    import tempfile
    from pathlib import Path

    from lowwater.testing.s3 import TestS3Server

    root = Path(tempfile.mkdtemp(prefix="lowwater-s3-"))
    server = TestS3Server(root / "moto.log")
    try:
        server.start()
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in server.hadoop_conf().items():
            conf.set(k, v)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
