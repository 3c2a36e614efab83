"""The log a what-if replays: read, normalised as the engine does, projected to compact columns, arrival-sorted.

One ``[source]``: :func:`arrival_sorted` (the engine's ``normalise``, order
``(arrival, partition, offset)`` then the source's own order). ``[[source]]``
tables: :func:`union_sorted` reads every source with its own format, schema
and columns (``io/parse.normalise_source(named=True)``), lays them out in
one schema (``io/sources.to_layout``) and sorts the union into the order
across sources, ``(arrival_time, source, partition, offset)``, then file
order, as the engine's planner does (``spark/planner.py``).

Compact columns: ``_is_dead``, ``_event_us``, ``_key`` (a 64-bit hash of the
window's key columns), ``_batch`` (the micro-batch of ``run --once``),
``_arrival_us``, ``_psort`` (the partition the sweep sees), and for
``[[source]]`` also ``_source`` and ``_marker``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import ConfigError, PipelineConfig, SourceConfig
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.io.files import PARSE_CONF, file_path, read_batch, resolve_schema, resolve_source_schema, uri_path
from lowwater.io.parse import normalise, normalise_source
from lowwater.io.sources import to_layout, union_layout, union_payload


def with_batch(spark: SparkSession, raw: DataFrame, df: DataFrame, files_per_batch: int | None) -> DataFrame:
    """``df`` plus ``_batch``: the micro-batch ``run --once`` reads each row in.

    The engine reads ``files_per_batch`` files per micro-batch (all files in one
    when unset), in file-name order (the order Spark's file source follows when
    names sort like arrival, as a landing zone's do).
    """
    if not files_per_batch:
        return df.withColumn("_batch", F.lit(0).cast("long"))
    paths = sorted({file_path(f) for f in raw.inputFiles()})
    lookup = spark.createDataFrame([(p, i // files_per_batch) for i, p in enumerate(paths)], "_fpath string, _b long")
    key: Column = uri_path(F.col("_file"))  # both sides decoded: a name with a space or a % is one path
    joined = df.join(F.broadcast(lookup), key == F.col("_fpath"), "left")
    # A file missing from the listing (deleted meanwhile) keeps its rows: they join the first batch.
    return joined.withColumn("_batch", F.coalesce(F.col("_b"), F.lit(0).cast("long"))).drop("_fpath", "_b")


def log_marker(src: SourceConfig, compare: Mapping[str, Mapping[str, WatermarkStrategy]] | None = None) -> str | None:
    """The marker column a replay reads from ``src``: its punctuated strategy's, or a ``--compare``'s.

    Marker rows are not data in any lane of a report, so a source has one
    marker column: lanes that would read two are refused with one line.
    """
    found = {src.marker} if src.marker else set()
    found |= {lane[src.name].marker for lane in (compare or {}).values() if lane[src.name].marker}
    if len(found) > 1:
        where = "the log" if not src.named else f"source {src.name!r}"
        msg = (f"--compare: marker rows of {where} would be read from {sorted(found)}; "
               "a replay reads one marker column per source")
        raise ConfigError(msg)
    return found.pop() if found else None


def _marker_col(name: str) -> Column:
    return F.coalesce(F.col(name).cast("boolean"), F.lit(False))


def _key_hash(cfg: PipelineConfig) -> Column:
    keys = [F.col(k) for k in cfg.window.key]
    return F.xxhash64(*keys) if keys else F.lit(0).cast("long")


def _readable(cfg: PipelineConfig) -> None:
    """A Delta source's log order is its commits' (``io/delta_log.py``), which a whole-directory read loses."""
    if any(s.format == "delta" for s in cfg.sources):
        raise ConfigError('whatif: a Delta source is not supported yet (source.format = "delta")')


def arrival_sorted(spark: SparkSession, cfg: PipelineConfig, marker: str | None = None) -> DataFrame:
    """The compact projection of a single ``[source]``'s log, globally sorted in arrival order.

    ``marker``: the boolean column of punctuated strategies' marker rows (``_marker``).
    """
    _readable(cfg)
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    schema = resolve_schema(spark, cfg, None)
    raw = read_batch(spark, cfg.source, schema)
    df = normalise(raw, cfg).withColumn("_rid", F.monotonically_increasing_id())
    df = with_batch(spark, raw, df, cfg.source.max_files_per_batch)
    # The engine's order (core.judge.arrival_order): (arrival, partition, offset), then the
    # source's own order. With an arrival clock and offsets the row id breaks the (rare)
    # remaining ties, as in the engine's micro-batches, and no file path is shuffled.
    src = cfg.source
    source_order = ["_rid"] if src.arrival_time and src.offset else ["_file", "_block", "_rid"]
    order = ["_arrival_us", "_psort", "_offset", *source_order] if src.arrival_time else source_order
    compact = [F.col("_dead").isNotNull().alias("_is_dead"), "_event_us", _key_hash(cfg).alias("_key"), "_batch"]
    if marker is not None:
        if marker not in schema.fieldNames():
            raise ConfigError(f"--compare: the marker column {marker!r} is not in the log")
        compact.append(_marker_col(marker).alias("_marker"))
    return df.select(*compact, *dict.fromkeys(["_arrival_us", "_psort", *order])).orderBy(*order)


def union_sorted(
    spark: SparkSession, cfg: PipelineConfig, compare: Mapping[str, Mapping[str, WatermarkStrategy]] | None = None
) -> DataFrame:
    """The compact projection of every ``[[source]]``'s log, one union sorted in arrival order across sources.

    Each source keeps its own clipping (``_skew_us`` is not needed here: the
    sweep clips per source). Marker rows (``_marker``) come from each source's
    :func:`log_marker`. With several sources the log is one micro-batch
    (``_batch`` 0): the engine's arrival frontier judges rows in the order
    across sources whatever its micro-batches, so only ``peak_open_windows``
    depends on the cut. A single ``[[source]]`` table is cut as ``run --once`` cuts it.
    """
    _readable(cfg)
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    schemas = {s.name: resolve_source_schema(spark, cfg, s, None) for s in cfg.sources}
    layout = union_layout(union_payload(spark, schemas))
    values = tuple(cfg.window.value_columns)
    frames = []
    for src in cfg.sources:
        raw = read_batch(spark, src, schemas[src.name])
        df = normalise_source(raw, src, values, named=True)
        marker = log_marker(src, compare)
        if marker is not None and marker != src.marker:
            if marker not in schemas[src.name].fieldNames():
                raise ConfigError(f"--compare: the marker column {marker!r} is not in source {src.name!r}")
            df = df.withColumn("_marker", _marker_col(marker))
        df = to_layout(df, layout, src.name)
        if cfg.multi_source:
            df = df.withColumn("_batch", F.lit(0).cast("long"))
        else:
            df = with_batch(spark, raw, df, src.max_files_per_batch)
        frames.append(df)
    union = reduce(lambda a, b: a.unionByName(b), frames).withColumn("_rid", F.monotonically_increasing_id())
    # The planner's order: (arrival, source, partition, offset when every source has offsets), then the
    # sources' own order (file, block, row) unless arrival and offset order every row.
    offsets = all(s.offset for s in cfg.sources)
    timed = all(s.arrival_time for s in cfg.sources)
    tail = ["_rid"] if timed and offsets else ["_file", "_block", "_rid"]
    order = ["_arrival_us", "_source", "_psort", *(["_offset"] if offsets else []), *tail] if timed else tail
    compact = [
        F.col("_dead").isNotNull().alias("_is_dead"), "_event_us", _key_hash(cfg).alias("_key"), "_batch",
        F.col("_part").cast(T.StringType()).alias("_pname"), "_source",
        F.coalesce(F.col("_marker"), F.lit(False)).alias("_marker"),
    ]
    rest = [c for c in dict.fromkeys(["_arrival_us", *order]) if c != "_source"]
    return union.select(*compact, *rest).orderBy(*order)
