"""Windows after the interval join on Spark (``[join]`` with ``[window]``): the join, then the windowed fold.

A step runs the join operator (``operators/join/operator.py``: pairs, unmatched left rows,
too-late rows, its state and the held output watermark), then folds the
step's joined rows into tumbling or hopping windows with the windowed
operator's own parts: the executors' contributions (``operators/windowed/executor.py``) over
the joined rows, each stamped with the later of its two rows' event times and
judged at the hold after the previous step, and the fold (``operators/windowed/fold.py``)
firing every window the new hold has reached. ``results/`` carries the
windows; ``joined/`` and ``late/`` stay the join's.

Why the hold of the previous step may judge a whole step's rows: no joined row
is behind the hold at its emission, and the hold only rises
(``core/join_windows.py``), so every joined row is on time either way and the
results equal the core's row-by-row reference, whatever the cut. A verdict
other than on time is a defect and fails the step. Every aggregate of the windowed
operator is kept; ties of event time (``first_by_time``, ``collect_list``) are broken by
the joined row's arrival order, its later row's global ``seq`` then its earlier row's
(``core/join_windows.joined_arrival``), carried as its ``_seq``/``_seq_minor``.

The window state is a second bucket store (``<state>/windows``, buckets by
window end) with its own manifest per step, read back by the step of the
engine's manifest (a replayed step reads the same state); it also keeps the
hold and the windows' verdict counts. The engine's manifest names the join's
buckets only.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lowwater.core.aggregates import BY_TIME_FUNCS
from lowwater.runtime.columns import step_value
from lowwater.runtime.jobs import side_by_side
from lowwater.spark.operators.join.operator import JoinOperator
from lowwater.spark.operators.protocol import OperatorContext
from lowwater.spark.operators.windowed.executor import contrib_schema, make_contribute
from lowwater.spark.operators.windowed.fold import StateLayout, step_windows
from lowwater.spark.operators.windowed.operator import _emission_counts, _judged
from lowwater.spark.state import Bucket, BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan
from lowwater.time import NEG_INF, output_us

VERDICTS = ("on_time", "late_updates", "too_late")  # the joined rows' window pairs, by verdict


class JoinWindowOperator:
    """``[join]`` then ``[window]`` (the engine's operator for ``window.type = "join_window"``)."""

    def __init__(self, ctx: OperatorContext, layout: StateLayout) -> None:
        assert ctx.cfg.join is not None and ctx.cfg.join.window is not None
        self.window = ctx.cfg.join.window
        self.layout = layout  # built from cfg.result_window: the window after the join (join/__init__.py)
        self.sinks, self.clock = ctx.sinks, ctx.clock
        self.join = JoinOperator(ctx, layout)
        self.store = self.join.store  # the engine's manifest: the join's buckets
        self.windows = BucketStateStore(ctx.spark, f"{ctx.state_dir.rstrip('/')}/windows", layout.schema())
        # A tie of event time in first/last by time or collect_list is broken by the joined row's (later row's,
        # earlier row's) arrival: two global sequence numbers, which only the driver's clock gives (the
        # executors' arrival keys are three numbers each, more than a by-time input's arrival order holds).
        tied = [a.name for a in self.window.aggregations if a.func in (*BY_TIME_FUNCS, "collect_list")]
        self.driver_clock_only = (f"window aggregations {', '.join(tied)} after a join order ties by the joined "
                                  "rows' global arrival sequence" if tied else None)

    driver_clock_only: str | None  # either row clock serves it, unless a tie-ordered aggregate follows the join
    window_verdicts = False  # the join judges its inputs; the window judges joined rows at the join's hold
    writes_beside = True  # the join writes plan.beside with its state, in one job (join/writes.py)

    def state_schema(self) -> T.StructType:
        return self.join.state_schema()

    def empty_results(self) -> DataFrame:
        return self.join.empty_results()  # the join built on the window's layout: results/ are the windows

    def row_columns(self) -> list[str] | None:
        return self.join.row_columns()

    def touch_column(self, frame: DataFrame) -> Column:
        return self.join.touch_column(frame)  # the join's key buckets (pass 1 returns those its rows touch)

    # -- the window store's manifest of a step -------------------------------------------

    def _window_manifest(self, step: int) -> Manifest:
        if step < 0:
            return Manifest(totals={"hold": NEG_INF, **dict.fromkeys(VERDICTS, 0)})
        path = f"{self.windows.root}/manifest-{step:012d}.json"
        if not self.windows.fs.exists(path):
            msg = f"join windows: no window state for step {step} ({path}); the checkpoint is incomplete"
            raise RuntimeError(msg)
        return Manifest.from_json(self.windows.fs.read_text(path))

    # -- a step and the drain ---------------------------------------------------------------

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        result = self.join.step(parsed, plan, prev, step, cache)
        return self._windows_step(result, prev, step, cache)

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """The join frees everything (its hold becomes ``+inf``): every open window fires."""
        result = self.join.drain(prev, step, cache)
        return self._windows_step(result, prev, step, cache)

    def _joined_rows(self, hold_before: int) -> DataFrame | None:
        """The step's joined rows as the contributions pass reads them: keys, values, ``_event_us``, clock."""
        assert self.join.last is not None
        got, _ = self.join.last
        if got.out is None or not got.emitted:
            return None
        cols = dict.fromkeys([*self.layout.keys, *self.layout.values])
        return got.out.filter(F.col("_out") == "J").select(
            *[F.col(f"_j_{c}").alias(c) for c in cols],
            F.greatest("_j_left_us", F.coalesce("_j_right_us", "_j_left_us")).alias("_event_us"),
            step_value(hold_before).alias("_w"),
            # Its arrival order (``core/join_windows.joined_arrival``): a by-time input's (step, _seq,
            # _seq_minor) is (0, later row's seq, earlier row's seq), the same for any cut (read by the
            # tie-ordered aggregates only, which keep the driver's clock: its seq is global).
            F.col("_j_later_seq").alias("_seq"),
            F.col("_j_earlier_seq").alias("_seq_minor"),
        )

    def _windows_step(self, result: OperatorResult, prev: Manifest, step: int,
                      cache: list[DataFrame]) -> OperatorResult:
        assert self.join.last is not None
        wprev = self._window_manifest(prev.step)
        hold_before, hold = int(wprev.totals["hold"]), self.join.last[1]
        grace = self.window.allowed_lateness_us
        rows = self._joined_rows(hold_before)
        on_time, touched, verdicts = None, set(), dict.fromkeys(VERDICTS, 0)
        if rows is not None:
            schema = contrib_schema(self.layout, None)
            fn = make_contribute(self.layout, self.window.assigner(), grace, None, None, False, schema)
            contrib = rows.mapInArrow(fn, schema).persist()
            cache.append(contrib)
            judged = _judged(contrib, step)
            verdicts = dict(zip(VERDICTS, judged.pairs, strict=True))
            if judged.pairs[1] or judged.pairs[2]:  # impossible with the hold as W (core/join_windows.py)
                msg = (f"step {step}: {judged.pairs[1] + judged.pairs[2]} joined rows' windows behind the join's "
                       f"held output watermark {hold_before}: a defect, refusing to lose them")
                raise RuntimeError(msg)
            touched = set(judged.touched)
            if judged.pairs[0]:
                on_time = contrib.filter(F.col("_kind") == "P").select(
                    *self.layout.window_cols, *self.layout.partial_cols())
        read = touched | wprev.due(hold, self.clock(), None)
        state = self.windows.read(wprev, read)
        emitted, new_state = step_windows(self.layout, state, on_time, None, hold, grace, output_us(hold), step,
                                          cache, self.window.accumulation, now_us=self.clock())
        obs = None
        if emitted is not None:
            obs = Observation(f"join_windows_{step}")
            emitted = emitted.observe(obs, *_emission_counts())

        def results() -> None:
            self.sinks.write_or_clear("results", step, emitted)

        def state_write() -> dict[int, tuple[int, int]]:
            return self.windows.write(step, new_state) if new_state is not None else {}

        _, written = side_by_side(results, state_write)
        buckets = {b: info for b, info in wprev.buckets.items() if b not in read and b + grace > hold}
        for b, (n, size) in written.items():
            buckets[b] = Bucket(version=step, fired=b <= hold, rows=n, bytes=size)
        totals = {"hold": hold, **{k: int(wprev.totals.get(k, 0)) + v for k, v in verdicts.items()}}
        self.windows.commit(Manifest(step=step, buckets=buckets, totals=totals))
        fired = int(obs.get.get("finals") or 0) if obs is not None else 0
        return OperatorResult(accounting=result.accounting, buckets=result.buckets, windows_fired=fired,
                              output_watermark_us=result.output_watermark_us)

    def summary(self, manifest: Manifest) -> dict:
        """The join's accounting per side, and the joined rows' window pairs by verdict."""
        out = self.join.summary(manifest)
        if manifest.step >= 0:
            totals = self._window_manifest(manifest.step).totals
            out["join_window"] = {k: int(totals.get(k, 0)) for k in VERDICTS}
        return out
