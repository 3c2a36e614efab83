"""Running a :class:`~lowwater.api.pipeline.Pipeline`: the user's DataFrame as the engine's source, a query handle.

The seam is the engine's stream source (``io/source.StreamSource``): the
landing directory and a Kafka topic each give the query a streaming DataFrame
and turn each micro-batch into input rows; :class:`DataFrameSource` does the
same for a DataFrame the user built (``spark.readStream.format("kafka")`` and
their own ``from_json``, a rate source, Delta, ...). The engine then runs
exactly as for a TOML pipeline: ``foreachBatch``, one step per Spark batch,
its manifest keyed by Spark's batch id, so a batch Spark replays after a
crash recomputes the same step (SEMANTICS.md §8). The user's columns are
normalised like a file's (``spark/parse.normalise``); the order within a
batch is ``(arrival, partition, offset)``, then the batch's own row order.

A Kafka DataFrame with the record's columns in their roles (``api/stream.kafka_roles``)
runs as ``format = "kafka"`` does: its source gets the reader's settings from
the DataFrame's plan (``io/kafka.reader_settings``), each row its
``topic-partition`` and offset as its source order, so the engine's Kafka
rules apply unchanged (lanes of the arrival frontier, caught-up partitions,
held rows: ``core/frontier.py``, ``io/kafka_logs.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lowwater.api.foreach import ForeachBatchSink
from lowwater.api.stream import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC, kafka_roles
from lowwater.config import PipelineConfig, check_columns, check_source_path
from lowwater.config.watermark import check_strategy
from lowwater.io.source import Admitted

if TYPE_CHECKING:
    from lowwater.api.pipeline import Pipeline
    from lowwater.spark.engine import Engine


__all__ = ["LowwaterQuery"]  # what a user holds (the API reference's page); the rest is Pipeline.start's


def _ordered(df: DataFrame, kafka: bool = False) -> DataFrame:
    """A DataFrame's rows with the source-order columns of a file's: no file (null ``source_file``), one block.

    ``kafka``: a Kafka record's, as ``io/kafka.KafkaSource.rows`` has them: ``topic-partition``, its offset.
    """
    if kafka:
        return df.select("*", F.concat_ws("-", F.col(KAFKA_TOPIC), F.col(KAFKA_PARTITION).cast("string")).alias(
            "_file"), F.col(KAFKA_OFFSET).cast("long").alias("_block"))
    return df.select("*", F.lit(None).cast("string").alias("_file"), F.lit(0).cast("long").alias("_block"))


def kafka_readers(cfg: PipelineConfig, frames: dict[str, DataFrame]) -> PipelineConfig:
    """``cfg`` with each Kafka DataFrame's source holding its reader's settings (the engine's sign of Kafka)."""
    from lowwater.io.kafka import reader_settings

    sources = []
    for s in cfg.sources:
        df = frames.get(s.name)
        settings = reader_settings(df) if df is not None and kafka_roles(s, df.columns) else None
        if settings is not None:  # several topics: topic-partitions, also the declared ones (ADR 0043)
            s = replace(s, kafka=settings, topic_column=KAFKA_TOPIC if settings.several_topics else None)
            check_strategy(s, s.watermark, s.watermark_key)
        sources.append(s)
    return replace(cfg, sources=tuple(sources))


class DataFrameSource:
    """A user's streaming DataFrame as a :class:`~lowwater.io.source.StreamSource`."""

    def __init__(self, df: DataFrame, kafka: bool = False) -> None:
        self.df = df
        self.kafka = kafka
        self.schema = df.schema  # the input columns: late rows and dead letters carry them
        self.layout = StructType([*df.schema.fields, StructField("_file", StringType()),
                                  StructField("_block", LongType())])  # what admit gives

    def stream(self) -> DataFrame:
        return self.df

    def admit(self, batch: DataFrame) -> Admitted:
        return Admitted(_ordered(batch, self.kafka))

    @contextmanager
    def watching(self, poll_s: float | None) -> Iterator[None]:  # noqa: ARG002 - the user's source polls itself
        yield


class DataFrameUnion(DataFrameSource):
    """Several named DataFrames (``lw.stream(...).union(...)``) as one stream, as ``io/sources.UnionSource`` lays
    out ``[[source]]`` tables: each normalised with its own columns, in one schema, tagged with its name.

    The projections run on the streaming DataFrames (``stream``), so a micro-batch arrives laid out.
    """

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, frames: dict[str, DataFrame]) -> None:
        from lowwater.io.parse import normalise_source
        from lowwater.io.sources import to_layout, union_layout, union_payload

        self.schemas = {s.name: frames[s.name].schema for s in cfg.sources}  # in the configuration's order
        layout = union_layout(union_payload(spark, self.schemas))
        values = tuple(cfg.window.value_columns)
        parts = [to_layout(normalise_source(_ordered(frames[s.name], s.kafka is not None), s, values, named=True),
                           layout, s.name) for s in cfg.sources]
        super().__init__(reduce(lambda a, b: a.unionByName(b), parts))

    def admit(self, batch: DataFrame) -> Admitted:
        return Admitted(batch)


