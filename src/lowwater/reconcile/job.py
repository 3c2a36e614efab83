"""``lowwater reconcile``: the batch truth of every window against what the stream emitted, as one Spark job.

The pieces, one module each: where the stream is (``position.py``), the log
as (row, window) pairs (``log.py``, sessions: ``sessions.py``), which pairs
were too late (``late.py``), the stream's fold (``stream.py``), the
comparison (``compare.py``), corrections (``apply.py``) and the reports
(``report.py``). Everything is DataFrame joins and ``groupBy``s except the
``drop`` policy's replay (one task, like the what-if replay) and the summary,
which collects a few numbers and the largest differences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lowwater.config import ConfigError, PipelineConfig
from lowwater.core.reconcile import CAUSES
from lowwater.reconcile import compare, late, log, stream
from lowwater.reconcile.position import StreamPosition, stream_position
from lowwater.time import format_ts

LARGEST = 10


@dataclass
class Reconciliation:
    """The differing windows (``frame``: one row each, persisted) and the summary the reports print."""

    frame: DataFrame
    summary: dict
    position: StreamPosition
    emissions: DataFrame
    extra: dict = field(default_factory=dict)


def check_supported(cfg: PipelineConfig) -> None:
    """What ``reconcile`` covers; anything else is one line (exit 2)."""
    if cfg.join is not None:
        raise ConfigError("reconcile: a [join] pipeline has no windows to reconcile (joined/ is not supported)")
    if cfg.named_sources:
        raise ConfigError("reconcile: [[source]] tables are not supported yet; use one [source]")
    if cfg.window.is_session and str(cfg.late_policy) == "drop":
        msg = ("reconcile: session windows with late.policy = \"drop\" are not supported yet (a session row's "
               "verdict depends on the session state; use side_output)")
        raise ConfigError(msg)
    if cfg.source.format == "kafka":
        raise ConfigError("reconcile: a Kafka source has no log to recompute from (source.format = \"kafka\")")


def emissions(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """Every emission of the pipeline: PostgreSQL's results table when it delivers there, else ``results/``."""
    path = f"{cfg.output.path.rstrip('/')}/results"
    try:
        parquet = stream.read_parquet(spark, path)
    except Exception:  # noqa: BLE001 - no results/ yet: the pipeline never ran
        msg = f"output.path: {path} has no results; run the pipeline first"
        raise ConfigError(msg) from None
    if cfg.output.postgres is not None:
        return stream.read_postgres(spark, cfg, parquet.schema)
    return parquet


def reconcile(spark: SparkSession, cfg: PipelineConfig, from_us: int | None = None,
              to_us: int | None = None) -> Reconciliation:
    """Compare every window (with ``from_us <= window_start`` and ``window_end <= to_us``) and summarise."""
    check_supported(cfg)
    position = stream_position(spark, cfg)
    schema = log.input_schema(spark, cfg)
    emitted = emissions(spark, cfg)
    types = {f.name: f.dataType for f in schema.fields}
    the_log = log.read_log(spark, cfg, schema, position)
    inputs = log.input_columns(schema)
    rows = log.valid(the_log).select(
        *dict.fromkeys([*inputs, *cfg.window.key]), "_rid", "_file", "_event_us", "_clip_us", "_clipped", "_unread",
        *log.values(cfg, schema))
    emitted_w = emitted.filter(F.col("batch_id") >= 0)
    late_path = f"{cfg.output.path.rstrip('/')}/late"
    few = cfg.late_policy == "side_output" and late.small(spark, late_path)  # late/ counted once: broadcast it?
    if cfg.window.is_session:
        from lowwater.reconcile import sessions

        pairs = sessions.pairs(cfg, rows)
        too_late = sessions.late_in_sessions(
            late.from_side_output(spark, late_path, sessions.proto_pairs(pairs), inputs, few), pairs)
    else:
        pairs = log.pairs(cfg, rows)
        if cfg.late_policy == "side_output":
            stream_side = pairs.filter((F.col("_role") == log.MOVED) | ~F.col("_clipped"))
            too_late = late.from_side_output(spark, late_path, stream_side, inputs, few)
        else:
            too_late = late.replayed(cfg, the_log)
    too_late = too_late.select("_rid", "_ws")
    if few:
        too_late = F.broadcast(too_late)  # a few (row, window) pairs: no shuffle of the log's pairs to meet them
    pairs = _window_range(pairs, "_ws", "_we", from_us, to_us)
    emitted_w = _window_range(emitted_w.withColumn("_ws", F.unix_micros("window_start"))
                              .withColumn("_we", F.unix_micros("window_end")), "_ws", "_we", from_us, to_us)
    if cfg.window.is_session:
        folded = sessions.fold(cfg, emitted_w.drop("_ws", "_we"), pairs)
    else:
        folded = stream.fold(cfg, emitted_w.drop("_ws", "_we"), [*cfg.window.key, "window_start", "window_end"])
    pairs = _covered(spark, cfg, pairs, folded)
    windows = compare.per_window(cfg, compare.causes(pairs, too_late, str(cfg.late_policy), position), types)
    side = compare.side_by_side(cfg, windows, folded, position).persist()
    summary = _summary(cfg, side, the_log, position)
    # The files this comparison read (a correction records them): a few rows, from the persisted log.
    files = [r[0] for r in the_log.select(F.regexp_extract("_file", log.URI_PATH, 2)).distinct().collect()]
    the_log.unpersist()
    return Reconciliation(side.filter("_differs"), summary, position, emitted, {"files": files})


