"""Spark's own progress: the model's figures as observed metrics of a companion streaming query.

Why a companion query. lowwater computes its figures on the driver at the end
of a ``foreachBatch`` step, and nothing a PySpark program can do there reaches
the main query's ``StreamingQueryProgress``:

* ``DataFrame.observe`` inside ``foreachBatch`` runs on a detached copy of the
  batch (Spark's ``ForeachBatchSink`` rebuilds the batch as a ``LogicalRDD``),
  so its metrics never reach the query's progress; and ``observe`` on the
  streaming DataFrame aggregates input rows, which do not carry the
  watermark, lag or state figures;
* custom sink metrics need a DataSource V2 sink written in the JVM;
* the listener bus takes no events from Python.

So each committed step writes :func:`~lowwater.observe.model.progress_figures`
as one small JSON file (``<checkpoint>/lowwater/progress/step-N.json``,
written atomically), and a second streaming query, named
``lowwater-progress[<pipeline>]``, reads them with Spark's file source and
``observe("lowwater", ...)``\\ s the last step's value of each field. Its
``StreamingQueryProgress.observedMetrics["lowwater"]`` is then what a user's
``StreamingQueryListener``, ``query.lastProgress`` and the Spark UI's
Structured Streaming tab show.

What it costs, and why it does not wait. Each companion micro-batch is a tiny
Spark job (list the directory, read one JSON line, observe, ``noop``): ~0.15 s
of a 2-core machine, competing with the pipeline's own steps. So the companion
triggers every ``[observe] spark_progress_interval`` (default 10 s, the
default interval of Flink's metric reporters) and takes the newest step
written by then; processed files are deleted (``cleanSource``). When the run
ends the companion is stopped without waiting for a last micro-batch (that
wait cost a run ~1-3 s): like a metric reporter, it reports at its interval,
and the figures of the last interval of a finished run are in ``metrics/``.
The query is started on a thread of its own, so its start (a few hundred ms of
driver time) overlaps the pipeline's first step instead of delaying it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from lowwater.observe.model import progress_figures
from lowwater.runtime.fs import HadoopFS

log = logging.getLogger("lowwater")

OBSERVATION = "lowwater"  # the key of StreamingQueryProgress.observedMetrics
_TEXT_FIELDS = ("holding_partition", "idle_partitions")


def progress_fields() -> list[str]:
    """The observed fields, in order: the model's progress figures (``step`` is the step they describe)."""
    return ["step", *progress_figures({}, {}).keys()]


def query_name(pipeline: str) -> str:
    """The companion query's name (unique per pipeline among a session's active queries)."""
    return f"lowwater-progress[{pipeline}]"


class SparkProgress:
    """Writes each step's figures and runs the companion query that observes them (see the module docstring)."""

    def __init__(self, spark: SparkSession, lw_dir: str, pipeline: str, interval_s: float = 10.0) -> None:
        self.fs = HadoopFS(spark)
        self.dir = f"{lw_dir}/progress"
        self.ckpt = f"{lw_dir}/progress-query"
        for d in (self.dir, self.ckpt):  # transient: a run starts its companion afresh
            self.fs.delete(d)
        self.fs.write_text_atomic(f"{self.dir}/_started", "")  # the directory exists before the query lists it
        self.query: StreamingQuery | None = None
        # Starting a streaming query costs the driver a few hundred ms: off the step's path.
        self._starter = threading.Thread(target=self._start, args=(spark, pipeline, interval_s),
                                         name=f"lowwater-progress-start[{pipeline}]", daemon=True)
        self._starter.start()

    def _start(self, spark: SparkSession, pipeline: str, interval_s: float) -> None:
        try:
            fields = progress_fields()
            ddl = ", ".join(f"{n} {'STRING' if n in _TEXT_FIELDS else 'BIGINT' if n == 'step' else 'DOUBLE'}"
                            for n in fields)
            stream = (spark.readStream.schema(ddl).option("cleanSource", "delete")
                      .json(f"{self.dir}/*.json"))
            observed = stream.observe(
                OBSERVATION,
                *[F.max_by(F.col(n), F.col("step")).alias(n) for n in fields if n != "step"],
                F.max("step").alias("step"),
            )
            self.query = (observed.writeStream.format("noop").queryName(query_name(pipeline))
                          .option("checkpointLocation", self.ckpt)
                          .trigger(processingTime=f"{interval_s:g} seconds").start())
        except Exception as e:  # noqa: BLE001 - watching must not fail the run
            log.warning("Spark progress: the companion query %s did not start: %s", query_name(pipeline), e)

    def on_step(self, step: int, row: Mapping[str, Any], totals: Mapping[str, int],
                alerts: Mapping[str, bool]) -> None:
        """Write the step's figures where the companion query picks them up."""
        figures = {"step": step, **progress_figures(row, totals)}
        self.fs.write_text_atomic(f"{self.dir}/step-{step:09d}.json", json.dumps(figures) + "\n")

    def close(self) -> None:
        """Stop the companion now (see the module docstring: it reports at its interval, it does not flush)."""
        self._starter.join()
        if self.query is not None:
            self.query.stop()
