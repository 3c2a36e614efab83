"""The whole log as (row, window) pairs: what the batch truth is computed from, and where each row went.

The log is read and parsed by the engine's own code (``io/files.read_batch``,
``io/parse.normalise``: the same clocks, the same dead-letter rules), so a
row is a dead letter here iff it is one in the stream; dead letters are in no
result and are only counted. Each valid row gets

* ``_file`` -- its file, as Spark names it in the row's metadata (a URI); the
  checkpoint and the correction records name files by path, and ``late/`` by the
  URI the stream read: :class:`FileForms` lists, per log file, every name a row
  may carry, so nothing is parsed or joined per row,
* ``_rid`` -- a row id, when the log is persisted (sessions and ``drop``
  match rows by it: a persisted log keeps it stable); otherwise the log is
  scanned once, by the one aggregation of ``reconcile/attribution.py``,
* ``_clip_us`` / ``_clipped`` -- its event time as the stream judged it
  (SEMANTICS.md §5, ``max_future_skew``), and whether that moved it,
* ``_unread`` -- its file is not among those the stream has read (in flight):
  a set lookup of ``_file`` among the names of the files read.

Pairs (tumbling and hopping windows; sessions are built in
``reconcile/sessions.py``) come in three roles: ``truth`` -- the windows of the
event time as written (the batch truth) -- ``moved`` -- for a clipped row,
the windows of its clipped time, where the stream counted it instead -- and
``dead`` -- a dead letter, in no window (one pair, counted only).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.io.files import CORRUPT, PARSE_CONF, file_path, read_batch, resolve_schema, uri_path
from lowwater.io.footers import null_free
from lowwater.io.parse import normalise
from lowwater.reconcile.position import StreamPosition
from lowwater.runtime.session import persist_with
from lowwater.spark.aggtypes import input_expr

# A pair's role, as a small int (a grouping key on every pair: no strings to hash).
TRUTH, MOVED, DEAD = 0, 1, 2


def input_schema(spark: SparkSession, cfg: PipelineConfig) -> T.StructType:
    """The schema the stream reads the log with (kept with its checkpoint; else inferred as it would be)."""
    return resolve_schema(spark, cfg, f"{cfg.output.checkpoint.rstrip('/')}/lowwater")


def read_log(spark: SparkSession, cfg: PipelineConfig, schema: T.StructType, position: StreamPosition,
             persist: bool = True, files: bool = True) -> tuple[DataFrame, FileForms]:
    """Every row of the source log, normalised as the engine does, with clipping and ``_unread``; and its files.

    ``persist``: with ``_rid``, persisted (memory and disk), for the jobs that
    read the log several times (sessions, the ``drop`` replay): the row ids
    must not change between them. Else a plain plan, scanned once.
    ``files=False``: ``_file`` is null unless the stream left a listed file
    unread (nothing else asks which file a row came from).
    """
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    src = cfg.source
    files = files or persist
    raw = read_batch(spark, src, schema, files=files)
    listed = scanned = raw.inputFiles()
    forms = FileForms.listed(listed, position)
    if not files and not forms.all_read():  # a file in flight: "read?" is asked of each row's file name
        raw = read_batch(spark, src, schema)
        scanned = raw.inputFiles()  # listed again: a file may have landed since
    # Scanned once for the totals: order columns the footers of the scanned files prove null-free are never
    # read (io/footers.py).
    proven = null_free(scanned, [src.partition, src.arrival_time, src.offset]) if (
        not persist and src.format == "parquet") else frozenset()
    df = normalise(raw, cfg, non_null=proven)
    if persist:
        # ``_run``: this run's own plan, so that a log persisted by an earlier reconcile in this session (same
        # files, same plan: Spark matches persisted data by plan, not by file contents) never stands in for it.
        df = df.withColumn("_rid", F.monotonically_increasing_id()).withColumn("_run", F.lit(uuid.uuid4().hex))
    df = clipped(df, cfg).withColumn("_unread", forms.unread(F.col("_file")))
    if not persist:
        return df, forms
    # Uncompressed: building the compressed columnar cache of every column was the job's largest cost
    # (10 M rows: 75.8 s -> 54.3 s for the whole reconcile, docs/performance.md).
    return persist_with(df, {"spark.sql.inMemoryColumnarStorage.compressed": "false"},
                        StorageLevel.MEMORY_AND_DISK), forms


def clipped(df: DataFrame, cfg: PipelineConfig) -> DataFrame:
    """``df`` (normalised) plus ``_clipped`` and ``_clip_us``: the event time the stream judged (SEMANTICS.md §5)."""
    src = cfg.source
    skew = src.watermark.max_future_skew_us
    ev, arr = F.col("_event_us"), F.col("_arrival_us")
    moved: Column = F.lit(False)
    if skew is not None and src.arrival_time:
        moved = F.coalesce((ev - arr) > F.lit(skew), F.lit(False))
    return df.withColumn("_clipped", moved).withColumn("_clip_us", F.when(moved, arr).otherwise(ev))


@dataclass(frozen=True)
class FileForms:
    """Every name (``form``) a row's ``_file`` may carry for each listed log file, its path, and if it was read.

    Spark lists a local file as ``file:///x`` and names it ``file:/x`` in a
    row's metadata: both forms are kept. Rows are matched to files by these
    names (set lookups, a few small joins), never by parsing a URI per row.
    """

    forms: tuple[tuple[str, str, bool], ...]  # (form, path, was_read)
    read_paths: tuple[str, ...]  # every file the stream read (position.read_files), listed or not

    @classmethod
    def listed(cls, uris: list[str], position: StreamPosition) -> FileForms:
        read = set(position.read_files)
        out: dict[str, tuple[str, str, bool]] = {}
        for uri in uris:
            parts = urlsplit(uri)
            path = file_path(uri)
            for form in (uri, f"{parts.scheme}:{parts.path}" if not parts.netloc else uri):
                out[form] = (form, path, path in read)
        return cls(tuple(out.values()), tuple(sorted(read)))

    def all_read(self) -> bool:
        """The stream read every listed file."""
        return bool(self.forms) and all(r for _, _, r in self.forms)

    def paths(self) -> list[str]:
        return sorted({p for _, p, _ in self.forms})

    def by_path(self) -> dict[str, list[str]]:
        """Each listed path and the names a row of that file may carry."""
        out: dict[str, list[str]] = {}
        for f, p, _ in self.forms:
            out.setdefault(p, []).append(f)
        return out

    def unread(self, file: Column) -> Column:
        """Whether the stream has not read ``file`` (a row's ``_file``): a set lookup of the name.

        A name the listing did not give (not expected) is parsed, on that row only.
        """
        if self.all_read():  # every file of the listing was read, and a row comes from one of them
            return F.lit(False)
        read = [f for f, _, r in self.forms if r]
        unread = [f for f, _, r in self.forms if not r]
        return (F.when(file.isin(read), F.lit(False)).when(file.isin(unread), F.lit(True))
                .otherwise(~uri_path(file).isin(list(self.read_paths))))

    def frame(self, spark: SparkSession) -> DataFrame:
        """(``_fform``, ``_fpath``): to give a path named elsewhere (``late/``) every form a row may carry."""
        return spark.createDataFrame([(f, p) for f, p, _ in self.forms] or [("", "")], "_fform string, _fpath string")


def input_columns(schema: T.StructType) -> list[str]:
    """The input columns a ``late/`` row carries (the parse's own column is not one)."""
    return [f.name for f in schema.fields if f.name != CORRUPT]


def values(cfg: PipelineConfig, schema: T.StructType) -> list[Column]:
    """The value inputs as the stream folds them (``spark/aggtypes.input_expr``), named ``_v{i}``."""
    from lowwater.reconcile.kept import input_col  # by-time inputs, collections, sketches: with the arrival order

    types = {f.name: f.dataType for f in schema.fields}
    out = []
    for i, (c, of) in enumerate(cfg.window.value_inputs):
        kept = input_col(F.col(c), types[c], of)
        out.append((input_expr(F.col(c), types[c], of) if kept is None else kept).alias(f"_v{i}"))
    return out


def _window_starts(event: Column, size_us: int, slide_us: int, offset_us: int) -> list[Column]:
    """The window starts (µs) containing ``event``, one column each (tumbling: one): plain arithmetic, no lambda."""
    last = event - F.pmod(event - F.lit(offset_us), F.lit(slide_us))
    return [last - F.lit(i * slide_us) for i in range(size_us // slide_us)]


def pairs(cfg: PipelineConfig, rows: DataFrame) -> DataFrame:
    """``rows`` (with ``_dead`` and ``_v{i}``; no markers) as (row, window) pairs: ``_ws``/``_we`` in µs, ``_role``.

    ``truth`` pairs for every valid row (its event time as written); ``moved``
    pairs for clipped rows (their clipped time's windows, where the stream
    counted them); one ``dead`` pair (no window, no keys) per dead letter.
    One projection of the log (tumbling and no clipping) or one ``explode``
    of it: the moved windows are appended to the truth ones, so the log is
    read once.
    """
    w = cfg.window
    slide = w.slide_us or w.size_us
    valid = F.col("_dead").isNull()
    truth = _window_starts(F.col("_event_us"), w.size_us, slide, w.offset_us)
    keys = [F.when(valid, F.col(k)).alias(k) for k in cfg.window.key]
    rest = [c for c in rows.columns if c not in cfg.window.key]
    if len(truth) == 1 and not may_clip(cfg):  # one pair per row: a projection, no explode
        return rows.select(*keys, *rest, F.when(valid, truth[0]).alias("_ws"),
                           F.when(valid, F.lit(TRUTH)).otherwise(F.lit(DEAD)).alias("_role")).withColumn(
            "_we", F.col("_ws") + F.lit(w.size_us))

    def tagged(starts: list[Column], role: str) -> list[Column]:
        return [F.struct(s.alias("ws"), F.lit(role).alias("role")) for s in starts]

    every = F.when(~valid, F.array(F.struct(F.lit(None).cast("long").alias("ws"), F.lit(DEAD).alias("role"))))
    if may_clip(cfg):
        moved = _window_starts(F.col("_clip_us"), w.size_us, slide, w.offset_us)
        every = every.when(F.col("_clipped"), F.array(*tagged(truth, TRUTH), *tagged(moved, MOVED)))
    every = every.otherwise(F.array(*tagged(truth, TRUTH)))
    out = rows.select(*keys, *rest, F.explode(every).alias("_pair"))
    return out.select(*[c for c in out.columns if c != "_pair"], F.col("_pair.ws").alias("_ws"),
                      F.col("_pair.role").alias("_role")).withColumn("_we", F.col("_ws") + F.lit(w.size_us))


def may_clip(cfg: PipelineConfig) -> bool:
    """Whether a row's event time can be clipped (``max_future_skew`` with an arrival time)."""
    return cfg.source.watermark.max_future_skew_us is not None and bool(cfg.source.arrival_time)


def dead_pairs(rows: DataFrame, keys: list[str]) -> DataFrame:
    """One ``dead`` pair per dead letter of ``rows``, to union with pairs built from the valid rows (sessions)."""
    dead = rows.filter(F.col("_dead").isNotNull())
    return dead.select(*[F.lit(None).cast(dead.schema[k].dataType).alias(k) for k in keys],
                       *[c for c in dead.columns if c not in keys], F.lit(None).cast("long").alias("_ws"),
                       F.lit(DEAD).alias("_role"), F.lit(None).cast("long").alias("_we"))