def _covered(spark: SparkSession, cfg: PipelineConfig, pairs: DataFrame, folded: DataFrame) -> DataFrame:
    """``pairs`` plus ``_covered``: the pair's window was corrected by ``--apply`` when its row's file was there.

    Corrections are few: the corrected windows and the files each correction
    step saw (``apply.covered_files``) are broadcast.
    """
    from lowwater.reconcile.apply import covered_files

    keys = list(cfg.window.key)
    corrected = folded.filter(F.col("_corr_step").isNotNull()).select(
        *[F.col(k).alias(f"_ck_{k}") for k in keys], F.unix_micros("window_start").alias("_cws"),
        F.unix_micros("window_end").alias("_cwe"), "_corr_step")
    files = covered_files(spark, cfg)
    if files is None:
        return pairs.withColumn("_covered", F.lit(False))
    cond = F.lit(True)
    for k in keys:
        cond = cond & F.col(k).eqNullSafe(F.col(f"_ck_{k}"))
    cond = cond & (F.col("_ws") == F.col("_cws")) & (F.col("_we") == F.col("_cwe"))
    marked = pairs.join(F.broadcast(corrected), cond, "left").drop(*[f"_ck_{k}" for k in keys], "_cws", "_cwe")
    path = F.regexp_extract(F.col("_file"), log.URI_PATH, 2)
    hit = F.broadcast(files.withColumn("_covered", F.lit(True)))
    marked = marked.join(hit, (marked["_corr_step"] == hit["_step"]) & (path == hit["_fpath"]), "left")
    return marked.drop("_corr_step", "_step", "_fpath")


def _window_range(df: DataFrame, ws: str, we: str, from_us: int | None, to_us: int | None) -> DataFrame:
    if from_us is not None:
        df = df.filter(F.col(ws) >= F.lit(from_us))
    if to_us is not None:
        df = df.filter(F.col(we) <= F.lit(to_us))
    return df


def _summary(cfg: PipelineConfig, side: DataFrame, the_log: DataFrame, position: StreamPosition) -> dict:
    """Counts, rows and value by cause, the largest differences and every unexplained window (named)."""
    value_aggs = [a.name for a in cfg.window.aggregations if a.func in ("sum", "count")]
    cause_sums = [F.sum(f"{c}_{v}").alias(f"{c}_{v}") for c in CAUSES for v in ("rows", *value_aggs)]
    stats = side.agg(
        F.count(F.lit(1)).alias("checked"), F.sum(F.col("_differs").cast("long")).alias("differing"),
        F.sum((F.col("status") == "open").cast("long")).alias("open"),
        F.sum((F.col("status") == "unexplained").cast("long")).alias("unexplained"), *cause_sums,
    ).first()
    counts = the_log.agg(
        F.sum(F.col("_dead").isNotNull().cast("long")).alias("dead_letter"),
        F.sum((F.col("_dead").isNull() & ~F.coalesce(F.col("_marker"), F.lit(False))).cast("long")).alias("rows"),
        F.sum((F.col("_dead").isNull() & F.col("_clipped")).cast("long")).alias("clipped"),
    ).first()
    measure = next((f"diff_{a.name}" for a in cfg.window.aggregations if a.func == "sum"), "diff_count")
    keys = list(cfg.window.key)
    shown = [*keys, "window_start", "window_end", "status", "diff_count", measure]
    largest = (side.filter("_differs").orderBy(F.abs(F.col(measure)).desc_nulls_last(), "_ws")
               .select(*dict.fromkeys(shown)).limit(LARGEST).collect())
    wrong = side.filter(F.col("status") == "unexplained").orderBy("_ws").select(
        *keys, "window_start", "window_end", *[c for c in side.columns if c.startswith("unexplained_")]).collect()

    def plain(r) -> dict:  # noqa: ANN001 - a Row
        return {k: (format_ts(int(v.timestamp() * 1e6)) if hasattr(v, "timestamp") else _num(v))
                for k, v in r.asDict().items()}

    return {
        "windows_checked": int(stats["checked"] or 0),
        "windows_differing": int(stats["differing"] or 0),
        "windows_open": int(stats["open"] or 0),
        "unexplained": int(stats["unexplained"] or 0),
        "rows": int(counts["rows"] or 0),
        "dead_letter": int(counts["dead_letter"] or 0),
        "clipped_rows": int(counts["clipped"] or 0),
        "stream_step": position.step,
        "stream_watermark": format_ts(position.watermark_us),
        "files_read": len(position.read_files),
        "files_landed": position.landed_files,
        "causes": {c: {v: _num(stats[f"{c}_{v}"]) or 0 for v in ("rows", *value_aggs)} for c in CAUSES},
        "largest": [plain(r) for r in largest],
        "unexplained_windows": [plain(r) for r in wrong],
    }


def _num(v: object) -> object:
    from decimal import Decimal

    if isinstance(v, Decimal):
        return float(v)
    return v
