"""Which (row, window) pairs the stream judged too late: from ``late/``, or replayed from the log (``drop``).

``side_output``: ``late/`` holds each too-late (row, window) pair whole, with
its file (``source_file``) and window. For counts, sums and averages its rows
are simply taken back out of the totals (:func:`as_pairs`): nothing is
matched. With a min or max (:func:`subtractable`) it is matched to the log's pairs by a
64-bit hash of the file's name and every input column, plus the window start
(a ``late/`` row is hashed under each name a log row of its file may carry,
``log.FileForms``: the log's rows are hashed as they are, nothing parsed);
rows that are identical in every column are interchangeable, so ``n`` late
copies mark ``n`` of them (``row_number`` over the few matches only).

``drop``: nothing was written, so the verdicts are recomputed. The rows the
stream read are sorted into arrival order (the what-if replay's order,
``advisor/replay_log.py``) and streamed through ONE task that runs the
engine's own ``core.judge.judge`` -- the same ``WatermarkTracker`` that gives
every ``W(r)`` in the engine and the what-if replay, the same clipping and
the same verdicts -- chunk by chunk. Only the too-late pairs come back (row
id, window start, ``W(r)``). This pass is sequential by nature (``W(r)``
depends on every row before ``r``), like the what-if replay: it is the one
part of ``reconcile`` that does not spread over executors.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from lowwater.config import PipelineConfig
from lowwater.core.judge import judge
from lowwater.core.lateness import Lateness
from lowwater.core.tracker import WatermarkTracker
from lowwater.io.files import uri_path
from lowwater.reconcile.log import MOVED, TRUTH, FileForms, clipped
from lowwater.reconcile.log import values as value_columns

CHUNK_ROWS = 200_000
# The late tail is small next to the log: up to this many rows it is broadcast to every task instead of
# shuffling the log's (row, window) pairs to meet it (a sort-merge join of the whole log, twice).
BROADCAST_ROWS = 1_000_000
# ``late/`` up to this size on disk (about a million rows of a few columns) is matched in the log's pass through
# a table the driver gathers in one job (``_gathered``); a larger one by a shuffle join.
FEW_BYTES = 32 << 20
LATE_SCHEMA = "_rid long, _ws long, _w long"


def _row_hash(path: Column, columns: list[str]) -> Column:
    return F.xxhash64(path, *[F.col(c) for c in columns])


def size(spark: SparkSession, late_path: str) -> int:
    """The rows of ``late/`` (Parquet: counted from its footers; 0 when there is none)."""
    try:
        return spark.read.parquet(late_path).count()
    except Exception:  # noqa: BLE001 - no late/ directory: nothing was ever too late
        return 0


def row_hash(columns: list[str]) -> Column:
    """The hash a log row is matched by: its file's name (``_file``) and every input column."""
    return _row_hash(F.col("_file"), columns)


def _named(spark: SparkSession, late_path: str, forms: FileForms) -> DataFrame:
    """``late/``'s rows, once per name (``_fform``) a log row of their file may carry (a small join on the path)."""
    late = spark.read.parquet(late_path).withColumn("_fpath", uri_path(F.col("source_file")))
    return late.join(F.broadcast(forms.frame(spark)), "_fpath")


def _keyed(spark: SparkSession, late_path: str, columns: list[str], forms: FileForms) -> DataFrame:
    """``late/`` per (row hash, window start): how many copies, and the latest ``W(r)``.

    Each ``late/`` row is hashed under every name its file has in the log's
    listing (a small join on the path): a log row carries one of them.
    """
    return _named(spark, late_path, forms).select(
        _row_hash(F.col("_fform"), columns).alias("_h"),
        F.unix_micros("window_start").alias("_ws"), F.unix_micros("watermark").alias("_w"),
    ).groupBy("_h", "_ws").agg(F.count(F.lit(1)).alias("_copies"), F.max("_w").alias("_w"))


