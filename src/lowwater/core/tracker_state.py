"""What the watermark tracker carries between batches, and how it names its inputs.

Kept apart from ``core/tracker.py`` (the algorithm) because the manifest, the
metrics and the what-if replays read these records without running a tracker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lowwater.time import NEG_INF

DEFAULT_SOURCE = "default"
"""The source name of a tracker built from one strategy (a pipeline with a single ``[source]``)."""

_COLUMNS = ("max_event_us", "last_arrival_us")  # generator state kept in TrackerState's own columns


@dataclass
class TrackerState:
    """Everything the watermark needs to carry from one batch to the next (the manifest's ``tracker``).

    Per input ``i`` (a partition of a source): ``partitions[i]``, its running
    max event time and last arrival, and, for generators that carry more
    (punctuated, adaptive), ``generators[i]``. ``sources`` is ``None`` when the
    tracker has one source, so a single-source state has the JSON it always had.
    """

    partitions: list[str] = field(default_factory=list)
    max_event_us: list[int] = field(default_factory=list)
    last_arrival_us: list[int] = field(default_factory=list)
    watermark_us: int = NEG_INF
    clock_us: int = NEG_INF
    start_clock_us: int = NEG_INF
    rows_seen: int = 0
    regressions_ignored: int = 0
    sources: list[str] | None = None
    generators: list[dict[str, Any]] | None = None

    def to_json(self) -> dict:
        """The state as JSON-able data, for the checkpoint's manifest (:meth:`from_json` reads it back)."""
        data = asdict(self)
        for key in ("sources", "generators"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict) -> TrackerState:
        """The state :meth:`to_json` wrote."""
        return cls(**data)

    def snapshot_of(self, i: int) -> dict[str, Any]:
        """Input ``i``'s generator snapshot, reassembled from the columns."""
        extra = self.generators[i] if self.generators is not None else {}
        return {"max_event_us": self.max_event_us[i], "last_arrival_us": self.last_arrival_us[i], **extra}

    def keep_snapshot(self, i: int, snapshot: dict[str, Any]) -> None:
        """Store input ``i``'s generator snapshot (its last arrival is the tracker's own column)."""
        self.max_event_us[i] = int(snapshot.get("max_event_us", NEG_INF))
        extra = {k: v for k, v in snapshot.items() if k not in _COLUMNS}
        if extra and self.generators is None:
            self.generators = [{} for _ in self.partitions]
        if self.generators is not None:
            self.generators[i] = extra


@dataclass(frozen=True)
class PartitionCodes:
    """Partition names of a batch as (distinct names, code per row): coded once, used by many trackers."""

    names: list[str]
    codes: np.ndarray

    @classmethod
    def of(cls, partitions: np.ndarray) -> PartitionCodes:
        values = np.asarray(partitions)
        if not len(values):
            return cls([], np.zeros(0, dtype=np.int64))
        uniq, inverse = np.unique(values, return_inverse=True)
        return cls([str(u) for u in uniq], inverse.reshape(-1).astype(np.int64))

    def __len__(self) -> int:
        return len(self.codes)


@dataclass(frozen=True)
class PartitionStatus:
    """One input's watermark, whether it currently counts in the min, and its ``L`` in force."""

    partition: str
    watermark_us: int
    active: bool
    source: str = DEFAULT_SOURCE
    lateness_us: int | None = None
