"""``lowwater whatif``: replay a historical log under a grid of L and G, as a Spark job.

Spark reads and parses the log (the engine's ``normalise``: same clocks, same
dead-letter rules), projects the compact columns (partition, event µs, arrival
µs, a 64-bit hash of the key), sorts them into arrival order with a
range-partitioned sort, and streams them, in order, through one task
(``coalesce(1)`` keeps the sort order) running the pure
:class:`~lowwater.advisor.sweep.LatenessSweep` chunk by chunk. Every L is one
vectorised scan of each chunk (one tracker at ``L = 0`` where the shift
``W_L = W_0 - L`` is exact, one per L otherwise: :mod:`lowwater.advisor.lanes`);
every G reuses that scan; each ``--compare`` strategy is one more tracker. Session windows
(``window.type = "session"``) run :class:`~lowwater.advisor.session_sweep.SessionSweep`
instead: the engine's session state machine once per (L, G), over the same
watermark scan. Nothing but the
compact columns reaches Python, and one small row per (L, G) comes back.

``[[source]]`` tables: every source is read with its own format, schema and
columns, the union sorted into the order across sources ``(arrival_time,
source, partition, offset)`` (:mod:`lowwater.advisor.replay_log`), and the sweep
runs each source's own generator and clipping (its strategy per source name).

Each row also carries its micro-batch as ``lowwater run --once`` would cut the
log (``source.max_files_per_batch`` files per batch, in file-name order; one
batch when unset), so ``peak_open_windows`` is the engine's own figure: open
(key, window) entries at the end of a micro-batch (see :mod:`lowwater.advisor.sweep`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import SparkSession

from lowwater.advisor.advice import advise  # noqa: F401 - re-exported: the replay's advice
from lowwater.advisor.lanes import Strategies, as_strategies
from lowwater.advisor.replay_log import arrival_sorted, log_marker, union_sorted
from lowwater.advisor.session_sweep import SessionSweep
from lowwater.advisor.sweep import LatenessSweep
from lowwater.config import PipelineConfig
from lowwater.core.watermarks import WatermarkStrategy
from lowwater.core.windows import SessionWindows, WindowAssigner

CHUNK_ROWS = 200_000


@dataclass(frozen=True)
class SweepSpec:
    """The grid to replay."""

    bounds_us: list[int]
    graces_us: list[int]
    chunk_rows: int = CHUNK_ROWS
    compare: dict[str, dict[str, WatermarkStrategy]] = field(default_factory=dict)
    """``--compare``: label -> strategy per source (:mod:`lowwater.advisor.compare`), replayed exactly."""


@dataclass(frozen=True)
class _Columns:
    """Which compact columns the sorted log has (``replay_log``)."""

    arrival: bool
    marker: bool
    sources: bool  # several sources: rows carry their source's name
    partition: str = "_psort"  # the partition name column


def _sweep_fn(strategy: Strategies, assigner: WindowAssigner, spec: SweepSpec, cols: _Columns):  # noqa: ANN202
    def sweep(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sweep_cls = SessionSweep if isinstance(assigner, SessionWindows) else LatenessSweep
        s = sweep_cls(strategy, assigner, spec.bounds_us, spec.graces_us, compare=spec.compare)
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> None:
            t = pa.Table.from_batches(pending).combine_chunks()
            dead = t.column("_is_dead").to_numpy(zero_copy_only=False)
            valid = t.filter(pa.array(~dead))
            s.feed(
                valid.column(cols.partition).to_numpy(zero_copy_only=False),
                valid.column("_event_us").to_numpy(),
                valid.column("_key").to_numpy(),
                valid.column("_arrival_us").to_numpy() if cols.arrival else None,
                dead_letter=int(dead.sum()),
                batch_ids=valid.column("_batch").to_numpy(),
                sources=valid.column("_source").to_numpy(zero_copy_only=False) if cols.sources else None,
                markers=valid.column("_marker").to_numpy(zero_copy_only=False) if cols.marker else None,
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
    """Replay the configured log for every (L, G) of ``spec``, then every compared strategy per G.

    One dict per (L, G), sorted (``FIELDS``), followed by one per compared
    strategy and G in the order given (``COMPARE_FIELDS``: ``strategy`` names it).
    """
    arrival = all(s.arrival_time for s in cfg.sources)
    if cfg.named_sources:  # [[source]] tables: each source read and normalised on its own, then one union
        compact = union_sorted(spark, cfg, spec.compare)
        cols = _Columns(arrival, True, cfg.multi_source, "_pname")
    else:
        marker = log_marker(cfg.source, spec.compare)
        compact = arrival_sorted(spark, cfg, marker)
        cols = _Columns(arrival, marker is not None, False)
    fn = _sweep_fn(source_strategies(cfg), cfg.window.assigner(), spec, cols)
    rows = compact.coalesce(1).mapInArrow(fn, "result string").collect()
    results = [json.loads(r["result"]) for r in rows]
    grid = sorted((r for r in results if "strategy" not in r), key=lambda r: (r["lateness"], r["allowed_lateness"]))
    order = {label: i for i, label in enumerate(spec.compare)}
    compared = sorted((r for r in results if "strategy" in r), key=lambda r: (order[r["strategy"]],
                                                                               r["allowed_lateness"]))
    return grid + compared


def source_strategies(cfg: PipelineConfig) -> dict[str, WatermarkStrategy]:
    """The configured strategy per source: ``{"default": ...}`` for one ``[source]``, else by source name."""
    return cfg.strategies if cfg.named_sources else as_strategies(cfg.watermark)
