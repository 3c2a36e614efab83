"""The one metrics model: every figure lowwater exports, defined once, and how each is read off a step.

A step's ``metrics/`` row (``spark/metrics.py``: the columns SEMANTICS.md §7
defines, one row per step) and the checkpoint's running totals are the only
inputs. :data:`FIGURES` names every figure once -- its Prometheus name, type,
labels and help -- and :func:`samples` turns one step into the samples of all
of them. The exporters only translate:

* ``metrics/`` Parquet is the row itself (its columns are not changed here);
* Prometheus (``observe/prometheus.py``) renders :func:`samples`;
* Spark's own progress (``observe/spark_progress.py``) carries :func:`progress_figures`,
  the unlabelled figures flattened into one struct.

Units: seconds (float) for watermarks (since the epoch), lags, spreads and
durations; rows and bytes as counts. A watermark that is undefined (no input
reported yet) has no sample; a drained one (``W = +inf``) is the largest
timestamp ``metrics/`` can hold, as in the row.

Names follow Prometheus conventions: ``lowwater_`` prefix, base units in the
name (``_seconds``, ``_bytes``, ``_ratio``), ``_total`` for counters (the
checkpoint's running totals, so a restart does not reset them). The rows of
the four accounting classes of SEMANTICS.md §6 add up to the input:
``lowwater_rows_total{class}`` has exactly those four classes, so a
``sum by ()`` over it is the input count; clipped rows and markers, which
overlap or are not data, are their own counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Kind = Literal["gauge", "counter", "histogram"]

# Step duration histogram buckets (s): a micro-batch takes ~0.1 s to minutes.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

# The four accounting classes (SEMANTICS.md §6): label value -> metrics/ column (and running total).
ROW_CLASSES = {"on_time": "on_time", "late_update": "late_updates", "too_late": "too_late",
               "dead_letter": "dead_letter"}


@dataclass(frozen=True)
class Figure:
    """One exported figure: its Prometheus name, type, labels, help, and the ``metrics/`` column it reads.

    ``column`` is the metrics row's column (``None``: derived or a running
    total, see :func:`samples`); ``progress`` is the field name in Spark's
    progress (``None``: not carried there, e.g. labelled per partition).
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    column: str | None = None
    progress: str | None = None


FIGURES: tuple[Figure, ...] = (
    Figure("lowwater_low_watermark_seconds", "gauge", "The pipeline's low watermark W (s since the epoch).",
           column="low_watermark", progress="low_watermark_s"),
    Figure("lowwater_output_watermark_seconds", "gauge",
           "An interval join's output watermark: W held back by the rows it buffers (join pipelines only).",
           column="output_watermark", progress="output_watermark_s"),
    Figure("lowwater_watermark_seconds", "gauge", "Each partition's watermark W_p (s since the epoch).",
           ("source", "partition"), column="partition_watermarks"),
    Figure("lowwater_source_watermark_seconds", "gauge",
           "Each source's own low watermark (several sources only; s since the epoch).", ("source",),
           column="source_watermarks"),
    Figure("lowwater_partition_idle", "gauge", "1 if the partition is idle (excluded from the min), else 0.",
           ("source", "partition"), column="idle_partitions"),
    Figure("lowwater_partition_holding", "gauge", "1 for the partition holding W back, 0 for the others.",
           ("source", "partition"), column="holding_partition"),
    Figure("lowwater_partition_lateness_seconds", "gauge", "The bound L in force per partition.",
           ("source", "partition"), column="partition_lateness_s"),
    Figure("lowwater_partition_spread_seconds", "gauge",
           "Max partition watermark minus min over active partitions.", column="spread_s", progress="spread_s"),
    Figure("lowwater_watermark_lag_seconds", "gauge",
           "Clock minus W: the step's latest arrival time if the source has one, else the wall clock.",
           column="watermark_lag_s", progress="watermark_lag_s"),
    Figure("lowwater_late_rate_ratio", "gauge", "Too-late rows / valid rows of the last step.",
           progress="late_rate"),
    Figure("lowwater_input_rows_per_second", "gauge", "Rows of the last step / its duration.",
           progress="input_rows_per_s"),
    Figure("lowwater_open_windows", "gauge", "Open (window, key) entries in state.", column="open_windows",
           progress="open_windows"),
    Figure("lowwater_state_bytes", "gauge", "Bytes of the open window state.", column="state_bytes",
           progress="state_bytes"),
    Figure("lowwater_held_rows", "gauge", "Rows held behind the arrival frontier (several sources).",
           column="held_rows", progress="held_rows"),
    Figure("lowwater_spark_batch", "gauge", "The Spark batch id of the last step.", column="spark_batch",
           progress="spark_batch"),
    Figure("lowwater_step_duration_seconds", "histogram", "Wall time of a step.", column="duration_s",
           progress="duration_s"),
    Figure("lowwater_rows_total", "counter", "Input rows by accounting class (the classes add up to the input).",
           ("class",)),
    Figure("lowwater_input_rows_total", "counter", "Input rows.", column="rows", progress="rows"),
    Figure("lowwater_clipped_rows_total", "counter", "Rows whose event time was clipped to their arrival time.",
           column="clipped", progress="clipped"),
    Figure("lowwater_markers_total", "counter", "Marker rows consumed (punctuated sources; not data).",
           column="markers", progress="markers"),
    Figure("lowwater_watermark_regressions_total", "counter", "Watermark proposals ignored (W is monotone).",
           column="regressions", progress="regressions"),
    Figure("lowwater_windows_fired_total", "counter", "Windows fired.", column="windows_fired",
           progress="windows_fired"),
    Figure("lowwater_revisions_total", "counter", "Revisions of windows already emitted.", column="revisions",
           progress="revisions"),
    Figure("lowwater_out_of_order_files_total", "counter", "Files read out of name order.",
           column="out_of_order_files"),
    Figure("lowwater_arrival_regressions_total", "counter",
           "Steps with input landed out of its source's arrival order.", column="arrival_regressions"),
)
BY_NAME = {f.name: f for f in FIGURES}


