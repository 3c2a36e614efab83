"""The sink protocol: where a step's outputs go, and the list of sinks the engine drives.

A step writes its frames (``results``, ``late``, ``dead_letter``) and its
metrics row to every sink, then asks every sink to **deliver** the step, and
only then commits its manifest: a sink that needs to be exactly-once
(PostgreSQL: stage, then one transaction with the batch id) does its
transaction in ``deliver``, a sink that is idempotent by itself (Parquet:
``batch_id=<step>`` overwritten) has nothing to deliver. A crash anywhere
before the manifest replays the step through every sink.

Every sink is self-contained: it writes the frame it is given and reads
nothing another sink wrote, so sinks may be listed in any order, or alone.
When several sinks take a frame, :class:`Sinks` persists it while they write
it, so it is computed once and every sink receives the same rows.

Adding a sink is one module implementing :class:`Sink` and one
:func:`register_sink` line: ``[output] kind = "<kind>"`` then puts it beside
the engine's Parquet output (:func:`output_sinks`); PostgreSQL and Delta are
registered that way below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from lowwater.config import PipelineConfig
from lowwater.config.output import DEAD_LETTER_COLUMNS, LATE_COLUMNS, OUTPUT_KINDS, register_output_kind


def side_schema(inputs: StructType, own: tuple[str, ...]) -> StructType:
    """``late/``'s or ``dead_letter/``'s schema: the input columns plus their own (``LATE_COLUMNS``...)."""
    times = ("watermark", "window_start", "window_end")
    return StructType([*inputs.fields, *[StructField(c, TimestampType() if c in times else StringType())
                                         for c in own]])


class Sink(Protocol):
    """One destination of a pipeline's outputs (``io/outputs.py``, ``io/postgres.py``)."""

    def prepare(self, kind: str, empty: DataFrame | pa.Table, spark_schema: StructType | None) -> None:
        """Make ``kind`` exist with its columns before any row arrives (``empty`` is a zero-row frame of them)."""

    def begin_step(self, step: int) -> None:
        """A step (or the drain) starts: forget what an earlier, uncommitted attempt of it left."""

    def write(self, kind: str, step: int, frame: DataFrame) -> None:
        """The step's rows of ``kind`` (replacing an earlier attempt's)."""

    def clear(self, kind: str, step: int) -> None:
        """The step has no rows of ``kind``: remove what an earlier attempt may have left."""

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        """A handful of driver-side rows of ``kind`` (the metrics row)."""

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> Any:  # noqa: ANN401
        """Make the step's writes visible, exactly once; called before the manifest commits."""


