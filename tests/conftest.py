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

    session = get_spark(
        SparkConfig(
            master="local[2]",
            app_name="lowwater-tests",
            shuffle_partitions=2,
            conf={"spark.ui.enabled": "false", "spark.sql.adaptive.coalescePartitions.enabled": "true"},
        ),
        jars=connector_jars() + s3_jars(),  # Spark's Kafka and S3A connectors: the Kafka and S3 tests share it
    )
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
