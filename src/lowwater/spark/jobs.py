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

from collections.abc import Callable
from typing import Any

from pyspark import InheritableThread


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

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def side_by_side(*jobs: Callable[[], Any]) -> list[Any]:
    """Run each callable in its own thread; their results in order, or the first error raised."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def runner(i: int) -> Callable[[], None]:
        def run() -> None:
            try:
                results[i] = jobs[i]()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
                errors[i] = e

        return run

    threads = [InheritableThread(target=runner(i)) for i in range(1, len(jobs))]
    for t in threads:
        t.start()
    runner(0)()  # the first job on the calling thread
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
