"""What a scenario run shares between its paths: the scenario, what a run produced, and how to compare.

The files are transcripts (``testing/transcripts.py`` describes the format
and loads them). A :class:`Scenario` is one transcript's configuration, its
rows per source and its expectations; :class:`Observed` is what a run
produced, in the form both paths share: ``testing/transcript_core.py`` (the
pure core) and ``testing/scenario_spark.py`` (the engine) each return one, and
:func:`compare` holds it to the expectations. The core path also reports
``W(r)`` per row, the ``L`` trajectory of each input and the emit latency of
each window, for the assertions that compare runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowwater.config import PipelineConfig, parse_config
from lowwater.core.judge import clip_per_source
from lowwater.core.tracker import DEFAULT_SOURCE, WatermarkTracker

COUNT_KEYS = ("rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "markers", "regressions")


@dataclass
class Scenario:
    name: str
    description: str
    config: dict[str, Any]
    input: dict[str, list[dict[str, Any]]]
    cuts: list[dict[str, list[int]]]
    expect: dict[str, Any]

    def pipeline(self, base_dir: str | Path = ".") -> PipelineConfig:
        return parse_config(_plain_copy(self.config), base_dir=base_dir)


@dataclass
class Observed:
    """What a run produced, in a form both paths share (times in seconds)."""

    results: list[tuple] = field(default_factory=list)  # (key, start, end, kind, revision, count, *aggs)
    too_late: list[tuple] = field(default_factory=list)  # (source, partition, event_time)
    counts: dict[str, int] = field(default_factory=dict)
    dead_letters: list[tuple] | None = None  # (source, reason)
    watermarks: list[int] = field(default_factory=list)  # W(r) per data row in arrival order, µs (core path)
    lateness: dict[str, list[float]] = field(default_factory=dict)  # "source/partition" -> L after each row, s
    emit_latency: list[float] = field(default_factory=list)  # per (key, window) fired before the drain, s
    # Each too-late (row, window): (source, partition, event_time, window start, end, W(r)), seconds.
    too_late_windows: list[tuple] | None = None
    # Per micro-batch: (W after it in seconds or None while undefined, its result rows, its too-late rows).
    steps: list[tuple] = field(default_factory=list)


def _plain_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


def _num(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, float) and v.is_integer():
        return float(v)
    return v


def _agg_names(s: Scenario) -> list[str]:
    return list((s.config.get("window") or {}).get("aggregations", {}).keys())


def compare(got: Observed, want: Observed) -> list[str]:
    """Differences, as readable lines (empty: the run matches)."""
    problems = []
    if want.results is not None and got.results != want.results:
        problems.append(f"results differ:\n  got  {got.results}\n  want {want.results}")
    if want.too_late is not None and got.too_late != want.too_late:
        problems.append(f"too-late rows differ:\n  got  {got.too_late}\n  want {want.too_late}")
    if want.dead_letters is not None and got.dead_letters != want.dead_letters:
        problems.append(f"dead letters differ:\n  got  {got.dead_letters}\n  want {want.dead_letters}")
    if want.too_late_windows is not None and got.too_late_windows != want.too_late_windows:
        problems.append(f"too-late windows differ:\n  got  {got.too_late_windows}\n  want {want.too_late_windows}")
    for k, v in want.counts.items():
        if got.counts.get(k) != v:
            problems.append(f"{k}: got {got.counts.get(k)}, want {v}")
    return problems


# -- the pure core path ------------------------------------------------------------

# The engine's dead-letter reasons (io/parse.py), in the order it checks them.
MARKER_WITHOUT_EVENT_TIME = "marker row without event_time"


def _dead_reason(src, r: dict[str, Any]) -> str | None:  # noqa: ANN001
    """Why the engine would send row ``r`` of ``src`` to the dead letters (None: it is valid)."""
    if src.marker and bool(r.get(src.marker)) and r.get(src.event_time) is None:
        return f"{MARKER_WITHOUT_EVENT_TIME} ({src.event_time})"
    if r.get(src.event_time) is None:
        return f"missing event_time ({src.event_time})"
    if src.partition and r.get(src.partition) is None:
        return f"missing partition ({src.partition})"
    if src.arrival_time and r.get(src.arrival_time) is None:
        return f"missing arrival_time ({src.arrival_time})"
    return None


@dataclass
class _Log:
    """The valid rows of every source, each source in its own arrival order, then dead letters."""

    rows: list[dict] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    partition: list[str] = field(default_factory=list)
    event: list[int] = field(default_factory=list)
    arrival: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    marker: list[bool] = field(default_factory=list)
    dead: list[tuple[str, str]] = field(default_factory=list)  # (source, reason)


def _log(s: Scenario, cfg: PipelineConfig) -> _Log:
    log = _Log()
    for src in cfg.sources:
        for i, r in enumerate(s.input[src.name]):
            reason = _dead_reason(src, r)
            if reason is not None:
                log.dead.append((src.name if cfg.named_sources else "default", reason))
                continue
            log.rows.append(r)
            log.source.append(src.name)
            log.partition.append(str(r[src.partition]) if src.partition else "0")
            log.event.append(round(float(r[src.event_time]) * src.unit_us))
            log.arrival.append(round(float(r[src.arrival_time]) * src.unit_us) if src.arrival_time else i)
            log.offset.append(i)
            log.marker.append(bool(r.get(src.marker)) if src.marker else False)
    return log


def _lateness_trajectory(cfg: PipelineConfig, parts: np.ndarray, event: np.ndarray, arrival: np.ndarray | None,
                         sources: np.ndarray | None, markers: np.ndarray | None) -> dict[str, list[float]]:
    """The ``L`` in force for each input (``source/partition``) after each of its rows, in seconds.

    Read from a second tracker fed one row at a time (the same ``W`` and ``L``
    as one batch, SEMANTICS.md §8); inputs without an ``L`` (punctuated) are left out.
    """
    tracker = WatermarkTracker(cfg.strategies)
    skew = {name: st.max_future_skew_us for name, st in tracker.strategies.items()}
    out: dict[str, list[float]] = defaultdict(list)
    for k in range(len(parts)):
        one = slice(k, k + 1)
        src = None if sources is None else sources[one]
        ev, _ = clip_per_source(event[one], None if arrival is None else arrival[one], skew, src)
        tracker.advance(parts[one], ev, None if arrival is None else arrival[one], sources=src,
                        markers=None if markers is None else markers[one])
        name = DEFAULT_SOURCE if sources is None else str(sources[k])
        status = next(x for x in tracker.statuses() if x.source == name and x.partition == str(parts[k]))
        if status.lateness_us is not None:
            out[f"{name}/{parts[k]}"].append(status.lateness_us / 1e6)
    return dict(out)


def emit_latencies(window_ends_us: list[float], event_us: np.ndarray, w_after_us: np.ndarray) -> list[float]:
    """Emit latency of each window (SEMANTICS.md §7), seconds; windows only a drain fires are left out.

    A window fires at the first row in arrival order after which ``W >= end``;
    its latency is ``maxEventTimeSeen - end`` at that moment. ``event_us`` and
    ``w_after_us`` (``W`` after each row) are over the data rows in arrival order.

    >>> emit_latencies([10e6, 20e6, 30e6], np.array([5, 12, 25]) * 10**6, np.array([0, 10, 20]) * 10**6)
    [2.0, 5.0]
    """
    seen = np.maximum.accumulate(np.asarray(event_us, dtype=np.int64)) if len(event_us) else event_us
    w_after = np.asarray(w_after_us, dtype=np.int64)
    # W after each row never decreases: the first row that fires a window is a binary search.
    at = np.searchsorted(w_after, np.asarray(window_ends_us, dtype=np.int64), side="left")
    return [float(seen[k] - end) / 1e6 for k, end in zip(at.tolist(), window_ends_us, strict=True) if k < len(w_after)]
