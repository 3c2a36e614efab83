"""The window operator protocol: what the engine asks of a window type, and nothing more.

The engine plans a step on the driver (``spark/planner.py``), hands the plan
to its operator, and commits what the operator returns; it never asks which
window type it runs. An operator owns its state layout (the schema of its
versioned buckets, :meth:`WindowOperator.state_schema`, and the store built
on it), writes its emitted and late frames through the sinks it was given,
and returns the new buckets and its counts. Adding a window type is one
module implementing this protocol and one line in ``operators/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lowwater.config import PipelineConfig
from lowwater.io.sink import Sinks
from lowwater.spark.operators.windowed.fold import StateLayout
from lowwater.spark.state import BucketStateStore, Manifest
from lowwater.spark.step import OperatorResult, StepPlan


class WindowOperator(Protocol):
    """One window type on Spark (``operators/windowed/``, ``operators/sessions/``, ``operators/join/``)."""

    store: BucketStateStore  # the operator's versioned state; the engine commits manifests through it

    def state_schema(self) -> StructType:
        """The columns of a state row (one bucket file's schema)."""
        ...

    def step(
        self, parsed: DataFrame, plan: StepPlan, prev: Manifest, step: int, cache: list[DataFrame],
    ) -> OperatorResult:
        """Carry out ``plan`` on the parsed micro-batch against ``prev``'s state.

        Writes ``results`` and ``late`` (or clears them) through the sinks and
        the new state as version ``step``; frames it persists go into ``cache``
        (the engine unpersists them when the step ends).
        """
        ...

    def drain(self, prev: Manifest, step: int, cache: list[DataFrame]) -> OperatorResult:
        """``W = +inf``: fire every open window of ``prev``'s state, write ``results`` through the sinks."""
        ...


class OperatorFactory(Protocol):
    """How the engine builds an operator (every operator class takes these arguments)."""

    def __call__(
        self,
        cfg: PipelineConfig,
        spark: SparkSession,
        layout: StateLayout,
        state_dir: str,
        sinks: Sinks,
        inputs: StructType,
        clock: Callable[[], int],
    ) -> WindowOperator: ...
