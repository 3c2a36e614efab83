"""The watermark generator protocol: one partition's rows in, ``W_p`` after each row out.

Flink's ``WatermarkGenerator`` has two methods, ``onEvent`` and
``onPeriodicEmit``. lowwater's is the vectorised equivalent:

* :meth:`WatermarkGenerator.on_rows` takes a block of one partition's rows in
  arrival order (numpy arrays) and returns ``W_p`` after each of them
  (:class:`Emitted`); it replaces ``onEvent``.
* :meth:`WatermarkGenerator.active_until_us` replaces the periodic check: the
  arrival clock up to which the partition counts in the min. Plain generators
  never go idle (``POS_INF``); the idleness wrapper
  (:mod:`~lowwater.core.watermarks.idleness`) is the only one that says
  otherwise.
* :meth:`~WatermarkGenerator.snapshot` / :meth:`~WatermarkGenerator.restore`
  carry the generator across micro-batches (JSON in the manifest), so feeding
  a partition's rows in one call or in many gives the same ``W_p`` after every
  row (SEMANTICS.md §8).

A generator's ``W_p`` never moves back: a lower proposal (a marker older than
the last one, an adaptive bound that widens) is ignored and counted in
:attr:`Emitted.regressions`. The min over partitions is not the generator's
business: it lives in :mod:`lowwater.core.combine` alone.

Times are integer µs; ``NEG_INF`` means undefined (no promise yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from lowwater.time import format_duration_us


@dataclass(frozen=True)
class PartitionRows:
    """A block of one partition's rows, in arrival order.

    Attributes:
        event_us: event times (already clipped, SEMANTICS.md §5).
        arrival_us: arrival times (non-decreasing), or ``None`` without an arrival clock.
        marker: True on marker rows (punctuated sources), or ``None`` without a marker column.
    """

    event_us: np.ndarray
    arrival_us: np.ndarray | None = None
    marker: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.event_us)


@dataclass(frozen=True)
class Emitted:
    """What a generator says about a block of rows.

    Attributes:
        watermark_us: ``W_p`` after each row (non-decreasing; ``NEG_INF`` while undefined).
        active_until_us: after each row, the arrival clock up to which the
            partition stays in the min (non-decreasing; ``None``: never idle).
        regressions: rows whose proposal was below the previous ``W_p``
            (ignored, so ``W_p`` stayed where it was).
    """

    watermark_us: np.ndarray
    active_until_us: np.ndarray | None = None
    regressions: int = 0


class WatermarkGenerator(Protocol):
    """Turns one partition's rows into its watermark ``W_p`` (SEMANTICS.md §2)."""

    def on_rows(self, rows: PartitionRows) -> Emitted:
        """Consume a block of the partition's rows; ``W_p`` after each."""
        ...

    @property
    def watermark_us(self) -> int:
        """``W_p`` after the last row consumed (``NEG_INF``: undefined)."""
        ...

    @property
    def reported(self) -> bool:
        """The partition has produced a row: it takes part in the min from now on."""
        ...

    @property
    def lateness_us(self) -> int | None:
        """The bound ``L`` in force (``None`` where the generator has none, e.g. punctuated)."""
        ...

    def active_until_us(self, start_clock_us: int) -> int:
        """Arrival clock up to which the partition counts as active (``POS_INF``: never idle).

        ``start_clock_us`` is the first arrival of the run: a declared
        partition that never reported is measured from there.
        """
        ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state; :meth:`restore` of it continues exactly where this left off."""
        ...

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Take over a :meth:`snapshot` (missing keys: the initial state)."""
        ...


def setting_text(us: int | None) -> str:
    """A duration setting as fingerprints and logs write it: ``unset``, ``0s``, ``1500ms``, ``2m``."""
    if us is None:
        return "unset"
    return format_duration_us(us) if us else "0s"


class GeneratorSpec(Protocol):
    """A frozen configuration that builds a partition's generator (``kind``: the strategy name).

    ``kind``, :meth:`build` and :meth:`check_inputs` are what every spec has.
    The rest have defaults for a spec that subclasses this protocol (every
    built-in one does; a new generator registered with
    ``core.watermarks.builder.register_strategy`` may): no marker column, no
    arrival clock needed by the configuration check, a what-if grid point
    that leaves it unchanged, its ``kind`` as its description.
    """

    # Why this generator needs source.arrival_time (the configuration refuses it without); None: it does not.
    arrival_needed_for: ClassVar[str | None] = None
    # Its bound L changes row by row (what-if lanes sample the range of L in force).
    lateness_varies: ClassVar[bool] = False

    @property
    def kind(self) -> str:
        """The strategy name (read-only: a class constant or a property)."""
        ...

    def build(self, snapshot: dict[str, Any] | None = None) -> WatermarkGenerator:
        """A new generator, restored from ``snapshot`` when given."""
        ...

    def check_inputs(self, has_arrival: bool, has_marker: bool) -> None:
        """Raise ``ValueError`` (one line) if the rows lack a column this generator needs."""
        ...

    def marker_column(self) -> str | None:
        """The boolean column whose rows are markers, not data (punctuated sources)."""
        return None

    def at_bound(self, bound_us: int) -> GeneratorSpec:
        """This generator at a what-if grid point ``L`` (default: unchanged, it has no bound to move)."""
        return self

    def describe(self) -> str:
        """A stable one-line text of every setting (part of the checkpoint's fingerprint: never reword it)."""
        return self.kind
