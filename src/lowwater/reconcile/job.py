"""``lowwater reconcile``: the batch truth of every window against what the stream emitted, as one Spark job.

The pieces, one module each: where the stream is (``position.py``), the log
as (row, window) pairs (``log.py``, sessions: ``sessions.py``), which pairs
were too late (``late.py``), the stream's fold (``stream.py``), where each
row went and the per-window totals (``attribution.py``), the comparison
(``compare.py``), corrections (``apply.py``) and the reports
(``report.py``). Everything is broadcast joins and two ``groupBy``s except the
``drop`` policy's replay (one task, like the what-if replay) and the summary,
which collects a few numbers and the largest differences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import ConfigError, PipelineConfig
from lowwater.core.reconcile import CAUSES
from lowwater.io.checkpoint import check_outputs_match, fingerprint
from lowwater.io.outputs import OUTPUT_CONF
from lowwater.reconcile import attribution, compare, kept, late, log, report, stream
from lowwater.reconcile.apply import covered_files
from lowwater.reconcile.position import StreamPosition, stream_position
from lowwater.runtime.fs import HadoopFS
from lowwater.runtime.session import settings_in_force
from lowwater.runtime.sqltext import expr, q
from lowwater.time import format_ts

LARGEST = 10

# Spark settings for reconcile's own jobs (the session's own restored after it):
JOB_CONF = {
    # Spark's partial aggregation first tries a small row-based "fast" hash map (2^16 groups) in front of its
    # main one; a 10 M-row log has ~250,000 windows per scan task, so the small map is full after the first
    # rows and every later row pays a failed lookup in it before the main map's (10 M rows: the scan + tally
    # stage's task CPU 4.8-6.1 s -> 3.7 s, docs/performance.md).
    "spark.sql.codegen.aggregate.map.twolevel.enabled": "false",
    # The comparison's stage reads three shuffles through a union (the tally, late/'s rows, the emissions);
    # the adaptive planner coalesces each union child on its own and, dividing the minimum parallelism among
    # them, folded the whole comparison into ONE task (10 M rows: 2.5 s on one core, ~1.4 s on two). Its
    # tasks are the session's shuffle partitions, one reconcile/ file each.
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    **OUTPUT_CONF,  # reconcile/ is written as every output is (UTC-adjusted microsecond timestamps)
}


@dataclass
class Reconciliation:
    """The differing windows (``frame``: one row each, read from ``reconcile/``, so until the next reconcile of
    this pipeline overwrites it) and the summary the reports print."""

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
    if cfg.source.format == "dataframe":  # the Python API's DataFrame: lowwater kept no log of its rows
        raise ConfigError("reconcile: a DataFrame source has no log to recompute from (source.format = \"dataframe\")")
    if cfg.source.format == "delta":
        raise ConfigError("reconcile: a Delta source is not supported yet (source.format = \"delta\")")


def report_path(cfg: PipelineConfig) -> str:
    """Where the differing windows are written: ``<output.path>/reconcile``."""
    return f"{cfg.output.path.rstrip('/')}/reconcile"


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
    """Compare every window (with ``from_us <= window_start`` and ``window_end <= to_us``), write the differing
    ones to ``reconcile/`` and summarise (every job with :data:`JOB_CONF` in force)."""
    check_supported(cfg)
    with settings_in_force(spark, JOB_CONF):
        return _reconcile(spark, cfg, from_us, to_us)


def _reconcile(spark: SparkSession, cfg: PipelineConfig, from_us: int | None, to_us: int | None) -> Reconciliation:
    position = stream_position(spark, cfg)
    schema = log.input_schema(spark, cfg)
    # The outputs were computed with one configuration: another one would compare different windows and call
    # every difference unexplained (the engine refuses a changed configuration the same way, io/checkpoint.py).
    check_outputs_match(HadoopFS(spark), f"{cfg.output.checkpoint.rstrip('/')}/lowwater", cfg,
                        fingerprint(cfg, schema.simpleString()))
    emitted = emissions(spark, cfg)
    types = {f.name: f.dataType for f in schema.fields}
    inputs = log.input_columns(schema)
    late_path = f"{cfg.output.path.rstrip('/')}/late"
    side_output = cfg.late_policy == "side_output"
    # One scan of the log (never cached) unless a pass needs stable row ids: sessions, the drop replay, and the
    # aggregates that need each row's arrival order and its too-late copies matched exactly (kept.needs_rows).
    ordered = kept.needs_rows(cfg)
    single = not cfg.window.is_session and side_output and not ordered
    subtract = single and late.subtractable(cfg)  # late/ taken out of the totals: no row matched, no row hashed
    seen = covered_files(spark, cfg)  # the files each --apply saw: None, nothing was ever corrected
    # A row's file: for the corrected windows' files, and for the hash of a row matched to late/ (late.mark).
    files = seen is not None or (single and not subtract)
    the_log, forms = log.read_log(spark, cfg, schema, position, persist=not single, files=files)
    rows = the_log.filter(~F.coalesce(F.col("_marker"), F.lit(False))).select(
        *dict.fromkeys([*([] if subtract else inputs), *cfg.window.key]), *([] if single else ["_rid"]), "_file",
        "_dead", "_event_us", "_clip_us", "_clipped", "_unread", *(["_block"] if ordered else []),
        *log.values(cfg, schema))
    taken = None  # late/'s rows taken back out of the totals: tallied apart from the log's scan
    if subtract:
        pairs, taken = _with_late_taken_out(spark, cfg, log.pairs(cfg, rows), late_path, schema, forms)
    elif single:
        pairs = late.mark(spark, late_path, log.pairs(cfg, rows), inputs, forms)
    else:
        late_rows = late.size(spark, late_path) if side_output else 0
        pairs = kept.placed(cfg, _exactly_marked(spark, cfg, the_log, rows, inputs, late_path, late_rows, forms))
    emitted_w = emitted.filter(F.col("batch_id") >= 0).withColumn(
        "_ws", F.unix_micros("window_start")).withColumn("_we", F.unix_micros("window_end"))
    if cfg.window.is_session:
        from lowwater.reconcile import sessions

        folded = sessions.fold(cfg, emitted_w.drop("_ws", "_we"), pairs.filter(F.col("_role") == log.TRUTH))
        folded = folded.withColumn("_ws", F.unix_micros("window_start")).withColumn(
            "_we", F.unix_micros("window_end")).drop("window_start", "window_end")
        corrected = folded.filter(F.col("_corr_step").isNotNull())
        fold_aggs = [F.max(c).alias(c) for c in folded.columns
                     if c.startswith(("s_", "a_", "_last_rev", "_corr_step", "_heads", "_aheads"))]
    else:
        folded, corrected = emitted_w, stream.corrected(cfg, emitted_w)
        fold_aggs = stream.fold_aggs(cfg, emitted.schema)
    # Every pair of a window has the same flags when no row can be clipped, left unread or corrected and none
    # is matched late: the tally is then grouped (and partitioned) by window, and so is everything after it.
    by_window = subtract and not log.may_clip(cfg) and forms.all_read() and seen is None
    policy = str(cfg.late_policy)
    tallied = attribution.tally(cfg, _covered(spark, cfg, pairs, corrected, forms, seen), by_window)
    if taken is not None:
        taken = attribution.as_tally(cfg, _covered(spark, cfg, taken, corrected, forms, seen), tallied.schema)
        taken = attribution.causes(taken.repartition(*cfg.window.key, "_ws") if by_window else taken, policy,
                                   position)
    tallied = attribution.causes(tallied, policy, position)
    # Every window (and the dead letters' row, no window) compared in one job, which observes the summary's
    # numbers on the way and writes only the differing windows.
    possible = {"in_flight", "too_late" if side_output else "dropped", *(["clipped"] if log.may_clip(cfg) else [])}
    per_window = attribution.per_window(cfg, tallied, types, folded, fold_aggs, by_window, taken,
                                        marked=not subtract, possible=frozenset(possible))
    side = compare.side_by_side(cfg, per_window, position)
    in_range = _in_range(from_us, to_us)
    numbers = Observation()
    compared = side.observe(numbers, *_numbers(cfg, in_range)).filter(f"_differs AND {in_range}")
    # The one job that compares: it observes the summary's numbers and writes reconcile/ (the latest
    # comparison), a file per task. The reports and --apply read the differing windows back from it: nothing is
    # cached (a cache was one more job, and one task writing every differing window: 10 M rows, ~1 s).
    written = report.write_parquet(compared, report_path(cfg))
    frame = spark.read.schema(written).parquet(report_path(cfg)).withColumns(
        {"_ws": F.unix_micros("window_start"), "_we": F.unix_micros("window_end")})
    summary = _summary(cfg, numbers.get, frame, cfg.window.assigner().windows_per_row, position)
    the_log.unpersist()
    return Reconciliation(frame, summary, position, emitted, {"files": forms.paths()})


def _with_late_taken_out(spark: SparkSession, cfg: PipelineConfig, pairs: DataFrame, late_path: str,
                         schema: T.StructType, forms: log.FileForms) -> tuple[DataFrame, DataFrame | None]:
    """The log's pairs, none of them marked late, and ``late/``'s rows as the pairs to take back out
    (``late.as_pairs``; None: ``late/`` is empty): the windows' counts and sums lose them and their cause
    gains them."""
    n = len(cfg.window.value_inputs)
    cols = [*cfg.window.key, "_ws", "_we", "_role", "_file", "_clipped", "_unread", *[f"_v{i}" for i in range(n)],
            "_dead", "_late", "_neg"]  # no _lh: attribution.tally then counts no copies
    pairs = pairs.select(*[c for c in pairs.columns if c in cols], F.lit(False).alias("_late"),
                         F.lit(False).alias("_neg")).select(*cols)
    taken = late.as_pairs(spark, late_path, cfg, schema, forms)
    return pairs, None if taken is None else taken.select(*cols)


def _exactly_marked(spark: SparkSession, cfg: PipelineConfig, the_log: DataFrame, rows: DataFrame,
                    inputs: list[str], late_path: str, late_rows: int, forms: log.FileForms) -> DataFrame:
    """The pairs of a persisted log (sessions, ``drop``, ``kept.needs_rows``), with ``_late`` matched by row id
    (``late.py``)."""
    valid = rows.filter(F.col("_dead").isNull())
    few = late_rows <= late.BROADCAST_ROWS
    if cfg.window.is_session:
        from lowwater.reconcile import sessions

        pairs = sessions.pairs(cfg, valid)
        if late_rows:
            too_late = sessions.late_in_sessions(
                late.from_side_output(spark, late_path, sessions.proto_pairs(pairs), inputs, few, forms), pairs)
        else:
            too_late = spark.createDataFrame([], late.LATE_SCHEMA)
    elif str(cfg.late_policy) == "side_output":  # by row id; of identical rows the latest were late (kept.py)
        pairs = log.pairs(cfg, valid)
        stream_side = pairs.filter((F.col("_role") == log.MOVED) | ~F.col("_clipped"))
        too_late = (late.from_side_output(spark, late_path, stream_side, inputs, few, forms, latest=True)
                    if late_rows else spark.createDataFrame([], late.LATE_SCHEMA))
    else:
        pairs = log.pairs(cfg, valid)
        too_late = late.replayed(cfg, the_log)
    pairs = pairs.unionByName(log.dead_pairs(rows, list(cfg.window.key)))
    too_late = too_late.select("_rid", "_ws").withColumn("_hit", F.lit(True))
    if few:
        too_late = F.broadcast(too_late)  # a few (row, window) pairs: no shuffle of the log's pairs to meet them
    stream_side = (F.col("_role") == log.MOVED) | ~F.col("_clipped")
    return (pairs.join(too_late, ["_rid", "_ws"], "left")
            .withColumn("_late", F.coalesce(F.col("_hit"), F.lit(False)) & stream_side).drop("_hit")
            .withColumn("_lh", F.lit(None).cast("long")).withColumn("_copies", F.lit(None).cast("long")))


def _covered(spark: SparkSession, cfg: PipelineConfig, pairs: DataFrame, corrected: DataFrame,
             forms: log.FileForms, seen: list[tuple[int, str]] | None) -> DataFrame:
    """``pairs`` plus ``_covered``: the pair's window was corrected by ``--apply`` when its row's file was there.

    Corrections are few: the corrected windows and the files each correction
    step saw (``apply.covered_files``, under every name a row may carry) are
    broadcast.
    """
    if seen is None:
        return pairs.withColumn("_covered", F.lit(False))
    keys = list(cfg.window.key)
    corrected = corrected.select(*[F.col(k).alias(f"_ck_{k}") for k in keys], F.col("_ws").alias("_cws"),
                                 F.col("_we").alias("_cwe"), "_corr_step")
    cond = F.lit(True)
    for k in keys:
        cond = cond & F.col(k).eqNullSafe(F.col(f"_ck_{k}"))
    cond = cond & (F.col("_ws") == F.col("_cws")) & (F.col("_we") == F.col("_cwe"))
    marked = pairs.join(F.broadcast(corrected), cond, "left").drop(*[f"_ck_{k}" for k in keys], "_cws", "_cwe")
    names = forms.by_path()
    rows = sorted({(step, form) for step, path in seen for form in names.get(path, [])}) or [(-1, "")]
    hit = F.broadcast(spark.createDataFrame(rows, "_step long, _cfile string").withColumn("_covered", F.lit(True)))
    marked = marked.join(hit, (marked["_corr_step"] == hit["_step"]) & (F.col("_file") == hit["_cfile"]), "left")
    return marked.drop("_corr_step", "_step", "_cfile").withColumn("_covered", F.coalesce("_covered", F.lit(False)))


def _in_range(from_us: int | None, to_us: int | None) -> str:
    """A window (not the dead letters' row) with ``from_us <= start`` and ``end <= to_us`` (SQL text)."""
    cond = ["_ws IS NOT NULL"]
    if from_us is not None:
        cond.append(f"_ws >= {from_us}")
    if to_us is not None:
        cond.append(f"_we <= {to_us}")
    return " AND ".join(cond)


def _numbers(cfg: PipelineConfig, in_range: str) -> list[Column]:
    """The summary's numbers, as aggregates over every compared window (and the dead letters' row).

    The log's counts (valid rows, dead letters, clipped rows) are over every
    window; the rest over the windows in range.
    """
    value_aggs = [a.name for a in cfg.window.aggregations if a.func in ("sum", "count")]
    cause_sums = [f"sum(CASE WHEN {in_range} THEN {q(f'{c}_{v}')} END) AS {q(f'{c}_{v}')}" for c in CAUSES
                  for v in ("rows", *value_aggs)]

    def n(cond: str, name: str) -> str:
        return f"count(CASE WHEN {in_range} AND {cond} THEN 1 END) AS {name}"

    skipped = [n(f"array_contains(split(not_compared, ','), '{c}')", q(f"nc_{c}"))
               for c in compare.uncomparable(cfg)]
    return [expr(e) for e in (n("true", "checked"), n("_differs", "differing"), n("status = 'open'", "open"),
                              n("status = 'unexplained'", "unexplained"), *cause_sums, *skipped,
                              "sum(batch_count) AS pairs", "sum(_dead_n) AS dead", "sum(_clipped_n) AS clipped")]


def _summary(cfg: PipelineConfig, stats: dict, side: DataFrame, windows_per_row: int,
             position: StreamPosition) -> dict:
    """Counts, rows and value by cause (``stats``: :func:`_numbers`), the largest differences and every
    unexplained window (named) among the differing windows in range (``side``)."""
    value_aggs = [a.name for a in cfg.window.aggregations if a.func in ("sum", "count")]
    counts = {"rows": int(stats["pairs"] or 0) // windows_per_row, "dead_letter": int(stats["dead"] or 0),
              "clipped": int(stats["clipped"] or 0) // windows_per_row}
    measure = next((f"diff_{a.name}" for a in cfg.window.aggregations if a.func == "sum"), "diff_count")
    keys = list(cfg.window.key)
    shown = [*keys, "window_start", "window_end", "status", "diff_count", measure]
    largest = (side.orderBy(F.abs(F.col(measure)).desc_nulls_last(), "_ws")
               .select(*dict.fromkeys(shown)).limit(LARGEST).collect())
    wrong = [] if not stats["unexplained"] else side.filter(F.col("status") == "unexplained").select(
        *keys, "window_start", "window_end", *[c for c in side.columns if c.startswith("unexplained_")]).collect()
    wrong.sort(key=lambda r: (r["window_start"], *[str(r[k]) for k in keys]))  # here: a sort in Spark is 2 jobs

    def plain(r) -> dict:  # noqa: ANN001 - a Row
        return {k: (format_ts(int(v.timestamp() * 1e6)) if hasattr(v, "timestamp") else _num(v))
                for k, v in r.asDict().items()}

    return {
        "windows_checked": int(stats["checked"] or 0),
        "windows_differing": int(stats["differing"] or 0),
        "windows_open": int(stats["open"] or 0),
        "unexplained": int(stats["unexplained"] or 0),
        # per aggregate, the windows in range where it was not compared (compare.uncomparable)
        "not_compared": {c: int(stats[f"nc_{c}"]) for c in compare.uncomparable(cfg) if stats[f"nc_{c}"]},
        "rows": counts["rows"],
        "dead_letter": counts["dead_letter"],
        "clipped_rows": counts["clipped"],
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