def _gathered(spark: SparkSession, late_path: str, columns: list[str], forms: FileForms) -> DataFrame | None:
    """``late/``'s (``_hw``, ``_copies``): one long key per (row hash, window) and its copies, as a local table
    (None: ``late/`` has no row).

    One job hashes ``late/`` on the executors; the driver counts the copies
    (numpy) and hands the table back as a local relation, so broadcasting it
    runs no further job.
    """
    import pandas as pd

    key = F.xxhash64(_row_hash(F.col("_fform"), columns), F.unix_micros("window_start"))
    hashes = _named(spark, late_path, forms).select(key.alias("_hw"))
    keys = hashes.toArrow().column("_hw").to_numpy()
    if len(keys) == 0:
        return None
    values, copies = np.unique(keys, return_counts=True)
    return spark.createDataFrame(pd.DataFrame({"_hw": values.astype(np.int64), "_copies": copies.astype(np.int64)}),
                                 "_hw long, _copies long")


def mark(spark: SparkSession, late_path: str, pairs: DataFrame, columns: list[str], forms: FileForms) -> DataFrame:
    """``pairs`` plus ``_late``, ``_lh``, ``_copies``: matched to ``late/``.

    A pair is late when ``late/`` holds its row and window and the stream
    judged it there (``_role`` moved, or a row it did not clip). ``late/`` is
    matched once, in the log's single pass by one long key per (row, window):
    a lookup in a broadcast table (Spark's LongHashedRelation) when ``late/``
    is at most ``FEW_BYTES`` on disk (:func:`_gathered`), else a shuffle
    join. The pairs of identical rows share a key; ``attribution.tally``
    counts only ``_copies`` of them late.
    """
    from lowwater.runtime.fs import HadoopFS

    on_disk = HadoopFS(spark).size(late_path)
    gathered = _gathered(spark, late_path, columns, forms) if 0 < on_disk <= FEW_BYTES else None
    if on_disk == 0 or (on_disk <= FEW_BYTES and gathered is None):
        return pairs.withColumn("_late", F.lit(False)).withColumn("_lh", F.lit(None).cast("long")).withColumn(
            "_copies", F.lit(None).cast("long"))
    if gathered is not None:
        keyed = F.broadcast(gathered)
    else:
        keyed = _keyed(spark, late_path, columns, forms).select(F.xxhash64("_h", "_ws").alias("_hw"), "_copies")
    pairs = pairs.withColumn("_hw", F.xxhash64(row_hash(columns), F.col("_ws")))
    joined = pairs.join(keyed, "_hw", "left")
    stream_side = (F.col("_role") == MOVED) | ~F.col("_clipped")
    late = F.col("_copies").isNotNull() & stream_side
    return (joined.withColumn("_late", late).withColumn("_lh", F.when(late, F.col("_hw")))
            .withColumn("_copies", F.when(late, F.col("_copies"))).drop("_hw"))


def subtractable(cfg: PipelineConfig) -> bool:
    """Whether every aggregate can take the too-late pairs back out of a total (:func:`as_pairs`): no min, no max.

    A count, a sum or an average (a sum over a count) of the rows the stream
    counted is the total over the rows it read minus the ``late/`` rows; a
    minimum is not (the late row may have been the minimum), so a pipeline
    with a min or a max matches each log row to ``late/`` (:func:`mark`).
    """
    return all(a.func not in ("min", "max") for a in cfg.window.aggregations)


def as_pairs(spark: SparkSession, late_path: str, cfg: PipelineConfig, schema: T.StructType,
             forms: FileForms) -> DataFrame | None:
    """``late/``'s rows as the (row, window) pairs they stand for, marked ``_neg`` (None: ``late/`` is empty).

    No log row is matched: each ``late/`` row is one too-late pair, whole
    (its keys, window, values and file), so ``attribution.per_window`` takes
    it out of the expected stream value and puts it in its cause. Its role
    is the pair's: ``moved`` when the row's event time was clipped (the stream
    judged it at the clipped time), else ``truth``. A ``late/`` row the log
    does not hold (a copy slipped into ``late/``, a row edited in it) then
    makes its window unexplained, as a row the stream counted twice would.
    """
    from lowwater.config.output import LATE_COLUMNS
    from lowwater.io.parse import normalise
    from lowwater.io.sink import side_schema
    from lowwater.runtime.fs import HadoopFS

    if HadoopFS(spark).size(late_path) == 0:
        return None
    # The schema the engine wrote late/ with (the fingerprint check proved the input schema the same): no job
    # to infer it from a footer.
    late = clipped(normalise(spark.read.schema(side_schema(schema, LATE_COLUMNS)).parquet(late_path), cfg), cfg)
    keys = [F.col(k) for k in cfg.window.key]
    return late.select(
        *keys, F.unix_micros("window_start").alias("_ws"), F.unix_micros("window_end").alias("_we"),
        F.when(F.col("_clipped"), F.lit(MOVED)).otherwise(F.lit(TRUTH)).alias("_role"),
        F.col("source_file").alias("_file"), "_clipped", forms.unread(F.col("source_file")).alias("_unread"),
        *value_columns(cfg, schema), F.lit(None).cast("string").alias("_dead"), F.lit(True).alias("_late"),
        F.lit(True).alias("_neg"))


