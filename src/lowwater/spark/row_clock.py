"""The executors' row clock: ``W(r)`` where the rows are, the driver folding summaries only (ADR 0024, 0032).

A step, around the pure ``core/row_clock``:

1. the rows are laid out once: hash-partitioned by source partition and sorted
   within it in arrival order (the planner's order: arrival, then offset, file,
   block, row id), and persisted for the step;
2. pass 1 (one Python pass per task, ``mapInArrow``) runs each source
   partition's **unchanged** generator from its snapshot and returns only its
   summary (critical rows, snapshot) plus a few counts -- O(change points),
   not O(rows) -- and the task's dead-letter count per source (the join splits
   its dead letters between its sides by it: no job of its own);
3. the driver ranks the partitions (ties at one arrival go in partition
   order, as in ``StepPlanner.plan``) and folds the summaries into ``W`` as a
   step function over arrival keys and the tracker's next state;
4. the operator's own pass attaches ``W(r)`` from each row's key
   ``(arrival, rank << 40 | position in its partition)`` (``spark/clocked.py``):
   the step function travels with the task (kilobytes).

An operator may name a column of its rows to *touch* (``touch``: the join's key
bucket): pass 1 also returns the distinct values it takes on the judged data
rows, so the operator learns which state buckets the step touches without a
job of its own (ADR 0047).

A Kafka topic's partitions are lanes of the arrival frontier
(``core/frontier.py``): before pass 1 one small aggregate over the laid-out
rows gives each lane's earliest and latest new arrival, which is all the
frontier's ``deliver`` and ``regressions`` read; its bounds then select the
rows judged now (the rest are held, ``spark/held.py``) as a filter; the
drain's release judges every held row (no filter), as the planner's does.

What crosses to the driver does not grow with the rows. The scope is one
source with an arrival clock (:func:`unavailable` says why another pipeline
keeps the driver's clock). The laid-out frame is persisted for the step, so a
Kafka micro-batch is fetched once.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.config import PipelineConfig
from lowwater.core.accounting import dead_by_source
from lowwater.core.frontier import LANE_SEP, FrontierState, lane_label
from lowwater.core.row_clock import FoldCounts, PartitionSummary, WatermarkStepFunction, fold, gap_for
from lowwater.core.row_clock import summarise_partition as summarise
from lowwater.core.row_clock.keys import pack, unpack
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.tracker_state import DEFAULT_SOURCE, TrackerState
from lowwater.core.watermarks import PartitionRows, WatermarkStrategy, clip_future
from lowwater.io.source import lanes_of
from lowwater.runtime.columns import select
from lowwater.spark.clocked import Attach, Batches, ClockedRows, with_clock
from lowwater.spark.held import CARRIED
from lowwater.spark.planner import order_columns, rows_per_source
from lowwater.spark.ready import lane_column, ready_column
from lowwater.spark.step import StepPlan
from lowwater.time import NEG_INF

_RANK_SHIFT = 40  # minor = partition rank << 40 | position in the partition's batch (2^40 rows a step)
_SUMMARY = T.StructType([T.StructField("summary", T.BinaryType()), T.StructField("dead", T.LongType()),
                         T.StructField("touched", T.ArrayType(T.LongType())),
                         T.StructField("dead_by_source", T.MapType(T.StringType(), T.LongType()))])
TOUCH = "_touch"  # the operator's touch column (ExecutorClock.step's ``touch``), summarised by pass 1


def unavailable(cfg: PipelineConfig) -> str | None:
    """Why this pipeline's input keeps the driver's clock, or None when the executors can keep it.

    An operator may need the driver's clock too (its ``driver_clock_only``; none of the built-in ones does).
    """
    if not all(s.arrival_time for s in cfg.sources):
        return "without an arrival clock arrival order is the files' order across partitions"
    return None


@dataclass(frozen=True)
class PartitionStats:
    """What pass 1 says of a partition's data rows beside its summary: clipped rows, the earliest event time."""

    data_rows: int
    clipped: int
    min_event_us: int | None


def _segments(psort: pa.Array) -> list[tuple[int, int]]:
    """The runs of equal ``_psort`` in a sorted batch: (start, end) pairs."""
    n = len(psort)
    if n == 0:
        return []
    change = np.flatnonzero(pc.not_equal(psort[1:], psort[:-1]).to_numpy(zero_copy_only=False)) + 1 if n > 1 else []
    starts = [0, *np.asarray(change, dtype=np.int64).tolist()]
    return list(zip(starts, [*starts[1:], n], strict=True))


