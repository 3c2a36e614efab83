"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    """A small local[2] SparkSession shared by every Spark test (started once)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lowwater.config import SparkConfig
    from lowwater.spark.session import get_spark

    session = get_spark(
        SparkConfig(
            master="local[2]",
            app_name="lowwater-tests",
            shuffle_partitions=2,
            conf={"spark.ui.enabled": "false", "spark.sql.adaptive.coalescePartitions.enabled": "true"},
        )
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
