"""The Structured Streaming query around an engine: start it, one engine step per micro-batch, stop on request.

The engine (``spark/engine.py``) knows what a step computes; this module knows
how Spark drives steps: the source's ``readStream``, ``foreachBatch``, the
trigger (``availableNow`` for ``--once``/``--drain``, processing time, or as
fast as possible), and stopping between steps so that a step either commits
its manifest or leaves none (docs/design.md, *Stopping*).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql.utils import CapturedException

from lowwater.config import ConfigError
from lowwater.io.source import StreamSource

if TYPE_CHECKING:
    from lowwater.spark.engine import Engine

__all__ = ["QueryControl", "StopRequested"]


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """Raised into a Spark batch that starts after :meth:`QueryControl.request_stop`: it stays uncommitted."""


class _RefusalFilter(logging.Filter):
    """Keep a refusal raised in ``foreachBatch`` out of py4j's log: it reaches the user once, from ``Engine.run``.

    py4j logs every exception a Python callback raises, with its trace; a
    :class:`ConfigError` (e.g. new rows on a drained checkpoint) is a one-line answer.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ConfigError))


logging.getLogger("py4j.clientserver").addFilter(_RefusalFilter())


class QueryControl:
    """Runs an engine's streaming query; ``query`` is the running :class:`StreamingQuery` (or ``None``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.query = None
        self.source: StreamSource | None = None
        self.stop: str | None = None  # request_stop: "after_step" | "now"
        self.in_step = False
        # A stop left a step uncommitted that had begun its work (not a batch refused at its start, which
        # holds nothing: Spark replays it on restart either way).
        self.abandoned = False
        self.error: BaseException | None = None

    def run(self, once: bool, drain: bool, trigger_interval: str | None) -> bool:
        """Run the query until the input is consumed (``once``/``drain``) or a stop; True when stopped on request.

        A failure inside a step is raised as the step raised it (a
        :class:`ConfigError` stays a one-line refusal), not as Spark's wrapper.
        """
        eng, cfg = self.engine, self.engine.cfg
        if trigger_interval is None and cfg.trigger_interval_us is not None:
            trigger_interval = f"{cfg.trigger_interval_us // 1000} milliseconds"
        self.source = eng.inputs.open()  # handed in, a union of [[source]] tables, or the source (spark/inputs.py)
        spark_dir = f"{cfg.output.checkpoint.rstrip('/')}/spark"
        offset_log = getattr(self.source, "use_offset_log", None)  # a file log: positions without a Spark job
        if offset_log is not None:
            offset_log(f"{spark_dir}/offsets")
        writer = self.source.stream().writeStream.foreachBatch(self._foreach).option("checkpointLocation", spark_dir)
        poll_s = None  # availableNow: the files there at the start (listed by stream())
        if once or drain:
            writer = writer.trigger(availableNow=True)
        elif trigger_interval:
            writer = writer.trigger(processingTime=trigger_interval)
            poll_s = min(1.0, cfg.trigger_interval_us / 1e6 if cfg.trigger_interval_us else 1.0)
        else:
            poll_s = 1.0
        with self.source.watching(poll_s):
            query = self.query = writer.start()
            try:
                self._await(query)
            except CapturedException:
                if self.stop is None:
                    if self.error is not None:
                        raise self.error from None
                    raise
                self.abandoned = self.abandoned or self.error is not None
            except Exception:
                # After a stop request, a failure is the stop: a SIGTERM sent to the whole process
                # group also reaches Spark's processes (a Python worker, a JVM started elsewhere), and
                # the step they fail is uncommitted like any step a stop abandons.
                if self.stop is None:
                    raise
                self.abandoned = True
        if self.stop is not None:  # stopped on request: whatever was in flight is uncommitted
            return True
        if self.error is not None:
            raise self.error
        return False

    def request_stop(self, now: bool = False) -> None:
        """Stop the running query after its current step; ``now``: abandon the step, uncommitted.

        Only sets flags (safe from a signal handler); :meth:`run` acts on them.
        A step either commits its manifest or leaves none, so a restart resumes
        exactly where the last committed step ended (docs/design.md, stopping).
        """
        self.stop = "now" if now else (self.stop or "after_step")

    def _await(self, query) -> None:  # noqa: ANN001 - a StreamingQuery
        """Wait for the query; on a stop request, end it between steps (or at once with ``now``).

        A batch that starts after the request fails uncommitted (``_foreach``),
        which ends the query; an idle query (no step, no trigger planning a
        batch) is stopped. Stopping a query while its thread plans a batch would
        interrupt Spark mid-work, which logs errors of its own.
        """
        while not query.awaitTermination(0.25):
            if self.stop == "now":
                self.abandoned = self.abandoned or self.in_step
                query.stop()
            elif self.stop is not None and not self.in_step and not query.status["isTriggerActive"]:
                query.stop()

    def _foreach(self, df: DataFrame, spark_batch: int) -> None:
        if self.stop is not None:
            # Fail the batch instead of returning: a batch that returns is committed by Spark,
            # and its files would never be processed. Failed, it is replayed on restart.
            msg = f"stop requested before Spark batch {spark_batch}"
            raise StopRequested(msg)
        self.in_step = True
        try:
            admitted = self.source.admit(df)
            self.engine.process_batch(admitted.rows, spark_batch, admitted=admitted)
        except BaseException as e:
            self.error = e
            raise
        finally:
            self.in_step = False