def _pass_one(  # noqa: ANN202
    group: str, sources: dict[str, WatermarkStrategy], state: TrackerState | None, markers: bool, several: bool,
):
    """The ``mapInArrow`` function of pass 1 (a closure that pickles to the executors).

    ``group`` is the column naming a row's input (``_psort``, or with ``several`` sources ``_input``:
    source and partition); ``sources`` each source's strategy (a ``[source]`` table: the default one).
    """
    snapshots: dict[tuple[str | None, str], dict] = {}
    if state is not None:
        for i, p in enumerate(state.partitions):
            snapshots[(state.sources[i] if state.sources is not None else None, p)] = state.snapshot_of(i)
    gap = gap_for(sources)
    (only,) = sources if not several else (None,)

    def run(batches: Batches) -> Batches:
        got = [b for b in batches if b.num_rows]
        if not got:
            return
        t = pa.Table.from_batches(got).combine_chunks()
        dead = pc.is_valid(t.column("_dead"))
        valid = t.filter(pc.invert(dead))
        yield pa.RecordBatch.from_pydict({"summary": [None], "dead": [int(pc.sum(dead).as_py() or 0)],
                                          "touched": [_touched(valid, markers)],
                                          "dead_by_source": [_dead_per_source(t.filter(dead))]}, _ARROW)
        keys = valid.column(group).combine_chunks() if valid.num_rows else pa.array([])
        if keys.null_count:
            msg = "a valid row without a partition reached the row clock"
            raise ValueError(msg)
        event_all, arrival_all = valid.column("_event_us").to_numpy(), valid.column("_arrival_us").to_numpy()
        marker_all = (pc.fill_null(valid.column("_marker"), False).to_numpy(zero_copy_only=False).astype(bool)
                      if markers else None)
        for lo, hi in _segments(keys):
            value = keys[lo].as_py()
            source = valid.column("_source")[lo].as_py() if several else only
            name = valid.column("_part")[lo].as_py() if several else str(value)
            strategy = sources[source]
            arrival, event = arrival_all[lo:hi], event_all[lo:hi]
            marker = None if marker_all is None or strategy.marker is None else marker_all[lo:hi]
            rows = PartitionRows(event, arrival, marker)
            snapshot = snapshots.get((source if several else None, name))
            s = summarise(strategy, name, snapshot, rows, arrival, np.arange(hi - lo), source=source, gap_us=gap)
            data = slice(None) if marker is None else ~marker
            clipped_ev, clipped = clip_future(event[data], arrival[data], strategy.max_future_skew_us)
            stats = PartitionStats(len(clipped_ev), int(clipped.sum()),
                                   int(clipped_ev.min()) if len(clipped_ev) else None)
            blob = zlib.compress(pickle.dumps((value, s, stats)), 1)  # ~2.5x smaller, ~1 ms a partition
            yield pa.RecordBatch.from_pydict({"summary": [blob], "dead": [0], "touched": [None],
                                              "dead_by_source": [None]}, _ARROW)

    return run


_ARROW = pa.schema([("summary", pa.binary()), ("dead", pa.int64()), ("touched", pa.list_(pa.int64())),
                    ("dead_by_source", pa.map_(pa.string(), pa.int64()))])


def _dead_per_source(dead: pa.Table) -> list[tuple[str, int]] | None:
    """A task's dead letters per source (None: the rows name no source), as an Arrow map's entries."""
    counts = rows_per_source(dead)
    return None if counts is None else list(counts.items())


def _touched(valid: pa.Table, markers: bool) -> list[int] | None:
    """The distinct touch values of a task's valid data rows (the rows ``executor_attach`` yields); None: no column."""
    if TOUCH not in valid.column_names:
        return None
    data = valid
    if markers:
        data = valid.filter(pc.invert(pc.fill_null(valid.column("_marker"), False)))
    return sorted(int(v) for v in pc.unique(data.column(TOUCH)).to_pylist() if v is not None)


def _unpack(blob: bytes) -> tuple[object, PartitionSummary, PartitionStats]:
    """A pass-1 row's summary (a compressed pickle from our own executors)."""
    return pickle.loads(zlib.decompress(blob))  # noqa: S301 - written by pass 1 of this step


