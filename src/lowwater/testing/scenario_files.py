"""Scenario tests as data: a YAML file per scenario, run through the pure core and through Spark.

A scenario file holds a configuration (the TOML as a mapping), each source's
rows in that source's arrival order (a whitespace table, see
:func:`lowwater.testing.scenario.table`), the cuttings to try (per source: the
row indices where a new micro-batch starts) and what must come out::

    description: the slowest source governs
    config: {source: [...], window: {...}, output: {path: out}}
    input:
      radar: |
        partition event_time arrival_time key amount
        0         1          1            a   1
    cuts:
      - {}                       # every source in one batch
      - {radar: [1, 2]}          # radar in three files, the others in one
    expect:
      results: |                 # finals and revisions (times in seconds)
        key window_start window_end kind revision count total
        a   0            10         final 0       2     3.0
      too_late: |                # too-late rows: source, partition, event_time
        source partition event_time
      counts: {on_time: 2, late_updates: 0, too_late: 0, dead_letter: 0}
      dead_letters:              # optional: (source, reason) of each dead letter
        - {source: radar, reason: missing event_time (event_time)}

Every part of ``expect`` is optional; counts are checked key by key
(:data:`COUNT_KEYS`; ``markers`` and ``regressions`` from the tracker). The
core path also reports ``W(r)`` per row, the ``L`` trajectory of each input
and the emit latency of each window, for the assertions that compare runs.

:func:`run_core` replays it with the core alone (arrival order, the tracker and
its generators, ``judge``, and a reference fold of the on-time rows and late
updates, accumulating); :func:`run_spark` runs it through the engine, once per
cutting. Both return an :class:`Observed`, compared with :func:`expected`, so
every scenario checks both paths.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lowwater.config import PipelineConfig, parse_config
from lowwater.core import partials
from lowwater.core.judge import account, arrival_order, clip_per_source, judge
from lowwater.core.lateness import Lateness
from lowwater.core.tracker import DEFAULT_SOURCE, WatermarkTracker
from lowwater.testing.scenario import table

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


def _plain_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


def load(path: str | Path) -> Scenario:
    p = Path(path)
    data = yaml.safe_load(p.read_text())
    sources = data["config"]["source"]
    names = [s["name"] for s in sources] if isinstance(sources, list) else [sources.get("name", "default")]
    inputs = {name: table(text) for name, text in (data.get("input") or {}).items()}
    for name in names:
        inputs.setdefault(name, [])
    return Scenario(
        name=p.stem,
        description=data.get("description", ""),
        config=data["config"],
        input=inputs,
        cuts=data.get("cuts") or [{}],
        expect=data.get("expect") or {},
    )


def _num(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, float) and v.is_integer():
        return float(v)
    return v


def expected(s: Scenario) -> Observed:
    """The scenario's ``expect`` section as an :class:`Observed` (missing parts: not checked -> None)."""
    e = s.expect
    results = None
    if "results" in e:
        results = sorted(
            (str(r["key"]), float(r["window_start"]), float(r["window_end"]), r["kind"], int(r["revision"]),
             int(r["count"]), *[_num(float(r[a])) if r[a] is not None else None for a in _agg_names(s)])
            for r in table(e["results"])
        ) if e["results"].strip() else []
    too_late = None
    if "too_late" in e:
        too_late = sorted(
            (str(r["source"]), str(r["partition"]), float(r["event_time"])) for r in table(e["too_late"])
        ) if len(e["too_late"].strip().splitlines()) > 1 else []
    dead = None
    if "dead_letters" in e:  # a list of {source, reason}
        dead = sorted((str(d["source"]), str(d["reason"])) for d in e["dead_letters"] or [])
    return Observed(results, too_late, dict(e.get("counts") or {}), dead)  # type: ignore[arg-type]


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
    for k, v in want.counts.items():
        if got.counts.get(k) != v:
            problems.append(f"{k}: got {got.counts.get(k)}, want {v}")
    return problems


# -- the pure core path ------------------------------------------------------------

# The engine's dead-letter reasons (spark/parse.py), in the order it checks them.
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


