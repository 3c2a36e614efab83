"""Interval-join scenarios as data (``tests/scenarios/join/*.yaml``), run through the core and through Spark.

A join scenario is a transcript (``testing/transcripts.py``) whose
configuration has a ``join`` table instead of a ``window``; its ``expect``
names what the join must emit::

    expect:
      joined:               # key, both event times (s); null for the missing right side of left_outer
        - {key: u1, left_event_time: 10, right_event_time: 25}
      too_late:             # rows too late for the join
        - {source: orders, event_time: 3}
      counts: {left: {matched: 2, unmatched: 1, too_late: 0}, right: {...}}
      results:              # with a [window] after the join: its results, as in a transcript
        - {key: A, window: [0, 10], kind: final, revision: 0, count: 2, orders: 2}

:func:`run_core` replays the log in arrival order through the tracker (``W(r)``
over both sources) and :class:`~lowwater.core.join.IntervalJoin`, cut into
batches at the given positions of the arrival order, then drains; with a
``[window]`` the joined rows go through the windows after the join
(:func:`~lowwater.core.join_windows.run_joined_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from lowwater.config import PipelineConfig
from lowwater.config.join import JoinConfig
from lowwater.core.aggregates import input_index
from lowwater.core.join import Joined, JoinRow, Side, run_batch
from lowwater.core.join_windows import JoinWindows, WindowResult, run_joined_batch
from lowwater.core.join_windows import drain as drain_windows
from lowwater.core.judge import arrival_order, clip_per_source
from lowwater.core.partials import output
from lowwater.core.temporal_join import new_join
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.triggers import AccumulationMode
from lowwater.testing.outputs import read_output
from lowwater.testing.scenario_files import Scenario, _agg_names, _log, _num
from lowwater.testing.transcripts import _results, load

JOIN_COUNT_KEYS = ("rows", "matched", "unmatched", "too_late", "dead_letter")


@dataclass
class JoinObserved:
    """What a join emitted, in a form the core and Spark paths share (times in seconds)."""

    joined: list[tuple] = field(default_factory=list)  # (key, left_event_time, right_event_time | None)
    too_late: list[tuple] = field(default_factory=list)  # (source, event_time)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # side -> counts
    max_open_rows: int = 0  # the most rows buffered after any batch (core path)
    output_watermarks: list[int] = field(default_factory=list)  # held output W after each batch, µs
    results: list[tuple] = field(default_factory=list)  # windows after the join: transcript result rows


def one_batch_clock(cfg: PipelineConfig, inputs: dict[str, list[dict]],
                    ) -> tuple[list[tuple[str, dict]], np.ndarray, np.ndarray, np.ndarray]:
    """Both join inputs' rows read as one batch, for brute-force references: (rows as (source, row), their
    arrival order, event times and ``W(r)`` in that order). Times in the rows are seconds."""
    jc = cfg.join
    assert jc is not None
    rows = [(name, r) for name in (jc.left, jc.right) for r in inputs[name]]
    arrival = np.array([round(r["arrival_time"] * 1_000_000) for _, r in rows], dtype=np.int64)
    parts = np.array([f"{n}\x00{r['partition']}" for n, r in rows], dtype=object)
    offset = np.array([i for name in (jc.left, jc.right) for i in range(len(inputs[name]))], dtype=np.int64)
    order = arrival_order(len(rows), arrival, parts, offset, [offset])
    event = np.array([round(r["event_time"] * 1_000_000) for _, r in rows], dtype=np.int64)[order]
    w = WatermarkTracker(cfg.strategies).advance(
        np.array([str(rows[i][1]["partition"]) for i in order], dtype=object), event, arrival[order],
        sources=np.array([rows[i][0] for i in order], dtype=object))
    return rows, order, event, w


def load_join(path: str | Path) -> Scenario:
    return load(path)


def expected(s: Scenario) -> JoinObserved:
    e = s.expect

    def secs(v: object) -> float | None:
        return None if v is None else float(v)  # type: ignore[arg-type]

    joined = sorted(((str(r["key"]), secs(r["left_event_time"]), secs(r["right_event_time"]))
                     for r in e.get("joined") or []), key=_sort_key)
    late = sorted((str(r["source"]), float(r["event_time"])) for r in e.get("too_late") or [])
    return JoinObserved(joined, late, {k: dict(v) for k, v in (e.get("counts") or {}).items()},
                        results=_results(e.get("results"), _agg_names(s)))


def _sort_key(t: tuple) -> tuple:
    return tuple((x is None, x) for x in t)


def compare(got: JoinObserved, want: JoinObserved, s: Scenario) -> list[str]:
    problems = []
    if "joined" in s.expect and got.joined != want.joined:
        problems.append(f"joined differ:\n  got  {got.joined}\n  want {want.joined}")
    if "too_late" in s.expect and got.too_late != want.too_late:
        problems.append(f"too-late rows differ:\n  got  {got.too_late}\n  want {want.too_late}")
    if "results" in s.expect and got.results != want.results:
        problems.append(f"window results differ:\n  got  {got.results}\n  want {want.results}")
    for side, counts in want.counts.items():
        for k, v in counts.items():
            if got.counts.get(side, {}).get(k) != v:
                problems.append(f"{side}.{k}: got {got.counts.get(side, {}).get(k)}, want {v}")
    return problems


def run_core(s: Scenario, cuts: list[int] | None = None, drain: bool = True) -> JoinObserved:
    """The log through the tracker and the join, cut at ``cuts`` (positions in the arrival order)."""
    return run_join_log(s.pipeline(), s.input, cuts, drain)


def run_join_log(cfg: PipelineConfig, inputs: dict[str, list[dict]], cuts: list[int] | None = None,
                 drain: bool = True) -> JoinObserved:
    assert cfg.join is not None
    jc = cfg.join
    s = Scenario("log", "", {}, inputs, [{}], {})
    log = _log(s, cfg)
    n = len(log.rows)
    names = np.array(log.source, dtype=object)
    offset = np.array(log.offset, dtype=np.int64)
    order = arrival_order(n, np.array(log.arrival, dtype=np.int64),
                          np.array([f"{a}\x00{b}" for a, b in zip(log.source, log.partition, strict=True)],
                                   dtype=object), offset, [offset])
    tracker = WatermarkTracker(cfg.strategies)
    skew = {name: st.max_future_skew_us for name, st in tracker.strategies.items()}
    parts = np.array(log.partition, dtype=object)[order]
    arrival = np.array(log.arrival, dtype=np.int64)[order]
    sources = names[order]
    event, _ = clip_per_source(np.array(log.event, dtype=np.int64)[order], arrival, skew, sources)
    join = new_join(jc.kind, jc.bounds, jc.type)
    by_source = {src.name: src for src in cfg.sources}
    for name, _reason in log.dead:
        side = jc.side_of(name)
        if side is not None:
            join.count_dead_letters(Side(side), 1)
    rows = []
    for k, i in enumerate(order.tolist()):
        side = Side(jc.side_of(log.source[i]) or "left")
        r = log.rows[i]
        rows.append(JoinRow(side, tuple(r[c] for c in jc.on), int(event[k]), k,
                            tuple(r.get(c) for c in (jc.left_columns if side == Side.LEFT else jc.right_columns))))
    out = JoinObserved()
    emitted, late = [], []
    windows = _windows(jc)
    results: list[WindowResult] = []
    bounds = [0, *sorted(c for c in set(cuts or []) if 0 < c < n), n]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        w = tracker.advance(parts[lo:hi], event[lo:hi], arrival[lo:hi], sources=sources[lo:hi])
        if windows is None:
            got = run_batch(join, rows[lo:hi], w, tracker.watermark_us)
        else:
            got = run_joined_batch(join, windows, partial(_columns_of, jc), rows[lo:hi], w, tracker.watermark_us)
            results += got.results
        emitted += got.emitted if windows is None else got.joined
        late += got.too_late
        out.max_open_rows = max(out.max_open_rows, join.state.open_rows)
        out.output_watermarks.append(join.output_watermark(tracker.watermark_us))
    if drain and windows is not None:
        got = drain_windows(join, windows, partial(_columns_of, jc))
        emitted += got.joined
        results += got.results
    elif drain:
        emitted += join.drain()
    out.results = _result_rows(jc, results)
    join.check()
    src_of = {Side.LEFT: jc.left, Side.RIGHT: jc.right}

    def secs(us: int) -> float:
        return us / 1e6

    out.joined = sorted(
        ("|".join(str(x) for x in p.left.key), secs(p.left.event_us),
         None if p.right is None else secs(p.right.event_us))
        for p in emitted
    )
    out.joined.sort(key=_sort_key)
    out.too_late = sorted(
        (src_of[t.row.side], float(log.rows[order[t.row.seq]][by_source[src_of[t.row.side]].event_time]))
        for t in late
    )
    out.counts = {side.value: c.as_dict() for side, c in join.counts().items()}
    return out


def _windows(jc: JoinConfig) -> JoinWindows | None:
    """The windows after the join (None without a [window])."""
    if jc.window is None:
        return None
    w = jc.window
    return JoinWindows(w.assigner(), w.allowed_lateness_us, w.value_inputs, AccumulationMode(w.accumulation))


def _columns_of(jc: JoinConfig, j: Joined) -> tuple[tuple, dict]:
    """A joined row's window key and its columns by name (a missing right side: nulls)."""
    values = dict(zip(jc.on, j.left.key, strict=True))
    values.update(zip(jc.left_columns, j.left.values, strict=True))
    values.update(zip(jc.right_columns, j.right.values if j.right is not None else [None] * len(jc.right_columns),
                      strict=True))
    assert jc.window is not None
    return tuple(values[c] for c in jc.window.key), values