def start(pipeline: Pipeline, once: bool, drain: bool, after_drain: bool, spark: Any) -> LowwaterQuery:  # noqa: ANN401
    """Check everything, build the engine (it refuses a checkpoint of another pipeline), start the query."""
    from lowwater.spark.engine import Engine

    cfg = pipeline.config
    source: DataFrameSource | None = None
    frames = pipeline.frames(cfg)
    if frames:
        cfg = kafka_readers(cfg, frames)
        if len(frames) != len(cfg.sources):
            msg = "stream(df): a DataFrame beside file or Kafka sources is not supported yet (hand each in as one)"
            raise ValueError(msg)
        check_columns(cfg, {n: {f.name: f.dataType.simpleString() for f in df.schema.fields}
                            for n, df in frames.items()})
        spark = next(iter(frames.values())).sparkSession
        source = (DataFrameUnion(spark, cfg, frames) if cfg.named_sources
                  else DataFrameSource(frames[cfg.source.name], cfg.source.kafka is not None))
    else:
        for s in cfg.sources:
            check_source_path(s, cfg.base_dir)
        spark = spark or _session(cfg)
    from lowwater.io.s3 import configure
    from lowwater.observe.hub import Observers

    configure(spark, cfg)  # [spark.s3] on a session started elsewhere too, as `lowwater run` does

    # [observe] exporters and [alerts] as `lowwater run` has them (the engine only calls what it is handed).
    engine = Engine(cfg, spark, after_drain=after_drain, source=source, observers=Observers(cfg))
    # The callbacks come last: the Parquet output (first) has written the step's frames they read.
    engine.sinks.sinks.extend(ForeachBatchSink(engine.outputs, fn) for fn in pipeline.callbacks)
    return LowwaterQuery(engine, once, drain)