def _ranked(parts: list[tuple[object, PartitionSummary]]) -> tuple[list[PartitionSummary], dict[str, int]]:
    """Ties at one arrival go in input order (the group's value, as the planner sorts it): the rank joins
    the key's minor. Ranks are keyed by ``str`` of the group's value (what attach reads)."""
    ranked = sorted(parts, key=lambda vs: vs[0])  # type: ignore[arg-type, return-value]
    ranks = {str(v): r for r, (v, _) in enumerate(ranked)}
    out = []
    for v, s in ranked:
        major, minor = unpack(s.keys)
        out.append(replace(s, keys=pack(major, (ranks[str(v)] << _RANK_SHIFT) | minor)))
    return out, ranks


def executor_attach(step: WatermarkStepFunction, ranks: dict[str, int], markers: bool, group: str = "_psort") -> Attach:
    """Each row's ``W(r)`` from its key: its input's rank and its position in the input's sorted run."""

    def attach(batches: Batches) -> Batches:
        last: object = object()
        pos = 0
        for b in batches:
            valid = pc.is_null(b.column("_dead")).to_numpy(zero_copy_only=False)
            vb = b if valid.all() else b.filter(pa.array(valid))
            if not vb.num_rows:
                continue
            keys = vb.column(group)
            minor = np.empty(vb.num_rows, dtype=np.int64)
            for lo, hi in _segments(keys):
                value = keys[lo].as_py()
                if value != last:
                    last, pos = value, 0
                minor[lo:hi] = (ranks[str(value)] << _RANK_SHIFT) | np.arange(pos, pos + hi - lo, dtype=np.int64)
                pos += hi - lo
            arrival = vb.column("_arrival_us").to_numpy()
            w = step.lookup(arrival, minor)
            keep = None
            if markers:
                keep = ~pc.fill_null(vb.column("_marker"), False).to_numpy(zero_copy_only=False).astype(bool)
                if keep.all():
                    keep = None
                else:
                    w, arrival, minor = w[keep], arrival[keep], minor[keep]
            yield with_clock(vb, keep, w, arrival, minor)

    return attach


@dataclass(frozen=True)
class ClockedStep:
    """The executors' clock over one step: the rows, the advanced tracker and what the driver learnt."""

    rows: ClockedRows
    tracker: WatermarkTracker
    counts: FoldCounts
    dead: int
    dead_by_source: dict[str, int] | None  # the dead letters per source (None: not known)
    clipped: int
    min_event_us: int | None
    first_arrival_us: int | None
    last_arrival_us: int | None
    laid: DataFrame | None = None  # the step's rows as laid out and persisted (held and dead rows included)
    held: int = 0
    frontier: dict | None = None
    ready_bounds: dict[str, tuple[int, str] | None] | None = None
    touched: frozenset[int] | None = None  # the touch column's values on the judged data rows (None: no column)
    own_regression: tuple[int, int, str] | None = None  # a lane's new rows arriving before its own earlier ones
    behind: tuple[int, int, str] | None = None


