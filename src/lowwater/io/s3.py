"""``s3a://`` paths: Hadoop's S3A connector on ``spark.jars`` and the ``[spark.s3]`` settings.

A pipeline whose source, output or checkpoint is ``s3a://`` needs Hadoop's
``hadoop-aws`` at the Hadoop version of the PySpark wheel (3.5.0) and the AWS
SDK v2 modules it uses: ``jars/pom.xml``'s ``s3`` profile fetches them into
``.jars/s3`` (13 MB, instead of the SDK bundle's 600 MB); a user's own
``spark.jars``/``spark.jars.packages`` naming ``hadoop-aws`` wins. ``[spark.s3]``
(``config/runtime.py``) becomes ``spark.hadoop.fs.s3a.*`` settings when a
session starts, and is also set on a session that is already running
(:func:`configure`), so ``lowwater run`` inside a notebook's session reaches
the same store. What lowwater does differently on an object store -- no
renames, a conditional-create lock -- is in ``spark/fs.py`` and ``io/lock.py``
(docs/adr/0029).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from lowwater.config import ConfigError, PipelineConfig
from lowwater.runtime import jars

ARTIFACT = "org.apache.hadoop:hadoop-aws:3.5.0"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# Where scripts/bootstrap.sh puts S3A's jars (jars/pom.xml, profile "s3"): .jars/<JARS>; $JARS_ENV overrides.
JARS, JARS_ENV = "s3", "LOWWATER_S3_JARS"


def jars_dir() -> Path:
    """Where S3A's jars are looked for: ``LOWWATER_S3_JARS``, else ``.jars/s3``."""
    return jars.folder(JARS_ENV, JARS)


def s3_jars() -> list[str]:
    """The local jars of Hadoop's S3A connector (empty when they were not fetched)."""
    return jars.local_jars(JARS_ENV, JARS)


def s3a_paths(cfg: PipelineConfig) -> list[str]:
    """The pipeline's ``s3a://`` paths: sources, output, checkpoint."""
    paths = [s.path for s in cfg.sources if s.kafka is None] + [cfg.output.path, cfg.output.checkpoint]
    return [p for p in paths if urlsplit(p).scheme == "s3a"]


def s3_session(cfg: PipelineConfig) -> tuple[list[str], dict[str, str]]:
    """What a new session needs for ``cfg``'s ``s3a://`` paths: S3A's jars and ``spark.hadoop.fs.s3a.*``.

    Nothing when no path is ``s3a://``. A missing connector stops the run in
    one line before Spark starts.
    """
    if not s3a_paths(cfg):
        return [], {}
    conf = {f"spark.hadoop.{k}": v for k, v in cfg.spark.s3.hadoop_conf().items()}
    own = " ".join(cfg.spark.conf.get(k, "") for k in ("spark.jars.packages", "spark.jars"))
    if "hadoop-aws" in own:
        return [], conf
    found = s3_jars()
    if not any(Path(j).name.startswith("hadoop-aws") for j in found):
        raise ConfigError(jars.missing("output.path", "s3a:// paths need Hadoop's S3A connector", JARS_ENV, JARS,
                                       ARTIFACT))
    return found, conf


def configure(spark: SparkSession, cfg: PipelineConfig) -> None:
    """Set ``[spark.s3]`` on a running session's Hadoop configuration (a session started elsewhere).

    Hadoop caches one FileSystem per bucket: settings changed after a bucket
    was first used reach it only in a new session.
    """
    if not s3a_paths(cfg):
        return
    if not spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(S3A_CLASS):  # noqa: SLF001
        msg = (f"output.path: s3a:// paths need Hadoop's S3A connector ({ARTIFACT}) on the session's "
               "spark.jars, and this SparkSession was started without it")
        raise ConfigError(msg)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    for k, v in cfg.spark.s3.hadoop_conf().items():
        conf.set(k, v)