@dataclass(frozen=True)
class Sample:
    """One value of one figure (a histogram's step duration is one observation, see :class:`Histogram`)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class Histogram:
    """Cumulative bucket counts of the step duration since the process started (Prometheus semantics)."""

    buckets: tuple[float, ...] = DURATION_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        """Count one step's duration into the first bucket whose upper bound holds it (+Inf last)."""
        i = next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))
        self.counts[i] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs, cumulative, ending with ``+Inf`` (what a Prometheus histogram exposes)."""
        out, running = [], 0
        for b, c in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += c
            out.append(("+Inf" if b == float("inf") else repr(b), running))
        return out


def seconds(value: Any) -> float | None:
    """A metrics value as seconds: a datetime since the epoch, a number as is, ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def split_name(name: str, source: str, several: bool) -> tuple[str, str]:
    """``(source, partition)`` of a metrics partition name (``source/partition`` with several sources)."""
    if several and "/" in name:
        src, _, part = name.partition("/")
        return src, part
    return source, name


def late_rate(row: Mapping[str, Any]) -> float | None:
    """Too-late rows / valid rows (SEMANTICS.md §7) of the step; ``None`` when it had no valid row."""
    valid = (row.get("rows") or 0) - (row.get("dead_letter") or 0)
    return None if valid <= 0 else (row.get("too_late") or 0) / valid


def input_rate(row: Mapping[str, Any]) -> float | None:
    """Rows per second of the step's wall time (``None`` for an instant step)."""
    d = row.get("duration_s") or 0.0
    return None if d <= 0 else (row.get("rows") or 0) / d


def _pairs(value: Any) -> list[tuple[str, Any]]:
    """A metrics map column as ``(key, value)`` pairs (the row holds lists of pairs; Spark gives dicts)."""
    if value is None:
        return []
    return list(value.items()) if isinstance(value, Mapping) else list(value)


def samples(row: Mapping[str, Any], totals: Mapping[str, int], source: str = "", several: bool = False
            ) -> list[Sample]:
    """Every sample of :data:`FIGURES` (except the histogram) after one step.

    Args:
        row: the step's ``metrics/`` row (``spark.metrics.metrics_row``), or the same read back.
        totals: the checkpoint's running totals after the step (``spark.step.add_totals``); counters
            read them, so they count everything the checkpoint processed.
        source: the source name for the ``source`` label of a single-source pipeline.
        several: partition names are ``source/partition`` (several sources).
    """
    out: list[Sample] = []

    def add(name: str, value: Any, **labels: str) -> None:
        v = seconds(value)
        if v is not None:
            out.append(Sample(name, tuple(labels.items()), v))

    names = [n for n, _ in _pairs(row.get("partition_watermarks"))]
    idle = set(row.get("idle_partitions") or ())
    for n, w in _pairs(row.get("partition_watermarks")):
        src, part = split_name(n, source, several)
        add("lowwater_watermark_seconds", w, source=src, partition=part)
    for n in names:
        src, part = split_name(n, source, several)
        add("lowwater_partition_idle", 1.0 if n in idle else 0.0, source=src, partition=part)
        add("lowwater_partition_holding", 1.0 if n == row.get("holding_partition") else 0.0, source=src,
            partition=part)
    for n, lateness in _pairs(row.get("partition_lateness_s")):
        src, part = split_name(n, source, several)
        add("lowwater_partition_lateness_seconds", lateness, source=src, partition=part)
    for src, w in _pairs(row.get("source_watermarks")):
        add("lowwater_source_watermark_seconds", w, source=src)
    add("lowwater_late_rate_ratio", late_rate(row))
    add("lowwater_input_rows_per_second", input_rate(row))
    for f in FIGURES:
        if f.kind == "gauge" and not f.labels and f.column is not None:  # one value a step, read as is
            add(f.name, row.get(f.column))
        elif f.kind == "counter" and f.column is not None:
            add(f.name, totals.get(f.column, 0))
    for label, column in ROW_CLASSES.items():
        out.append(Sample("lowwater_rows_total", (("class", label),), float(totals.get(column, 0))))
    return out


def progress_figures(row: Mapping[str, Any], totals: Mapping[str, int]) -> dict[str, float | str | None]:
    """The unlabelled figures under their ``progress`` names, plus the holding partition (Spark's progress).

    Counters carry the step's own count here (``rows``, ``too_late``, ...; a
    progress event is per batch, as Spark's ``numInputRows``); the step's
    four accounting classes are added under their ``metrics/`` column names.
    """
    out: dict[str, float | str | None] = {}
    for f in FIGURES:
        if f.progress is None:
            continue
        if f.column is not None:
            out[f.progress] = seconds(row.get(f.column))
    out["late_rate"] = late_rate(row)
    out["input_rows_per_s"] = input_rate(row)
    for column in ROW_CLASSES.values():
        out[column] = seconds(row.get(column))
    out["holding_partition"] = row.get("holding_partition")
    out["idle_partitions"] = ",".join(row.get("idle_partitions") or ())
    return out


def figure_names(kinds: Iterable[Kind] = ("gauge", "counter", "histogram")) -> list[str]:
    """The Prometheus names of the figures of the given kinds (docs and tests list them from here)."""
    return [f.name for f in FIGURES if f.kind in kinds]