def _result_rows(jc: JoinConfig, results: list[WindowResult]) -> list[tuple]:
    """The windows' emissions as transcript result rows (key, start, end, kind, revision, count, *aggs)."""
    if jc.window is None:
        return []
    rows = []
    inputs = jc.window.value_inputs
    for r in results:
        flat = [r.count, *[x for v in r.values for x in v.parts[1:]]]  # every value input's partial
        values = [output(a.func, flat, input_index(inputs, a), a.fraction) for a in jc.window.aggregations]
        rows.append(("|".join(str(k) for k in r.key), r.start_us / 1e6, r.end_us / 1e6, r.kind, r.revision, r.count,
                     *[_value(v) for v in values]))
    return sorted(rows, key=_sort_key)


def _value(v: object) -> object:
    """A result value as both paths compare it: null, a list or text as it is, a number as a float."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, list | tuple):
        return [_value(x) for x in v]
    return v if isinstance(v, str) else _num(float(v))  # type: ignore[arg-type]


# -- the Spark path ----------------------------------------------------------------

def run_spark(spark, s: Scenario, cuts: dict[str, list[int]], workdir: Path | None = None,  # noqa: ANN001
              restart_after: int | None = None) -> tuple[JoinObserved, dict]:
    """The scenario through the engine, each source cut into files as ``cuts`` says, then drained.

    ``restart_after``: after that micro-batch a new engine takes over from the
    checkpoint and replays the batch (as after a crash before its commit).
    Returns what the outputs hold and ``summary.json``'s content.
    """
    import tempfile
    from functools import reduce

    from lowwater.io.files import read_batch
    from lowwater.spark.engine import Engine
    from lowwater.testing.scenario_spark import land_inputs

    work = Path(workdir or tempfile.mkdtemp(prefix="lowwater-join-"))
    cfg = s.pipeline(base_dir=work)
    files = land_inputs(s, cfg, cuts)
    batches = max(len(v) for v in files.values())
    engine = Engine(cfg, spark)
    try:
        i = 0
        while i < batches:
            frames = [engine.normalised(src.name, read_batch(spark, src, engine.schemas[src.name],
                                                             path=str(files[src.name][i])))
                      for src in cfg.sources if i < len(files[src.name])]
            engine.process_batch(reduce(lambda a, b: a.unionByName(b), frames), i)
            if i == restart_after:
                engine.close()
                engine = Engine(cfg, spark)  # a new process would see only the checkpoint
                restart_after = None
                continue  # replay batch i
            i += 1
        summary = engine.summary(engine.drain())
    finally:
        engine.close()
    return _observed(spark, cfg, Path(cfg.output.path), summary), summary



def _cell(v):  # noqa: ANN001, ANN202 - a pandas cell: a scalar, an array, NaN or NA
    import pandas as pd

    if hasattr(v, "tolist"):
        return v.tolist()
    return None if not isinstance(v, list | str) and pd.isna(v) else v


def _observed(spark, cfg: PipelineConfig, out: Path, summary: dict) -> JoinObserved:  # noqa: ANN001
    import pandas as pd

    assert cfg.join is not None
    jc = cfg.join

    def read(kind: str) -> list[dict]:
        p = out / kind
        return read_output(spark, p).to_dict("records") if p.exists() else []

    def secs(ts) -> float | None:  # noqa: ANN001
        return None if ts is None or pd.isna(ts) else pd.Timestamp(ts).value / 1e9

    joined = sorted((("|".join(str(r[c]) for c in jc.on), secs(r["left_event_time"]), secs(r["right_event_time"]))
                     for r in read("joined")), key=_sort_key)
    by_name = {src.name: src for src in cfg.sources}
    late = sorted((str(r["source"]), float(r[by_name[r["source"]].event_time])) for r in read("late"))
    counts = {side: {k: v for k, v in c.items() if k != "balanced"} for side, c in summary.get("join", {}).items()}
    results = []
    if jc.window is not None:  # the windows after the join: results/, as a transcript's rows
        aggs = [a.name for a in jc.window.aggregations]
        results = sorted(((("|".join(str(r[k]) for k in jc.window.key)), secs(r["window_start"]),
                           secs(r["window_end"]), r["kind"], int(r["revision"]), int(r["count"]),
                           *[_value(_cell(r[a])) for a in aggs])
                          for r in read("results")), key=_sort_key)
    return JoinObserved(joined, late, counts, results=results)