class ExecutorClock:
    """Keeps ``W(r)`` on the executors for one pipeline (see the module's docstring)."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        # The tracker's inputs: (source, partition). A [source] table is the default source; several
        # sources group their rows by `_input` (source NUL partition: the planner's order of inputs).
        self.several = cfg.multi_source
        self.sources = dict(cfg.strategies) if cfg.named_sources else {DEFAULT_SOURCE: cfg.watermark}
        self.strategies = cfg.strategies if cfg.named_sources else cfg.watermark
        self.markers = any(s.marker for s in cfg.sources)
        self.group = "_input" if self.several else "_psort"
        self.order = [self.group, *order_columns(cfg)]
        lanes = lanes_of(cfg)  # as the sources declare them (io/source.SourceKind): Kafka's partitions each one
        self.frontier = lanes.frontier()
        self.lane = lane_column(lanes.by_partition, lanes.single) if self.frontier is not None else None

    def needs(self) -> tuple[str, ...]:
        return ("_dead", self.group, "_arrival_us", *(("_marker",) if self.markers else ()))

    def step(
        self, parsed: DataFrame, tracker: WatermarkTracker, cache: list[DataFrame], prev_frontier: dict | None = None,
        logs: dict[str, bool] | None = None, columns: list[str] | None = None,
        touch: Callable[[DataFrame], Column] | None = None, release: bool = False,
    ) -> ClockedStep:
        """Lay the rows out, summarise, fold; ``tracker`` is not modified (the result holds the advanced one).

        ``columns``: what the operator reads of a row; only those (and the clock's own) are laid out,
        shuffled and persisted (None: every column, e.g. so that a Kafka batch is fetched once).
        ``touch``: the operator's touch column of a frame (a long), whose values pass 1 returns.
        ``release`` (the drain of several sources): the frontier holds nothing back, every row is judged.
        """
        if self.several:
            parsed = parsed.withColumn("_input", F.concat_ws(LANE_SEP, F.col("_source"), F.col("_psort")))
        if touch is not None:
            parsed = parsed.withColumn(TOUCH, touch(parsed).cast("long"))
        if columns is not None:
            own = [*self.needs(), "_event_us", *self.order, "_source", "_part", CARRIED, TOUCH]  # pass 1 reads these
            have = set(parsed.columns)  # one schema call, not one a name
            parsed = select(parsed, [c for c in dict.fromkeys([*columns, *own]) if c in have])
        laid = parsed.repartition(self.group).sortWithinPartitions(*self.order).persist()
        cache.append(laid)
        judged, hold = laid, None
        if self.frontier is not None:
            hold = self._hold(laid, prev_frontier, logs)
            if release:  # nothing can arrive before the held rows any more (the planner's release)
                hold = replace(hold, bounds=None)
            else:
                judged = laid.filter(F.col("_dead").isNotNull() | ready_column(hold.bounds, self.lane))
        state = tracker.state
        one = _pass_one(self.group, self.sources, state, self.markers, self.several)
        have = set(judged.columns)
        reads = [c for c in ("_dead", self.group, "_event_us", "_arrival_us", "_marker", "_source", "_part", TOUCH)
                 if c in have]  # only what pass 1 reads crosses to Python (the cache is columnar)
        got = select(judged, reads).mapInArrow(one, _SUMMARY).collect()
        dead = sum(int(r["dead"]) for r in got)
        by_source = dead_by_source([r["dead_by_source"] for r in got if r["summary"] is None])
        touched = None if touch is None else frozenset(v for r in got if r["touched"] for v in r["touched"])
        parts = [_unpack(r["summary"]) for r in got if r["summary"] is not None]
        summaries, ranks = _ranked([(v, s) for v, s, _ in parts])
        stats = [st for _, _, st in parts]
        step, after, counts = fold(summaries, self.strategies, state)
        attach = executor_attach(step, ranks, self.markers, self.group)
        mins = [st.min_event_us for st in stats if st.min_event_us is not None]
        firsts = [(s.first_arrival_us, _input_of(s, self.several)) for s in summaries if s.first_arrival_us > NEG_INF]
        behind = None
        if hold is not None and firsts and hold.regression is None:
            earliest, part = min(firsts)
            if NEG_INF < state.clock_us and earliest < state.clock_us:
                behind = (earliest, state.clock_us, lane_label(hold.lane_of.get(part, part)))
        return ClockedStep(
            rows=ClockedRows(judged, attach, self.needs(), sum(st.data_rows for st in stats)),
            tracker=WatermarkTracker(tracker.strategies, after),
            counts=counts,
            dead=dead,
            dead_by_source=by_source,
            clipped=sum(st.clipped for st in stats),
            min_event_us=min(mins) if mins else None,
            first_arrival_us=min(firsts)[0] if firsts else None,
            last_arrival_us=max(s.last_arrival_us for s in summaries) if summaries else None,
            laid=laid,
            held=0 if hold is None or release else hold.valid - counts.rows,
            frontier=None if hold is None else hold.state,
            ready_bounds=None if hold is None else hold.bounds,
            touched=touched,
            own_regression=None if hold is None else hold.regression,
            behind=behind,
        )

    def _hold(self, laid: DataFrame, prev_frontier: dict | None, logs: dict[str, bool] | None) -> _Hold:
        """Deliver the new rows to the arrival frontier from each lane's (earliest, latest) new arrival.

        The frontier's own ``regressions`` and ``deliver`` read only those two per lane, so they are
        given them as a two-row-per-lane batch: the same rule as the planner's, not a copy of it.
        """
        assert self.frontier is not None and self.lane is not None
        new = ~F.col(CARRIED) if CARRIED in laid.columns else F.lit(True)
        rows = _lanes(laid.filter(F.col("_dead").isNull()).select(
            self.lane.alias("lane"), F.when(new, F.col("_arrival_us")).alias("a"),
            (F.concat_ws(LANE_SEP, F.col("_source"), F.col("_part")) if self.several
             else F.col("_psort").cast("string")).alias("part"),
        ).mapInArrow(_lane_rows, _LANES).collect())
        state = FrontierState.from_json(prev_frontier)
        fresh = [r for r in rows if r["lo"] is not None]
        lanes = np.array([r["lane"] for r in fresh], dtype=object)
        lo = np.array([int(r["lo"]) for r in fresh], dtype=np.int64)
        hi = np.array([int(r["hi"]) for r in fresh], dtype=np.int64)
        back = self.frontier.regressions(state, lanes, lo)
        regression = min(((a, b, lane_label(lane)) for lane, a, b in back), default=None)
        self.frontier.deliver(state, np.concatenate([lanes, lanes]), np.concatenate([lo, hi]))
        bounds = self.frontier.bounds(state, logs, sorted(r["lane"] for r in rows))
        return _Hold(state.to_json(), bounds, regression, sum(int(r["n"]) for r in rows),
                     {r["part"]: r["lane"] for r in rows})


_LANES = T.StructType([T.StructField("lane", T.StringType()), T.StructField("lo", T.LongType()),
                       T.StructField("hi", T.LongType()), T.StructField("n", T.LongType()),
                       T.StructField("part", T.StringType())])


def _lane_rows(batches: Batches) -> Batches:
    """Per lane of a task's rows: earliest and latest new arrival (``a``), rows, least input (a ``mapInArrow``).

    Aggregated in the pass that lays the rows out: no shuffle, no job of its own beside it.
    """
    got = [b for b in batches if b.num_rows]
    if not got:
        return
    t = pa.Table.from_batches(got)
    t = t.append_column("one", pa.array(np.ones(t.num_rows, dtype=np.int64)))
    g = t.group_by("lane", use_threads=False).aggregate([("a", "min"), ("a", "max"), ("one", "sum"), ("part", "min")])
    yield pa.RecordBatch.from_arrays(
        [g.column(c).combine_chunks() for c in ("lane", "a_min", "a_max", "one_sum", "part_min")],
        schema=pa.schema([("lane", pa.string()), ("lo", pa.int64()), ("hi", pa.int64()), ("n", pa.int64()),
                          ("part", pa.string())]))


@dataclass(frozen=True)
class _Lane:
    lane: str
    lo: int | None
    hi: int | None
    n: int
    part: str

    def __getitem__(self, key: str) -> object:
        return getattr(self, key)


def _lanes(rows: list) -> list[_Lane]:
    """The tasks' per-lane rows merged: one per lane (min, max, sum, min), in lane order."""
    out: dict[str, _Lane] = {}
    for r in rows:
        had = out.get(r["lane"])
        if had is None:
            out[r["lane"]] = _Lane(r["lane"], r["lo"], r["hi"], int(r["n"]), r["part"])
            continue
        lo = [v for v in (had.lo, r["lo"]) if v is not None]
        hi = [v for v in (had.hi, r["hi"]) if v is not None]
        out[r["lane"]] = _Lane(had.lane, min(lo, default=None), max(hi, default=None), had.n + int(r["n"]),
                               min(had.part, r["part"]))
    return [out[k] for k in sorted(out)]


def _input_of(s: PartitionSummary, several: bool) -> str:
    """A summary's input as the lane aggregate names it (``source NUL partition`` with several sources)."""
    return f"{s.source}{LANE_SEP}{s.partition}" if several else s.partition


@dataclass(frozen=True)
class _Hold:
    """The arrival frontier after a step's delivery: its state, each lane's bound, a regression, valid rows."""

    state: dict
    bounds: dict[str, tuple[int, str] | None]
    regression: tuple[int, int, str] | None
    valid: int
    lane_of: dict[str, str]  # a partition's lane (for the warning naming the lane judged behind)


def plan_of(clocked: ClockedStep, clock_before_us: int, now_us: int) -> StepPlan:
    """The step's plan from what the executors' clock learnt (verdicts are left to the operator's pass)."""
    earliest = clocked.first_arrival_us
    behind = earliest is not None and NEG_INF < clock_before_us and earliest < clock_before_us
    regression = (earliest, clock_before_us, None) if behind and earliest is not None else None
    if clocked.frontier is not None:  # each lane against its own past (another reading ahead is no regression)
        regression = clocked.own_regression
    return StepPlan(
        dead=clocked.dead,
        dead_by_source=clocked.dead_by_source,
        watermark=clocked.tracker.watermark_us,
        clock=clocked.last_arrival_us,
        now_us=now_us,
        rows=clocked.rows,
        clipped=clocked.clipped,
        min_event_us=clocked.min_event_us,
        arrival_regression=regression,
        behind=clocked.behind,
        markers=clocked.counts.markers,
        regressions=clocked.counts.regressions,
        held=clocked.held,
        frontier=clocked.frontier,
        ready_bounds=clocked.ready_bounds,
        touched=clocked.touched,
    )
