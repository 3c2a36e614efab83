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
from lowwater.core.judge import account, arrival_order, judge
from lowwater.core.lateness import Lateness
from lowwater.core.tracker import WatermarkTracker
from lowwater.testing.scenario import table

COUNT_KEYS = ("rows", "on_time", "late_updates", "too_late", "dead_letter", "clipped", "markers")


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
    return Observed(results, too_late, dict(e.get("counts") or {}))  # type: ignore[arg-type]


def _agg_names(s: Scenario) -> list[str]:
    return list((s.config.get("window") or {}).get("aggregations", {}).keys())


def compare(got: Observed, want: Observed) -> list[str]:
    """Differences, as readable lines (empty: the run matches)."""
    problems = []
    if want.results is not None and got.results != want.results:
        problems.append(f"results differ:\n  got  {got.results}\n  want {want.results}")
    if want.too_late is not None and got.too_late != want.too_late:
        problems.append(f"too-late rows differ:\n  got  {got.too_late}\n  want {want.too_late}")
    for k, v in want.counts.items():
        if got.counts.get(k) != v:
            problems.append(f"{k}: got {got.counts.get(k)}, want {v}")
    return problems


# -- the pure core path ------------------------------------------------------------


def run_core(s: Scenario) -> Observed:
    """Replay the whole log with the core alone (one batch, then drained: every window fires)."""
    cfg = s.pipeline()
    rows, src_names, parts, event, arrival, offset, marker = [], [], [], [], [], [], []
    dead = 0
    for src in cfg.sources:
        for i, r in enumerate(s.input[src.name]):
            is_marker = bool(r.get(src.marker)) if src.marker else False
            ev = r.get(src.event_time)
            if ev is None:
                dead += 1
                continue
            rows.append(r)
            src_names.append(src.name)
            parts.append(str(r.get(src.partition, "0")) if src.partition else "0")
            event.append(round(float(ev) * src.unit_us))
            arrival.append(round(float(r[src.arrival_time]) * src.unit_us) if src.arrival_time else i)
            offset.append(i)
            marker.append(is_marker)
    n = len(rows)
    sources = np.array(src_names, dtype=object)
    has_arrival = all(src.arrival_time for src in cfg.sources)
    order = arrival_order(n, np.array(arrival, dtype=np.int64) if has_arrival else None,
                          np.array([f"{a}\x00{b}" for a, b in zip(src_names, parts, strict=True)], dtype=object),
                          np.array(offset, dtype=np.int64), [np.array(offset, dtype=np.int64)])
    tracker = WatermarkTracker(cfg.strategies)
    markers = np.array(marker, dtype=bool)[order] if any(src.marker for src in cfg.sources) else None
    j = judge(
        tracker, cfg.window.assigner(), cfg.window.allowed_lateness_us, np.array(parts, dtype=object)[order],
        np.array(event, dtype=np.int64)[order], np.array(arrival, dtype=np.int64)[order] if has_arrival else None,
        sources=sources[order] if cfg.named_sources else None, markers=markers,
    )
    acc = account(j, dead)
    data_rows = order if j.data is None else order[j.data]
    return Observed(
        results=_fold(cfg, [rows[i] for i in data_rows], j),
        too_late=sorted(
            (src_names[i] if cfg.named_sources else "default", parts[i],
             float(rows[i][_source_of(cfg, src_names[i]).event_time]))
            for k, i in enumerate(data_rows.tolist()) if j.row_verdict[k] == Lateness.TOO_LATE
        ),
        counts={**acc.as_dict(), "markers": j.markers},
    )


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
        vals = []
        for a in aggs:
            xs = [float(rows[r][a.column]) for r in members if rows[r].get(a.column) is not None]
            if a.func == "count":
                vals.append(float(len(xs)))
            elif not xs:
                vals.append(None)
            else:
                vals.append(float({"sum": sum, "min": min, "max": max}.get(a.func, lambda v: sum(v) / len(v))(xs)))
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
