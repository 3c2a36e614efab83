"""Run a step's independent Spark jobs side by side.

A step's writes (results and late rows on one side, window state on the
other) read the same persisted frames and do not depend on each other; the
contributions pass runs while the driver builds the fold's DataFrames.
Submitted one after the other, each waits for the previous one's stages and
file commit while cores sit idle; the scheduler runs jobs submitted from
several driver threads at once (PySpark pins each Python thread to its own
JVM thread). :class:`pyspark.InheritableThread` gives each thread the
calling thread's local properties (the streaming query's job group), so
stopping the query still cancels them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import InheritableThread
from pyspark.sql import SparkSession

# With AQE every exchange's map stage is a Spark job of its own, run before the rest of the plan is
# planned: a step's few small exchanges cost a job each (ADR 0041).
NO_AQE = {"spark.sql.adaptive.enabled": "false"}


class Background:
    """One callable running on its own thread; :meth:`result` waits and returns (or raises) its outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised by result()
                self._error = e

        self._thread = InheritableThread(target=run)
        self._thread.start()

    def join(self) -> None:
        """Wait for the callable to finish, without raising its error."""
        self._thread.join()

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def side_by_side(*jobs: Callable[[], Any]) -> list[Any]:
    """Run each callable in its own thread (the first on the caller's); their results in order, or the first error."""
    others = [Background(job) for job in jobs[1:]]
    try:
        first = jobs[0]()
    finally:
        for b in others:  # every thread has finished before anything is raised
            b.join()
    return [first, *(b.result() for b in others)]


@contextmanager
def without_aqe(spark: SparkSession) -> Iterator[None]:
    """AQE off on the session for the ``with`` block, then as it was (set or unset).

    The session's conf is shared by its threads: a job of the step planned meanwhile on another
    thread (one without an exchange: dead letters) is planned the same either way.
    """
    before = {k: spark.conf.get(k, None) for k in NO_AQE}
    for k, v in NO_AQE.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
