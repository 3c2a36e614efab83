"""A join step's writes: the keyed pass's state and joined rows, and what the engine hands over, in ONE job.

Where Parquet is the only sink and every path is :func:`~lowwater.spark.fused_write.writable`,
the new state buckets, ``joined/`` and ``plan.beside`` (dead letters, held rows) are written by
:func:`~lowwater.spark.fused_write.write_outputs`: one Spark job, the keyed pass's exchange a stage of
it (AQE off). The pass's count deltas and bucket summaries are observed on the state branch of that
job (``observed.py``), as they were on Spark's state write; rows and bytes per bucket come back from
the tasks (ADR 0047). Too-late rows are written after it, only when the step has some (their count
comes from the job). Otherwise (another sink, a path pyarrow cannot reach) Spark's writers run, as
before.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lowwater.config.join import JoinConfig
from lowwater.io.sink import Sinks
from lowwater.runtime.columns import watermark_ts
from lowwater.runtime.jobs import side_by_side
from lowwater.spark.fused_write import Output, Written, writable, write_outputs, writing_tasks
from lowwater.spark.operators.join.observed import Pass, observed_pass, read_observed
from lowwater.spark.state import Bucket, BucketStateStore

ROWS_A_TASK = 250_000  # the fused write's tasks (which also run the keyed pass): one per this many rows


def joined_frame(out: DataFrame, join: JoinConfig) -> DataFrame:
    """joined/'s rows among the pass's output."""
    return out.filter(F.col("_out") == "J").select(
        *[F.col(f"_j_{c}").alias(c) for c in join.output_columns()],
        F.timestamp_micros("_j_left_us").alias("left_event_time"),
        F.timestamp_micros("_j_right_us").alias("right_event_time"),
        watermark_ts("_j_w_us").alias("watermark"),
    )


def fusable(sinks: Sinks, store: BucketStateStore, step: int) -> bool:
    """Can one fused job write this step's state and joined rows (Parquet the only sink, every path writable)?"""
    if not sinks.single:
        return False
    paths = [sinks.sinks[0].path(kind, step) for kind in ("joined", "late")]
    return writable(store.fs, store.version_path(step), *paths)


def _buckets(files: list[Written], step: int) -> dict[int, Bucket]:
    sizes: dict[int, tuple[int, int]] = {}
    for f in files:
        assert f.part is not None
        n, size = sizes.get(f.part, (0, 0))
        sizes[f.part] = (n + f.rows, size + f.bytes)
    return {b: Bucket(version=step, fired=False, rows=n, bytes=size) for b, (n, size) in sizes.items()}


class JoinWrites:
    """The writes of a join step, fused or through Spark's writers."""

    def __init__(self, join: JoinConfig, sinks: Sinks, store: BucketStateStore, state_names: list[str]) -> None:
        self.join, self.sinks, self.store, self.state_names = join, sinks, store, state_names

    def _state(self, observed: DataFrame) -> DataFrame:
        return observed.filter(F.col("_out") == "S").select(*self.state_names, "_bucket")

    def fused(self, step: int, got: Pass, beside: list[Output], rows: int) -> dict[int, Bucket]:
        """The state, joined/ and ``beside`` in one job (call it with AQE off); the state's buckets.

        ``rows``: about how many rows the job reads and writes (a writing task per :data:`ROWS_A_TASK`).
        """
        outputs: list[Output] = []
        obs = None
        if got.out is not None:
            observed, obs = observed_pass(got.out, step)
            outputs.append(Output(self._state(observed), self.store.version_path(step), partition="_bucket"))
            outputs.append(Output(joined_frame(got.out, self.join), self.sinks.sinks[0].path("joined", step)))
        files = write_outputs(self.store.fs, [*outputs, *beside], writing_tasks(self.store.spark, rows, ROWS_A_TASK))
        if obs is not None:
            read_observed(got, obs)
        if not got.emitted:
            self.sinks.clear("joined", step)  # no pair: no joined/ directory, as Spark's path leaves
        return _buckets(files[0], step) if got.out is not None else {}

    def state(self, step: int, got: Pass, beside: list[Output]) -> dict[int, Bucket]:
        """The new state buckets through Spark's writer (the first job over the pass, observing it)."""
        jobs: list[Callable[[], object]] = []
        if beside:  # what the engine handed over, on its own
            jobs.append(lambda: write_outputs(self.store.fs, beside, 1))

        def write() -> dict[int, Bucket]:
            if got.out is None:
                return {}
            observed, obs = observed_pass(got.out, step)
            written = self.store.write(step, self._state(observed))
            read_observed(got, obs)
            return {b: Bucket(version=step, fired=False, rows=n, bytes=size) for b, (n, size) in written.items()}

        return side_by_side(write, *jobs)[0]

    def outputs(self, step: int, got: Pass, late_rows: Callable[[DataFrame], DataFrame] | None,
                joined: bool) -> None:
        """late/ and (``joined``: not written by the fused job) joined/, side by side from the pass's output."""
        out = got.out

        def joined_() -> None:
            frame = joined_frame(out, self.join) if out is not None and got.emitted else None
            self.sinks.write_or_clear("joined", step, frame)

        def late() -> None:
            frame = None
            if out is not None and late_rows is not None and any(d["too_late"] for d in got.deltas.values()):
                frame = late_rows(out.filter(F.col("_out") == "T").select("_rid", "_w"))
            self.sinks.write_or_clear("late", step, frame)

        side_by_side(*([joined_] if joined else []), late)
