"""``lowwater whatif``: replay a historical log under a grid of L and G, as a Spark job.

Spark reads and parses the log (the engine's ``normalise``: same clocks, same
dead-letter rules), projects the compact columns (partition, event µs, arrival
µs, a 64-bit hash of the key), sorts them into arrival order with a
range-partitioned sort, and streams them, in order, through one task
(``coalesce(1)`` keeps the sort order) running the core
:class:`~lowwater.core.sweep.LatenessSweep` chunk by chunk. Every L is one
vectorised scan of each chunk; every G reuses that scan. Session windows
(``window.type = "session"``) run :class:`~lowwater.core.session_sweep.SessionSweep`
instead: the engine's session state machine once per (L, G), over the same
single watermark scan. Nothing but the
compact columns reaches Python, and one small row per (L, G) comes back.

Each row also carries its micro-batch as ``lowwater run --once`` would cut the
log (``source.max_files_per_batch`` files per batch, in file-name order; one
batch when unset), so ``peak_open_windows`` is the engine's own figure: open
(key, window) entries at the end of a micro-batch (see :mod:`lowwater.core.sweep`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lowwater.config import PipelineConfig
from lowwater.core.session_sweep import SessionSweep
from lowwater.core.sweep import LatenessSweep
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import SessionWindows, WindowAssigner
from lowwater.io.files import PARSE_CONF, read_batch, resolve_schema
from lowwater.spark.parse import normalise

CHUNK_ROWS = 200_000


@dataclass(frozen=True)
class SweepSpec:
    """The grid to replay."""

    bounds_us: list[int]
    graces_us: list[int]
    chunk_rows: int = CHUNK_ROWS


# The path part of a file URI (``file:/x``, ``file:///x`` and ``hdfs://nn/x`` -> ``/x``): Spark spells
# the same file differently in ``_metadata.file_path`` and ``DataFrame.inputFiles()``.
_URI_PATH = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?(/.*)$"


def _with_batch(spark: SparkSession, raw: DataFrame, df: DataFrame, files_per_batch: int | None) -> DataFrame:
    """``df`` plus ``_batch``: the micro-batch ``run --once`` reads each row in.

    The engine reads ``files_per_batch`` files per micro-batch (all files in one
    when unset), in file-name order (the order Spark's file source follows when
    names sort like arrival, as a landing zone's do).
    """
    if not files_per_batch:
        return df.withColumn("_batch", F.lit(0).cast("long"))
    paths = sorted({urlsplit(f).path for f in raw.inputFiles()})
    lookup = spark.createDataFrame([(p, i // files_per_batch) for i, p in enumerate(paths)], "_fpath string, _b long")
    key: Column = F.regexp_extract(F.col("_file"), _URI_PATH, 2)
    joined = df.join(F.broadcast(lookup), key == F.col("_fpath"), "left")
    # A file missing from the listing (deleted meanwhile) keeps its rows: they join the first batch.
    return joined.withColumn("_batch", F.coalesce(F.col("_b"), F.lit(0).cast("long"))).drop("_fpath", "_b")


def arrival_sorted(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """The compact projection of the whole log, globally sorted in arrival order."""
    for k, v in PARSE_CONF.items():
        spark.conf.set(k, v)
    schema = resolve_schema(spark, cfg, None)
    raw = read_batch(spark, cfg.source, schema)
    df = normalise(raw, cfg).withColumn("_rid", F.monotonically_increasing_id())
    df = _with_batch(spark, raw, df, cfg.source.max_files_per_batch)
    keys = [F.col(k) for k in cfg.window.key]
    key_hash = F.xxhash64(*keys) if keys else F.lit(0).cast("long")
    # The engine's order (core.judge.arrival_order): (arrival, partition, offset), then the
    # source's own order. With an arrival clock and offsets the row id breaks the (rare)
    # remaining ties, as in the engine's micro-batches, and no file path is shuffled.
    src = cfg.source
    source_order = ["_rid"] if src.arrival_time and src.offset else ["_file", "_block", "_rid"]
    order = ["_arrival_us", "_psort", "_offset", *source_order] if src.arrival_time else source_order
    compact = [F.col("_dead").isNotNull().alias("_is_dead"), "_event_us", key_hash.alias("_key"), "_batch"]
    return df.select(*compact, *dict.fromkeys(["_arrival_us", "_psort", *order])).orderBy(*order)


def _sweep_fn(strategy: WatermarkStrategy, assigner: WindowAssigner, spec: SweepSpec, has_arrival: bool):  # noqa: ANN202
    def sweep(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sweep_cls = SessionSweep if isinstance(assigner, SessionWindows) else LatenessSweep
        s = sweep_cls(strategy, assigner, spec.bounds_us, spec.graces_us)
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> None:
            t = pa.Table.from_batches(pending).combine_chunks()
            dead = t.column("_is_dead").to_numpy(zero_copy_only=False)
            valid = t.filter(pa.array(~dead))
            s.feed(
                valid.column("_psort").to_numpy(zero_copy_only=False),
                valid.column("_event_us").to_numpy(),
                valid.column("_key").to_numpy(),
                valid.column("_arrival_us").to_numpy() if has_arrival else None,
                dead_letter=int(dead.sum()),
                batch_ids=valid.column("_batch").to_numpy(),
            )

        for b in batches:
            pending.append(b)
            size += b.num_rows
            if size >= spec.chunk_rows:
                flush()
                pending, size = [], 0
        if pending:
            flush()
        yield pa.RecordBatch.from_pylist([{"result": json.dumps(r)} for r in s.results()])

    return sweep


def run_whatif(spark: SparkSession, cfg: PipelineConfig, spec: SweepSpec) -> list[dict]:
    """Replay the configured log for every (L, G) of ``spec``; one dict per pair."""
    compact = arrival_sorted(spark, cfg)
    fn = _sweep_fn(cfg.watermark, cfg.window.assigner(), spec, bool(cfg.source.arrival_time))
    rows = compact.coalesce(1).mapInArrow(fn, "result string").collect()
    results = [json.loads(r["result"]) for r in rows]
    return sorted(results, key=lambda r: (r["lateness"], r["allowed_lateness"]))


# -- advice ------------------------------------------------------------------------------------------------------


def secs(x: float | None) -> str:
    """A duration in seconds for a sentence; ``None`` (no window fired) says so."""
    return "n/a (no window fired)" if x is None else f"{x:.3g}s"


def _pair(r: dict) -> str:
    return f"L={r['lateness']:g}s, G={r['allowed_lateness']:g}s"


def meets(r: dict, target_completeness: float | None, latency_budget_s: float | None) -> bool:
    """Does one (L, G) meet the targets? A budget needs a latency: a pair where nothing fired does not meet it."""
    if target_completeness is not None and r["completeness"] < target_completeness:
        return False
    p99 = r["emit_latency_p99"]
    return latency_budget_s is None or (p99 is not None and p99 <= latency_budget_s)


def choose(results: list[dict], target_completeness: float | None, latency_budget_s: float | None) -> dict | None:
    """The smallest L (then G) meeting the targets, or ``None``; never a pair where nothing fired."""
    ok = [r for r in results if r["windows_fired"] and meets(r, target_completeness, latency_budget_s)]
    return min(ok, key=lambda r: (r["lateness"], r["allowed_lateness"])) if ok else None


def nothing_fired(results: list[dict]) -> str | None:
    """Why the replay cannot advise at all (no valid row, or no window fired for any L), else ``None``."""
    if not results:
        return "The replay has no results: nothing to advise."
    r = results[0]
    valid = r["rows"] - r["dead_letter"]
    if valid == 0:
        return f"The log has no valid rows ({r['rows']:,} rows, all dead letters): nothing to advise."
    if not any(x["windows_fired"] for x in results):
        most = max(x["windows_drain_only"] for x in results)
        return (
            f"No window fired before the end of the log for any L ({most:,} would fire only on a drain): the log is "
            "shorter than a window plus L, so it shows neither emit latency nor what waiting buys. "
            "Replay a longer log, or smaller L and window sizes."
        )
    return None


def _latency_cause(floor: dict, latency_budget_s: float, idle_timeout_s: float | None) -> str:
    """Why even the fastest pair misses the budget: the watermark's own lag, not L."""
    lag = floor["emit_latency_p99"] - floor["lateness"]
    text = (
        f"Emit latency is L plus the watermark's own lag behind the newest event (the slowest partition, and "
        f"partitions that go quiet): here {lag:.3g}s of the {secs(floor['emit_latency_p99'])} at {_pair(floor)} "
        "is that lag, so a larger L cannot help; it only adds to it."
    )
    if idle_timeout_s is not None and (idle_timeout_s >= latency_budget_s or 2 * idle_timeout_s >= lag):
        share = "alone exceeds the budget" if idle_timeout_s >= latency_budget_s else "is most of that lag"
        text += (
            f" Idleness dominates: idle_timeout = {idle_timeout_s:g}s {share}; a partition that goes quiet holds W "
            "back that long before it leaves the min. Lower idle_timeout (above the normal silences "
            "`lowwater delays` shows)."
        )
    else:
        text += " `lowwater delays` shows which partition trails the others (skew) and for how long."
    return text


def advise(
    results: list[dict],
    target_completeness: float | None,
    latency_budget_s: float | None,
    idle_timeout_s: float | None = None,
) -> str:
    """The smallest L (and the (L, G) with the lowest on-time latency) meeting the targets, or why none does."""
    why_not = nothing_fired(results)
    if why_not is not None:
        return why_not
    want = []
    if target_completeness is not None:
        want.append(f"completeness >= {target_completeness:.4%}")
    if latency_budget_s is not None:
        want.append(f"p99 emit latency <= {latency_budget_s:g}s")
    smallest = choose(results, target_completeness, latency_budget_s)
    if smallest is None:
        return _no_candidate(results, target_completeness, latency_budget_s, idle_timeout_s, " and ".join(want))
    lines = [
        f"Smallest L meeting {' and '.join(want)}: L={smallest['lateness']:g}s (G={smallest['allowed_lateness']:g}s): "
        f"completeness {smallest['completeness']:.4%}, {smallest['too_late']:,} too late, "
        f"p99 emit latency {secs(smallest['emit_latency_p99'])}, peak open windows {smallest['peak_open_windows']:,}."
    ]
    ok = [r for r in results if r["windows_fired"] and meets(r, target_completeness, latency_budget_s)]
    if len({r["allowed_lateness"] for r in results}) > 1:
        fastest = min(ok, key=lambda r: (r["emit_latency_mean"], r["lateness"], r["allowed_lateness"]))
        lines.append(
            f"Lowest on-time latency: L={fastest['lateness']:g}s with G={fastest['allowed_lateness']:g}s "
            f"(mean {secs(fastest['emit_latency_mean'])}, completeness {fastest['completeness']:.4%}, "
            f"{fastest['late_updates']:,} late updates)."
        )
    silent = [r for r in results if not r["windows_fired"]]
    if silent:
        lines.append(f"Not considered (no window fired before the end of the log): {', '.join(map(_pair, silent))}.")
    return "\n".join(lines)


def _no_candidate(
    results: list[dict],
    target_completeness: float | None,
    latency_budget_s: float | None,
    idle_timeout_s: float | None,
    wanted: str,
) -> str:
    """Why no (L, G) meets the targets, and what would (or would not) help."""
    complete = [r for r in results if meets(r, target_completeness, None)]
    fast = [r for r in results if r["windows_fired"] and meets(r, None, latency_budget_s)]
    lines = [f"No candidate meets {wanted}."]
    if not complete:
        best = max(results, key=lambda r: (r["completeness"], -r["lateness"]))
        lines.append(
            f"Completeness: the best is {best['completeness']:.4%} at {_pair(best)} ({best['too_late']:,} too late); "
            "try larger L or G."
        )
    if latency_budget_s is not None and not fast:
        floor = min((r for r in results if r["emit_latency_p99"] is not None),
                    key=lambda r: (r["emit_latency_p99"], r["lateness"]))
        lines.append(f"Latency: the lowest p99 is {secs(floor['emit_latency_p99'])} at {_pair(floor)}.")
        lines.append(_latency_cause(floor, latency_budget_s, idle_timeout_s))
    if complete and latency_budget_s is None:
        lines.append(
            f"The pairs reaching it ({', '.join(map(_pair, complete))}) fire no window before the end of the log: "
            "replay a longer log."
        )
    if complete and fast and latency_budget_s is not None and target_completeness is not None:
        need = min(complete, key=lambda r: (r["lateness"], r["allowed_lateness"]))
        best_fast = max(fast, key=lambda r: (r["completeness"], -r["lateness"]))
        lines.append(
            f"The targets conflict: completeness >= {target_completeness:.4%} needs {_pair(need)} "
            f"(p99 emit latency {secs(need['emit_latency_p99'])}); within the budget the best completeness is "
            f"{best_fast['completeness']:.4%} at {_pair(best_fast)}. A larger G keeps the latency of L and turns "
            "too-late rows into late updates (revisions)."
        )
    return "\n".join(lines)
