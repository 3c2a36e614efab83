"""Build (or reuse) the SparkSession a pipeline runs on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

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
}


def get_spark(cfg: SparkConfig | None = None) -> SparkSession:
    """Return the active session or start one from ``cfg`` (quiet logs, UTC)."""
    cfg = cfg or SparkConfig()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.master(cfg.master).appName(cfg.app_name)
    conf = dict(DEFAULT_CONF)
    log4j = Path(__file__).with_name("log4j2.properties")
    conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
    conf["spark.sql.shuffle.partitions"] = str(cfg.shuffle_partitions)
    conf.update(cfg.conf)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