def _session(cfg: PipelineConfig) -> SparkSession:
    """The session a file or Kafka pipeline runs on: the active one (a user's cluster: its jars are its own,
    e.g. ``spark.jars.packages``), else one built from ``[spark]`` with the Kafka, Delta and S3A jars it needs."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from lowwater.io.delta import delta_session
    from lowwater.io.kafka import jars_for
    from lowwater.io.s3 import s3_session
    from lowwater.runtime.session import get_spark

    delta_jars, delta_conf = delta_session(cfg)
    s3_jars, s3_conf = s3_session(cfg)  # s3a:// paths (lw.delta("s3a://..."), ...): as `lowwater run` has them
    return get_spark(cfg.spark, jars=jars_for(cfg) + delta_jars + s3_jars, conf={**delta_conf, **s3_conf})


class LowwaterQuery:
    """A running pipeline, shaped like Spark's ``StreamingQuery`` (snake_case, and Spark's camelCase names).

    ``last_progress`` is lowwater's metrics row of the last committed step
    (``low_watermark``, ``watermark_lag_s``, ``holding_partition``,
    ``on_time``, ``late_updates``, ``too_late``, ``dead_letter``, ...) with
    ``step`` and the running ``totals``.
    """

    def __init__(self, engine: Engine, once: bool, drain: bool) -> None:
        self.engine = engine
        """The engine running the pipeline."""
        self.recent_progress: list[dict[str, Any]] = []
        """The last 100 steps' progress (:attr:`last_progress` is the last)."""
        self._error: BaseException | None = None
        self.manifest = None
        """The last manifest committed, once the query has ended (its ``totals``, ``step``)."""
        engine.observers.hooks.append(self._on_step)
        self._thread = threading.Thread(target=self._run, args=(once, drain), name="lowwater-query", daemon=True)
        self._thread.start()

    def _run(self, once: bool, drain: bool) -> None:
        try:
            self.manifest = self.engine.run(once=once, drain=drain)
        except BaseException as e:  # noqa: BLE001 - raised to the caller by await_termination
            self._error = e

    def _on_step(self, step: int, row: Any, totals: Any, alerts: Any) -> None:  # noqa: ANN401, ARG002
        self.recent_progress = [*self.recent_progress[-99:], {"step": step, **dict(row), "totals": dict(totals)}]

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The last committed step's metrics row with ``step`` and the running ``totals`` (``None`` before one)."""
        return self.recent_progress[-1] if self.recent_progress else None

    @property
    def is_active(self) -> bool:
        """Whether the query is still running."""
        return self._thread.is_alive()

    @property
    def status(self) -> dict[str, Any]:
        """Spark's status (``message``, ``isDataAvailable``, ``isTriggerActive``) and the last committed step."""
        q = self.engine.query
        status = dict(q.status) if q is not None and self.is_active else {
            "message": "Stopped" if not self.is_active else "Initializing", "isDataAvailable": False,
            "isTriggerActive": False}
        last = self.last_progress
        return {**status, "step": -1 if last is None else last["step"]}

    @property
    def id(self) -> str | None:  # noqa: A003 - StreamingQuery's name
        """Spark's query id (``None`` before the query started)."""
        q = self.engine.query
        return None if q is None else str(q.id)

    def exception(self) -> BaseException | None:
        """The failure that ended the query, if any."""
        return self._error

    def await_termination(self, timeout: float | None = None) -> bool | None:
        """Wait for the query to end (``once``/``drain``, :meth:`stop`, or a failure, which is raised here).

        Ctrl-C while waiting asks the query to stop after its current step (as ``lowwater run`` does).
        """
        try:
            self._thread.join(timeout)
        except KeyboardInterrupt:
            self.engine.request_stop()
            raise
        if self._error is not None:
            raise self._error
        return None if timeout is None else not self._thread.is_alive()

    def process_all_available(self) -> None:
        """Block until every row available now has been processed and committed."""
        while self.engine.query is None and self._thread.is_alive():
            time.sleep(0.05)
        q = self.engine.query
        if q is not None and self._thread.is_alive():
            try:
                q.processAllAvailable()
            except Exception:
                if self._error is None:
                    raise
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop after the current step (it commits; nothing new starts), and wait for the query to end."""
        self.engine.request_stop()
        self._thread.join()

    @property
    def summary(self) -> dict[str, Any]:
        """The accounting totals (SEMANTICS.md §6) of what the checkpoint processed."""
        return self.engine.summary(self.engine.store.latest())

    # Spark's own names, so code written for a StreamingQuery reads the same.
    awaitTermination = await_termination  # noqa: N815
    processAllAvailable = process_all_available  # noqa: N815

    @property
    def lastProgress(self) -> dict[str, Any] | None:  # noqa: N802
        """Spark's name for :attr:`last_progress`."""
        return self.last_progress

    @property
    def recentProgress(self) -> list[dict[str, Any]]:  # noqa: N802
        """Spark's name for :attr:`recent_progress`."""
        return self.recent_progress

    @property
    def isActive(self) -> bool:  # noqa: N802
        """Spark's name for :attr:`is_active`."""
        return self.is_active