class Sinks:
    """The sinks of a pipeline, driven together in order (the engine puts its Parquet output first)."""

    def __init__(self, spark: SparkSession, sinks: Iterable[Sink]) -> None:
        self.spark = spark
        self.sinks = list(sinks)

    def prepare_all(
        self, inputs: StructType, results: DataFrame, metrics: pa.Schema, metrics_spark: StructType,
    ) -> None:
        """Every output exists: late rows and dead letters are the input columns plus their own."""
        empty = self.spark.createDataFrame
        frames: list[tuple[str, DataFrame | pa.Table, StructType | None]] = [
            ("results", results, None),
            ("late", empty([], side_schema(inputs, LATE_COLUMNS)), None),
            ("dead_letter", empty([], side_schema(inputs, DEAD_LETTER_COLUMNS)), None),
            ("metrics", metrics.empty_table(), metrics_spark),
        ]
        # The first sink's (Parquet's) empty tables are independent Spark jobs: side by side (runtime/jobs.py),
        # ~0.5 s less per new output path; the later sinks follow it, kind by kind, as for every write.
        from lowwater.runtime.jobs import side_by_side

        first = self.sinks[0]
        side_by_side(*[lambda k=kind, f=frame, s=schema: first.prepare(k, f, s) for kind, frame, schema in frames])
        for kind, frame, schema in frames:
            for s in self.sinks[1:]:
                s.prepare(kind, frame, schema)

    @property
    def single(self) -> bool:
        """Only the Parquet output: a write may carry an :class:`~pyspark.sql.Observation` of its frame."""
        return len(self.sinks) == 1

    def begin_step(self, step: int) -> None:
        for s in self.sinks:
            s.begin_step(step)

    def write(self, kind: str, step: int, frame: DataFrame) -> None:
        """Every sink writes ``frame``; several sinks read it from one persisted computation."""
        if len(self.sinks) == 1:
            self.sinks[0].write(kind, step, frame)
            return
        shared = not frame.is_cached  # a frame its producer persisted stays its producer's to unpersist
        if shared:
            frame.persist()
        try:
            for s in self.sinks:
                s.write(kind, step, frame)
        finally:
            if shared:
                frame.unpersist()

    def clear(self, kind: str, step: int) -> None:
        for s in self.sinks:
            s.clear(kind, step)

    def write_rows(self, kind: str, step: int, table: pa.Table, spark_schema: StructType) -> None:
        for s in self.sinks:
            s.write_rows(kind, step, table, spark_schema)

    def write_or_clear(self, kind: str, step: int, frame: DataFrame | None) -> None:
        """:meth:`write` the frame, or :meth:`clear` ``kind`` when the step has none."""
        if frame is not None:
            self.write(kind, step, frame)
        else:
            self.clear(kind, step)

    def deliver(self, step: int, spark_batch: int, metrics: dict[str, Any]) -> None:
        for s in self.sinks:
            s.deliver(step, spark_batch, metrics)


@dataclass(frozen=True)
class SinkContext:
    """What a sink kind is built from: the pipeline, the session and the checkpoint's lowwater directory."""

    cfg: PipelineConfig
    spark: SparkSession
    lw_dir: str  # <checkpoint>/lowwater: a sink's own state (Delta's app id)


SinkFactory = Callable[[SinkContext], Sink]
SINK_KINDS: dict[str, SinkFactory] = {}  # [output] kind -> its sink (beside Parquet); "parquet": none


def register_sink(kind: str, factory: SinkFactory) -> None:
    """Make ``[output] kind = "<kind>"`` put ``factory``'s sink beside the Parquet output."""
    if kind in SINK_KINDS or kind == "parquet":
        msg = f"output kind {kind!r} is registered already"
        raise ValueError(msg)
    register_output_kind(kind)
    SINK_KINDS[kind] = factory


def unregister_sink(kind: str) -> None:
    """Undo :func:`register_sink` (a test's toy sink)."""
    del SINK_KINDS[kind]
    OUTPUT_KINDS.remove(kind)


def output_sinks(cfg: PipelineConfig, spark: SparkSession, lw_dir: str) -> list[Sink]:
    """The sinks ``[output] kind`` adds to the engine's Parquet output (none for ``parquet``)."""
    factory = SINK_KINDS.get(cfg.output.kind)
    return [] if factory is None else [factory(SinkContext(cfg, spark, lw_dir))]


def _postgres(ctx: SinkContext) -> Sink:
    from lowwater.io.postgres import PostgresSink

    # The output path names the pipeline, so several pipelines can share one database.
    assert ctx.cfg.output.postgres is not None  # config/output.py: required with kind = "postgres"
    return PostgresSink(ctx.cfg.output.postgres, ctx.cfg.output.path, ctx.cfg.window.key)


def _delta(ctx: SinkContext) -> Sink:
    from lowwater.io.delta import DeltaSink, app_id
    from lowwater.runtime.fs import HadoopFS

    # Delta tables under <output>/delta/<kind>, beside Parquet (ADR 0026).
    return DeltaSink(ctx.spark, ctx.cfg.output.path, ctx.cfg.window.key, app_id(HadoopFS(ctx.spark), ctx.lw_dir))


register_sink("postgres", _postgres)
register_sink("delta", _delta)
