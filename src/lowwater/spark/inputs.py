"""A pipeline's sources as the engine sees them: one union, whatever their kinds (one source: a union of one).

Everything the step needs of its input is asked here, the same way for every
pipeline: each source's schema, the layout its rows arrive in, their lanes of
the arrival frontier (``core/frontier.Lanes``), where rows held behind it are
kept (``spark/held.py``), which lanes are caught up at a step, and the stream
the query runs on. Each answer comes from what the sources' kinds declare
(``io/source.SourceKind``: a landing directory, a Kafka topic, a registered
kind); the engine never asks which kind it has.

A ``[source]`` table is a union of one whose rows keep their own layout (no
``source`` column in the outputs); ``[[source]]`` tables are laid out as one
schema (``io/sources.union_layout``), tagged with their source's name.
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.config.source import DATAFRAME
from lowwater.core.frontier import FrontierState, lane_label
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.io.files import CORRUPT, resolve_source_schema
from lowwater.io.parse import normalise, normalise_source, unit_matters
from lowwater.io.source import CaughtUp, StreamSource, lanes_of, open_source, source_kind
from lowwater.io.sources import UnionSource, source_state_dir, to_layout, union_layout, union_payload
from lowwater.runtime.columns import memo, select_built
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.jobs import Background
from lowwater.spark.fused_write import Output, writable
from lowwater.spark.held import CARRIED, HeldRows
from lowwater.spark.ready import judged_rows, lane_column
from lowwater.spark.state import Manifest
from lowwater.time import format_ts

log = logging.getLogger("lowwater")


class Inputs:
    """The sources of one pipeline (``given``: a stream handed in, bringing its own ``schema``/``schemas``)."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, lw_dir: str, given: StreamSource | None) -> None:
        self.spark, self.cfg, self.lw_dir, self.given = spark, cfg, lw_dir, given
        wants = [s for s in cfg.sources if s.format == DATAFRAME]
        if given is None and wants:
            msg = f"{wants[0].key('format')}: \"dataframe\" needs the DataFrame (lw.stream(df, ...))"
            raise ConfigError(msg)
        if given is not None:  # a handed-in source's own schema(s) (api/running.py)
            self.schemas = dict(given.schemas) if cfg.named_sources else {cfg.source.name: given.schema}
        else:
            self.schemas = {s.name: resolve_source_schema(spark, cfg, s, self._state_dir(s)) for s in cfg.sources}
        self.unit = {s.name: unit_matters(self.schemas[s.name][s.event_time].dataType) for s in cfg.sources}
        if cfg.named_sources:  # each source its own schema, laid out as one (io/sources.py)
            self.schema = union_payload(spark, self.schemas)
            self.layout: StructType | None = union_layout(self.schema)
            self.schema_text: str | dict[str, str] = {n: sch.simpleString() for n, sch in self.schemas.items()}
        else:
            self.schema = self.schemas[cfg.source.name]
            self.layout = getattr(given, "layout", None) if given is not None else (
                source_kind(cfg.source).layout(self.schema))
            self.schema_text = self.schema.simpleString()
        self.lanes = lanes_of(cfg)
        # Rows wait behind the arrival frontier when more than one lane can deliver (core/frontier.py).
        self.held: HeldRows | None = None
        self.lane: Column | None = None
        if self.lanes.hold:
            self.held = HeldRows(spark, f"{lw_dir}/held", self.parse(self.empty()).schema)
            self.lane = lane_column(self.lanes.by_partition, self.lanes.single)
        # Read once and laid out whole (a Kafka batch), not re-read by each job of the step.
        self.read_whole = any(source_kind(s).read_whole for s in cfg.sources)
        kinds = list(dict.fromkeys(source_kind(s) for s in cfg.sources))
        self.checks: list[CaughtUp] = [c for k in kinds if (c := k.caught_up(spark, cfg)) is not None]

    def _state_dir(self, src: SourceConfig) -> str:
        """Where a source keeps its state (its inferred schema, its file log) under the checkpoint."""
        return source_state_dir(self.lw_dir, src.name) if self.cfg.named_sources else self.lw_dir

    @property
    def strategies(self) -> WatermarkStrategy | dict[str, WatermarkStrategy]:
        """What the watermark tracker takes: one strategy per named source, else the only source's."""
        return self.cfg.strategies if self.cfg.named_sources else self.cfg.watermark

    def open(self) -> StreamSource:
        """The stream the query runs on: the handed-in one, the union of ``[[source]]`` tables, or the source."""
        if self.given is not None:
            return self.given
        if self.cfg.named_sources:
            return UnionSource(self.spark, self.cfg, self.schemas, self.lw_dir)
        return open_source(self.spark, self.cfg.source, self.schema, self.lw_dir)

    def empty(self) -> DataFrame:
        """No rows, in the layout the sources' rows arrive in (a step that only judges held rows)."""
        assert self.layout is not None, "a source that holds rows declares its layout (io/source.SourceKind)"
        return self.spark.createDataFrame([], self.layout)

    def parse(self, df: DataFrame) -> DataFrame:
        """A micro-batch's rows with the engine's columns (``[[source]]`` rows arrive normalised and laid out)."""
        return df if self.cfg.named_sources else normalise(df, self.cfg)

    def normalised(self, name: str, raw: DataFrame) -> DataFrame:
        """A named source's raw rows, normalised and laid out like every source's (tests land files this way)."""
        src = next(s for s in self.cfg.sources if s.name == name)
        assert self.layout is not None
        return to_layout(normalise_source(raw, src, tuple(self.cfg.window.value_columns), named=True),
                         self.layout, name)

    def carried(self, parsed: DataFrame, prev: Manifest) -> DataFrame:
        """The step's rows behind those ``prev`` held, which come first (flagged ``_carried``)."""
        if self.held is None:
            return parsed
        parsed = parsed.withColumn(CARRIED, F.lit(False))
        carried = self.held.read(prev)
        return parsed if carried is None else parsed.unionByName(carried)

    def judged(self, parsed: DataFrame, bounds: dict[str, tuple[int, str] | None] | None, markers: bool) -> DataFrame:
        """The rows the operator sees: those the frontier lets through (and dead letters), no marker row."""
        return judged_rows(parsed, bounds, markers=markers, lane=self.lane)

    def hold(
        self, parsed: DataFrame, bounds: dict[str, tuple[int, str] | None] | None, step: int, count: int,
    ) -> Background | None:
        """Start writing the ``count`` rows the frontier holds as version ``step`` (None: none held)."""
        if self.held is None or not count:
            return None
        held, rows = self.held, judged_rows(parsed, bounds, held=True, lane=self.lane)
        return Background(lambda: held.write(step, rows, count))

    def held_output(
        self, fs: HadoopFS, parsed: DataFrame, bounds: dict[str, tuple[int, str] | None] | None, step: int,
        count: int,
    ) -> tuple[Output, dict] | None:
        """The ``count`` held rows as one output of a fused write (``spark/fused_write.py``) and their manifest
        entry; None: none held, or a store the fused writer cannot write (then :meth:`hold`)."""
        if self.held is None or not count or not writable(fs, self.held.path(step)):
            return None
        rows = judged_rows(parsed, bounds, held=True, lane=self.lane)
        return Output(self.held.frame(rows), self.held.path(step)), self.held.entry(step, count)

    def collect_garbage(self, live: set[int]) -> None:
        """Delete the held rows no live manifest names."""
        if self.held is not None:
            self.held.collect_garbage(live)

    def dead(self, parsed: DataFrame) -> DataFrame:
        """The dead letters among ``parsed``: the input's columns, its raw text, the reason and the file."""
        corrupt = CORRUPT in parsed.columns
        dead = parsed.filter(memo(("is_dead",), lambda: F.col("_dead").isNotNull()))
        return select_built(dead, ("dead_letters", self.schema.json(), corrupt), lambda: [  # the same every step
            *[F.col(c) for c in self.schema.fieldNames()],
            (F.col(CORRUPT) if corrupt else F.lit(None).cast("string")).alias("raw"),
            F.col("_dead").alias("reason"), F.col("_file").alias("source_file"),
        ])

    def caught_up(self, spark_batch: int, stream: StreamSource | None) -> dict[str, bool] | None:
        """Which lanes have nothing landed and unread at this step, as each kind tells (None: nothing known)."""
        logs: dict[str, bool] = {}
        for check in self.checks:
            logs.update(check.logs(spark_batch, stream))
        return logs or None

    def check_resumable(self, fs: HadoopFS, spark_checkpoint: str) -> None:
        """Refuse, in one line, a checkpoint whose offsets a source's kind cannot resume (``io/landing.py``)."""
        for kind in dict.fromkeys(source_kind(s) for s in self.cfg.sources):
            kind.check_resumable(fs, spark_checkpoint, self.cfg)

    def warn_held(self, manifest: Manifest, logs: dict[str, bool] | None) -> None:
        """At the end of a run: name the lane that holds rows behind the frontier, and when they will be judged."""
        frontier = self.lanes.frontier()
        assert frontier is not None
        state = FrontierState.from_json(manifest.frontier)
        holder = frontier.holder(state, logs) or "-"
        who = f"source {holder!r}" if holder == lane_label(holder) else f"Kafka partition {lane_label(holder)}"
        log.warning(
            "%d row(s) held behind the arrival frontier: %s has delivered nothing after %s; they are "
            "judged when it does, when it goes idle (its watermark's idle_timeout, once none of its files is "
            "left unread; a Kafka partition: when it is caught up), or at --drain",
            manifest.held_rows, who, format_ts(frontier.frontier_us(state, logs)),
        )

    def close(self) -> None:
        for check in getattr(self, "checks", ()):
            check.close()
