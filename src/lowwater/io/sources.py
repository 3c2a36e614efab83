"""Several landing directories (and Kafka topics) as one stream: the sources of a ``[[source]]`` pipeline.

Each source keeps its own file log (``<checkpoint>/lowwater/sources/<name>/``)
and its own Python streaming source, so Spark checkpoints each one's offsets
and a micro-batch takes whatever every source has (each cut on its own;
``max_files_per_batch`` per source). The query runs on the union of the
sources' position streams, each tagged with its source's name; ``admit``
reads each source's files with its own format and schema, normalises them
with its own columns (``io/parse.normalise_source``) and lays them out in
one schema (:func:`union_layout`): the window's key and value columns, every
source's other columns (null where a source lacks one) and the engine's
columns, ``_source`` among them. A Kafka source (``format = "kafka"``) streams
its records through Spark's connector (its offsets checkpointed by Spark
next to the file logs' positions) and its rows are laid out the same way.
Which rows may be judged now is the arrival
frontier's business (``core/frontier.py``), not the source's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import ConfigError, PipelineConfig
from lowwater.config.output import SOURCE_COLUMN
from lowwater.io.files import CORRUPT
from lowwater.io.headers import source_state_dir  # noqa: F401 - its home before io/headers.py
from lowwater.io.kafka import KafkaSource
from lowwater.io.landing import LandingSource, logged_ranges
from lowwater.io.parse import normalise_source
from lowwater.io.source import BUILT_IN, Admitted
from lowwater.runtime.fs import HadoopFS

# The engine's columns of a normalised row (io/parse.py), with their types in a union.
ENGINE_COLUMNS = T.StructType([
    T.StructField(CORRUPT, T.StringType()),
    T.StructField("_file", T.StringType()),
    T.StructField("_block", T.LongType()),
    T.StructField("_event_us", T.LongType()),
    T.StructField("_arrival_us", T.LongType()),
    T.StructField("_part", T.StringType()),
    T.StructField("_psort", T.StringType()),
    T.StructField("_offset", T.LongType()),
    T.StructField("_dead", T.StringType()),
    T.StructField("_marker", T.BooleanType()),
    T.StructField("_source", T.StringType()),
    T.StructField("_skew_us", T.LongType()),
])


# A Kafka record's columns in the union of the sources' streams (null on a file source's positions).
_RECORD = (("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
           ("timestamp", "timestamp"))

SOURCE = SOURCE_COLUMN  # the output column naming each row's source (late rows, dead letters)


def union_payload(spark: SparkSession, schemas: dict[str, T.StructType]) -> T.StructType:
    """``source``, then the input columns of every source (first source's order, then new columns).

    A column that two sources type differently takes the type Spark's union
    widens them to (e.g. int and long: long); one a union cannot reconcile
    stops the run at start with Spark's message. An input column named
    ``source`` was refused before (``config/pipeline.check_columns``).
    """
    frames = [spark.createDataFrame([], schema) for schema in schemas.values()]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames).schema
    return T.StructType([T.StructField(SOURCE, T.StringType()), *union.fields])


def union_layout(payload: T.StructType) -> T.StructType:
    """The schema every source's normalised rows are laid out in."""
    return T.StructType([*payload.fields, *ENGINE_COLUMNS.fields])


def to_layout(df: DataFrame, layout: T.StructType, name: str) -> DataFrame:
    """One source's normalised rows in the union's schema (``source`` = ``name``; missing columns null)."""
    have = set(df.columns)

    def column(f: T.StructField) -> Column:
        if f.name == SOURCE:
            return F.lit(name)
        return F.col(f.name) if f.name in have else F.lit(None)

    return df.select(*[column(f).cast(f.dataType).alias(f.name) for f in layout.fields])


class UnionSource:
    """The sources of a ``[[source]]`` pipeline as one :class:`~lowwater.io.source.StreamSource`."""

    def __init__(
        self, spark: SparkSession, cfg: PipelineConfig, schemas: dict[str, T.StructType], state_dir: str
    ) -> None:
        self.spark = spark
        self.cfg = cfg
        for s in cfg.sources:
            if s.format not in BUILT_IN:
                msg = (f"{s.key('format')}: {s.format!r} is a registered source kind; [[source]] tables take "
                       "landing directories and Kafka topics only (a single [source] takes it)")
                raise ConfigError(msg)
        self.values = tuple(cfg.window.value_columns)
        self.layout = union_layout(union_payload(spark, schemas))
        self.parts = {
            s.name: LandingSource(spark, s, schemas[s.name], source_state_dir(state_dir, s.name))
            for s in cfg.sources if s.kafka is None
        }
        # Kafka sources: Spark's connector streams the records themselves (io/kafka.py), not positions.
        self.topics = {s.name: KafkaSource(spark, s, schemas[s.name], "") for s in cfg.sources if s.kafka is not None}
        self.configs = {s.name: s for s in cfg.sources}
        self.offsets_dir: str | None = None  # use_offset_log

    def stream(self) -> DataFrame:
        """The union of every source's stream: ``_src``, a file log ``position`` or a Kafka record's columns."""
        frames = [src.stream().select(F.lit(name).alias("_src"), F.col("position"),
                                      *[F.lit(None).cast(t).alias(c) for c, t in _RECORD])
                  for name, src in self.parts.items()]
        frames += [src.stream().select(F.lit(name).alias("_src"), F.lit(None).cast("long").alias("position"),
                                       *[F.col(c).cast(t).alias(c) for c, t in _RECORD])
                   for name, src in self.topics.items()]
        return reduce(lambda a, b: a.union(b), frames)

    def use_offset_log(self, offsets_dir: str) -> None:
        """Read the file sources' positions from the query's offset log (``<checkpoint>/spark/offsets``)."""
        self.offsets_dir = offsets_dir.rstrip("/")

    def _logged(self) -> dict[str, list[int]] | None:
        """Each file source's positions in the running micro-batch from Spark's offset log (no Spark job).

        An entry has a line per source in :meth:`stream`'s order: the file sources, then the Kafka ones.
        None (collect them instead) when unsure.
        """
        if self.offsets_dir is None or not self.parts:
            return None
        got = logged_ranges(HadoopFS(self.spark), self.offsets_dir, len(self.parts) + len(self.topics), len(self.parts))
        return None if got is None else {name: list(range(*r)) for name, r in zip(self.parts, got, strict=True)}

    def admit(self, batch: DataFrame) -> Admitted:
        positions: dict[str, list[int]] = {name: [] for name in self.parts}
        logged = self._logged()
        if logged is not None:
            positions = logged
        elif self.parts:  # only the positions are collected; Kafka records stay on the executors
            for row in batch.filter(F.col("_src").isin(*self.parts)).select("_src", "position").collect():
                positions[row[0]].append(int(row[1]))
        frames, files, out_of_order, n_ooo = [], [], [], 0
        for name, topic in self.topics.items():
            rows = topic.rows(batch.filter(F.col("_src") == F.lit(name)))
            rows = normalise_source(rows, self.configs[name], self.values, named=True)
            frames.append(to_layout(rows, self.layout, name))
        for name, src in self.parts.items():
            got = src.admit_positions(positions[name])
            rows = normalise_source(got.rows, self.configs[name], self.values, named=True)
            frames.append(to_layout(rows, self.layout, name))
            files += [f"{name}:{f}" for f in got.files]
            out_of_order += [f"{name}:{f}" for f in got.out_of_order]
            n_ooo += got.out_of_order_rows
        rows = reduce(lambda a, b: a.unionByName(b), frames)
        return Admitted(rows, tuple(files), tuple(out_of_order), n_ooo)

    def landed(self) -> dict[str, int]:
        """Each file source's log length now: the files landed so far (io/file_backlog.py)."""
        return {name: len(src.log) for name, src in self.parts.items()}

    def empty(self) -> DataFrame:
        """No rows, in the union's schema (a step that only judges held rows)."""
        return self.spark.createDataFrame([], self.layout)

    @contextmanager
    def watching(self, poll_s: float | None) -> Iterator[None]:
        with ExitStack() as stack:
            for src in self.parts.values():
                stack.enter_context(src.watching(poll_s))
            yield