def from_side_output(spark: SparkSession, late_path: str, pairs: DataFrame, columns: list[str],
                     broadcast: bool, forms: FileForms, latest: bool = False) -> DataFrame:
    """(``_rid``, ``_ws``, ``_w``) of the pairs ``late/`` holds; ``pairs`` are the stream's (row, window) pairs.

    ``latest``: of identical rows the last in the file are the late copies (``W(r)`` only rises along arrival
    order; identical rows differ in their place in the file alone), for aggregates where which copy was late
    matters (``kept.py``); else the copies are interchangeable and the first are taken.
    """
    keyed = _keyed(spark, late_path, columns, forms)
    mine = pairs.select("_rid", "_ws", row_hash(columns).alias("_h"), *(["_block"] if latest else []))
    matched = mine.join(F.broadcast(keyed) if broadcast else keyed, ["_h", "_ws"])
    order = [F.col("_block").desc_nulls_last(), F.col("_rid").desc()] if latest else [F.col("_rid")]
    rank = F.row_number().over(Window.partitionBy("_h", "_ws").orderBy(*order))
    return matched.withColumn("_n", rank).filter(F.col("_n") <= F.col("_copies")).select("_rid", "_ws", "_w")


def _replay_fn(cfg: PipelineConfig, arrival: bool, marker: bool):  # noqa: ANN202
    assigner, grace = cfg.window.assigner(), cfg.window.allowed_lateness_us

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tracker = WatermarkTracker(cfg.watermark)
        pending: list[pa.RecordBatch] = []

        def flush() -> pa.RecordBatch:
            t = pa.Table.from_batches(pending).combine_chunks()
            marks = t.column("_marker").to_numpy(zero_copy_only=False) if marker else None
            j = judge(tracker, assigner, grace, t.column("_psort").to_numpy(zero_copy_only=False).astype(str),
                      t.column("_event_us").to_numpy(), t.column("_arrival_us").to_numpy() if arrival else None,
                      markers=marks)
            rid = t.column("_rid").to_numpy()
            if j.data is not None:
                rid = rid[j.data]
            late = j.verdict == Lateness.TOO_LATE
            rows = j.pairs.row[late]
            return pa.RecordBatch.from_arrays(
                [pa.array(rid[rows]), pa.array(np.asarray(j.pairs.start[late], dtype=np.int64)),
                 pa.array(j.watermark_us[rows])], names=["_rid", "_ws", "_w"])

        size = 0
        for b in batches:
            pending.append(b)
            size += b.num_rows
            if size >= CHUNK_ROWS:
                yield flush()
                pending, size = [], 0
        if pending:
            yield flush()

    return replay


def replayed(cfg: PipelineConfig, log: DataFrame) -> DataFrame:
    """(``_rid``, ``_ws``, ``_w``) of the too-late pairs among the rows the stream read, by replaying ``W(r)``."""
    src = cfg.source
    read = log.filter(F.col("_dead").isNull() & ~F.col("_unread"))
    source_order = ["_rid"] if src.arrival_time and src.offset else ["_file", "_block", "_rid"]
    order = ["_arrival_us", "_psort", "_offset", *source_order] if src.arrival_time else source_order
    marker = bool(src.marker)
    cols = ["_rid", "_psort", "_event_us", "_arrival_us", *(["_marker"] if marker else [])]
    compact = read.select(*dict.fromkeys([*cols, *order])).orderBy(*order).select(*cols)
    return compact.coalesce(1).mapInArrow(_replay_fn(cfg, bool(src.arrival_time), marker), LATE_SCHEMA)
