"""One reconcile run, as ``lowwater reconcile`` and ``lw.reconcile`` both do it: checks, the lock, the session.

The steps around the job (``job.py``) that both front doors need in the same
order: what reconcile covers and the input's columns are checked before Spark
starts; ``apply`` holds the pipeline's lock (no run may write the outputs
meanwhile; a running one makes it refuse in one line), first on the local
paths, then through Hadoop's FileSystem once the session exists; the session
gets Delta's jars when ``apply`` writes Delta tables, and S3A's for ``s3a://``
paths. The caller says how a session starts (the CLI turns a failure into one
line; the API reuses the active session).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lowwater.config import ConfigError, PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lowwater.reconcile.job import Reconciliation


def instant_us(option: str, value: Any) -> int | None:  # noqa: ANN401 - text, a number or a datetime
    """An ISO 8601 instant (UTC unless it says otherwise), epoch seconds or a ``datetime``, as µs."""
    if value is None:
        return None
    import pandas as pd

    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return round(float(value) * 1_000_000)
        if isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit():
            return round(float(value) * 1_000_000)
        ts = pd.Timestamp(value)
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
        return ts.value // 1000
    except (ValueError, TypeError):
        msg = f"{option} {value!r}: expected an ISO 8601 time (e.g. 2026-01-01T09:00:00Z) or epoch seconds"
        raise ConfigError(msg) from None


def check(cfg: PipelineConfig) -> None:
    """What reconcile covers, and the input's columns: one line before the JVM starts."""
    from lowwater.io.headers import check_before_spark
    from lowwater.reconcile.job import check_supported

    check_supported(cfg)
    check_before_spark(cfg)


@contextmanager
def reconciled(
    cfg: PipelineConfig, from_us: int | None, to_us: int | None, apply: bool,
    start_spark: Callable[[list[str], dict[str, str]], SparkSession],
) -> Iterator[Reconciliation]:
    """Reconcile ``cfg`` (``reconcile/`` written; with ``apply`` the corrections too, counted in the summary's
    ``corrections``) and yield the result while the lock, if any, is still held."""
    held = None
    if apply:
        from lowwater.io.lock import hold

        held = hold(cfg)
    try:
        from lowwater.io.delta import delta_session
        from lowwater.io.s3 import s3_session

        jars, conf = delta_session(cfg) if apply else ([], {})  # apply writes the Delta tables too
        s3_jars, s3_conf = s3_session(cfg)  # s3a:// outputs: Hadoop's S3A connector and [spark.s3]
        spark = start_spark(jars + s3_jars, {**conf, **s3_conf})
        from lowwater.io.s3 import configure
        from lowwater.reconcile.job import reconcile

        configure(spark, cfg)  # [spark.s3] on a session that was already running too
        if held is not None:
            from lowwater.io.lock import hold
            from lowwater.runtime.fs import HadoopFS

            held.release()
            held = hold(cfg, remote=HadoopFS(spark))
        result = reconcile(spark, cfg, from_us, to_us)
        if apply:
            from lowwater.reconcile.apply import apply_corrections

            result.summary["corrections"] = apply_corrections(spark, cfg, result)
        yield result
    finally:
        if held is not None:
            held.release()