def run_core(s: Scenario) -> Observed:
    """Replay the whole log with the core alone (one batch, then drained: every window fires)."""
    cfg = s.pipeline()
    log = _log(s, cfg)
    n = len(log.rows)
    src_names, parts, rows = log.source, log.partition, log.rows
    sources = np.array(src_names, dtype=object)
    has_arrival = all(src.arrival_time for src in cfg.sources)
    offset = np.array(log.offset, dtype=np.int64)
    order = arrival_order(n, np.array(log.arrival, dtype=np.int64) if has_arrival else None,
                          np.array([f"{a}\x00{b}" for a, b in zip(src_names, parts, strict=True)], dtype=object),
                          offset, [offset])
    tracker = WatermarkTracker(cfg.strategies)
    markers = np.array(log.marker, dtype=bool)[order] if any(src.marker for src in cfg.sources) else None
    ordered = (np.array(parts, dtype=object)[order], np.array(log.event, dtype=np.int64)[order],
               np.array(log.arrival, dtype=np.int64)[order] if has_arrival else None)
    named = sources[order] if cfg.named_sources else None
    j = judge(tracker, cfg.window.assigner(), cfg.window.allowed_lateness_us, *ordered, sources=named, markers=markers)
    acc = account(j, len(log.dead))
    data_rows = order if j.data is None else order[j.data]
    results = _fold(cfg, [rows[i] for i in data_rows], j)
    return Observed(
        results=results,
        too_late=sorted(
            (src_names[i] if cfg.named_sources else "default", parts[i],
             float(rows[i][_source_of(cfg, src_names[i]).event_time]))
            for k, i in enumerate(data_rows.tolist()) if j.row_verdict[k] == Lateness.TOO_LATE
        ),
        counts={**acc.as_dict(), "markers": j.markers, "regressions": tracker.state.regressions_ignored},
        dead_letters=sorted(log.dead),
        watermarks=[int(w) for w in j.watermark_us],
        lateness=_lateness_trajectory(cfg, *ordered, named, markers),
        emit_latency=emit_latencies(
            [r[2] * 1e6 for r in results if r[3] == "final"], j.event_us,
            np.append(j.watermark_us[1:], tracker.watermark_us),
        ),
    )


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


def _source_of(cfg: PipelineConfig, name: str):  # noqa: ANN202
    return next(s for s in cfg.sources if s.name == name)


def _fold(cfg: PipelineConfig, rows: list[dict], j) -> list[tuple]:  # noqa: ANN001
    """Finals of the on-time rows and one revision per late-update pair (accumulating; every window fires)."""
    aggs = cfg.window.aggregations
    key_cols = cfg.window.key
    on: dict[tuple, list[int]] = defaultdict(list)
    late: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for p in range(len(j.pairs.row)):
        r = int(j.pairs.row[p])
        win = (tuple(str(rows[r][k]) for k in key_cols), int(j.pairs.start[p]), int(j.pairs.end[p]))
        if j.verdict[p] == Lateness.ON_TIME:
            on[win].append(r)
        elif j.verdict[p] == Lateness.LATE_UPDATE:
            late[win].append((int(j.seq[r]), r))
    out = []

    def value(members: list[int]) -> list:
        """Each aggregate read from the partial of the members' values (``core/partials.py``)."""
        vals = []
        for a in aggs:
            xs = [float(rows[r][a.column]) for r in members if rows[r].get(a.column) is not None]
            v = partials.output(a.func, partials.of_rows(((x,) for x in xs), 1), 0)
            vals.append(None if v is None else float(v))
        return vals

    for win in sorted(set(on) | set(late)):
        members = list(on.get(win, []))
        key = "|".join(win[0])
        if members:
            out.append((key, win[1] / 1e6, win[2] / 1e6, "final", 0, len(members), *value(members)))
        for k, (_, r) in enumerate(sorted(late.get(win, [])), start=1):
            members.append(r)
            out.append((key, win[1] / 1e6, win[2] / 1e6, "revision", k, len(members), *value(members)))
    return sorted(out, key=lambda t: tuple((x is None, x) for x in t))
