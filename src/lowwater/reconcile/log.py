"""The whole log as (row, window) pairs: what the batch truth is computed from, and where each row went.

The log is read and parsed by the engine's own code (``io/files.read_batch``,
``spark/parse.normalise``: the same clocks, the same dead-letter rules), so a
row is a dead letter here iff it is one in the stream; dead letters are in no
result and are only counted. Each valid row gets

* ``_rid`` -- a row id (the log is persisted, so it is stable),
* ``_clip_us`` / ``_clipped`` -- its event time as the stream judged it
  (SEMANTICS.md §5, ``max_future_skew``), and whether that moved it,
* ``_unread`` -- its file is not among those the stream has read (in flight).

Pairs (tumbling and hopping windows; sessions are built in
``reconcile/sessions.py``) come in two roles: ``truth`` -- the windows of the
event time as written (the batch truth) -- and ``moved`` -- for a clipped row,
the windows of its clipped time, where the stream counted it instead.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.io.files import CORRUPT, PARSE_CONF, read_batch, resolve_schema
from lowwater.reconcile.position import StreamPosition
from lowwater.spark.aggtypes import value_cast
from lowwater.spark.parse import normalise

# The path part of a file URI (``file:/x``, ``file:///x`` -> ``/x``), as ``advisor/replay_log.py`` reads it.
URI_PATH = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?(/.*)$"
TRUTH, MOVED = "truth", "moved"


def input_schema(spark: SparkSession, cfg: PipelineConfig) -> T.StructType:
    """The schema the stream reads the log with (kept with its checkpoint; else inferred as it would be)."""
    return resolve_schema(spark, cfg, f"{cfg.output.checkpoint.rstrip('/')}/lowwater")


def read_log(spark: SparkSession, cfg: PipelineConfig, schema: T.StructType, position: StreamPosition) -> DataFrame:
    """Every row of the source log, normalised as the engine does, with ``_rid``, clipping and ``_unread``.

    Persisted (memory and disk): every later frame reads it, and the row ids
    must not change between them.
    """
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    src = cfg.source
    raw = read_batch(spark, src, schema)
    df = normalise(raw, cfg).withColumn("_rid", F.monotonically_increasing_id())
    skew = src.watermark.max_future_skew_us
    ev, arr = F.col("_event_us"), F.col("_arrival_us")
    moved: Column = F.lit(False)
    if skew is not None and src.arrival_time:
        moved = F.coalesce((ev - arr) > F.lit(skew), F.lit(False))
    read = spark.createDataFrame([(p,) for p in position.read_files], "_fpath string")
    path = F.regexp_extract(F.col("_file"), URI_PATH, 2)
    df = (
        df.withColumn("_clipped", moved)
        .withColumn("_clip_us", F.when(moved, arr).otherwise(ev))
        .join(F.broadcast(read.withColumn("_was_read", F.lit(True))), path == F.col("_fpath"), "left")
        .withColumn("_unread", F.col("_was_read").isNull())
        .drop("_fpath", "_was_read")
    )
    # Uncompressed: building the compressed columnar cache of every column was the job's largest cost
    # (10 M rows: 75.8 s -> 54.3 s for the whole reconcile, docs/performance.md). Read when the cache is defined.
    key = "spark.sql.inMemoryColumnarStorage.compressed"
    before = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        return df.persist(StorageLevel.MEMORY_AND_DISK)
    finally:
        spark.conf.set(key, before)


def valid(log: DataFrame) -> DataFrame:
    """The rows with a valid event time (not dead letters, not punctuation markers)."""
    return log.filter(F.col("_dead").isNull() & ~F.coalesce(F.col("_marker"), F.lit(False)))


def input_columns(schema: T.StructType) -> list[str]:
    """The input columns a ``late/`` row carries (the parse's own column is not one)."""
    return [f.name for f in schema.fields if f.name != CORRUPT]


def values(cfg: PipelineConfig, schema: T.StructType) -> list[Column]:
    """The value columns as the stream folds them (``spark/aggtypes.value_cast``), named ``_v{i}``."""
    types = {f.name: f.dataType for f in schema.fields}
    out = []
    for i, c in enumerate(cfg.window.value_columns):
        dt = types[c]
        col = F.col(c).cast("string").try_cast("double") if isinstance(dt, T.StringType) else F.col(c)
        out.append(col.cast(value_cast(dt)).alias(f"_v{i}"))
    return out


def _windows(event: Column, size_us: int, slide_us: int, offset_us: int) -> Column:
    """An array of the window starts (µs) containing ``event``: tumbling when ``slide == size``."""
    last = event - F.pmod(event - F.lit(offset_us), F.lit(slide_us))
    k = size_us // slide_us
    return F.transform(F.sequence(F.lit(0), F.lit(k - 1)), lambda i: last - i.cast("long") * F.lit(slide_us))


def pairs(cfg: PipelineConfig, rows: DataFrame) -> DataFrame:
    """``rows`` (valid, with ``_v{i}``) as (row, window) pairs: ``_ws``/``_we`` in µs and ``_role``.

    ``truth`` pairs for every row (its event time as written); ``moved``
    pairs for clipped rows (their clipped time's windows, where the stream counted them).
    """
    w = cfg.window
    slide = w.slide_us or w.size_us
    truth = rows.select("*", F.lit(TRUTH).alias("_role"),
                        F.explode(_windows(F.col("_event_us"), w.size_us, slide, w.offset_us)).alias("_ws"))
    moved = rows.filter("_clipped").select(
        "*", F.lit(MOVED).alias("_role"),
        F.explode(_windows(F.col("_clip_us"), w.size_us, slide, w.offset_us)).alias("_ws"))
    return truth.unionByName(moved).withColumn("_we", F.col("_ws") + F.lit(w.size_us))
