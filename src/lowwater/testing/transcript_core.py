"""The core path of a scenario: the log through the tracker, ``judge`` and the core's panes, step by step.

The valid rows of every source are put in arrival order (``core/judge.py``)
and fed to one :class:`~lowwater.core.tracker.WatermarkTracker` in
micro-batches; each (key, window) is a :class:`~lowwater.core.panes.Pane`
(one per value input, ``core/panes.WindowPanes``) in the configured accumulation mode. Before
each row, the windows whose end ``W(r)`` has reached fire; an on-time row is
admitted, a late update emits the next revision (and, retracting, its
retraction); at the end of a step an early trigger may emit provisionals and
the windows ``W`` has passed fire; the drain fires the rest. So the result
rows come from the one statement of the pane rules the tests hold the Spark
fold to, in every mode.

:func:`run_core` runs one cutting: one batch (default), the steps of a
transcript, or the arrival-ordered log cut at given positions; :func:`replays`
runs a transcript's reversed, shuffled and re-cut replays.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from lowwater.config import PipelineConfig
from lowwater.core import partials
from lowwater.core.aggregates import input_index
from lowwater.core.judge import account, arrival_order, judge
from lowwater.core.lateness import Lateness
from lowwater.core.panes import Emission, WindowPanes
from lowwater.core.tracker import WatermarkTracker
from lowwater.core.tracker_state import NEG_INF
from lowwater.core.triggers import AccumulationMode
from lowwater.testing.scenario_files import Observed, Scenario, _lateness_trajectory, _log, emit_latencies
from lowwater.testing.transcripts import Transcript


def _sort_key(row: tuple) -> tuple:
    """Result rows sort with nulls last (None does not compare with numbers)."""
    return tuple((x is None, x) for x in row)


@dataclass
class StepOut:
    """What one micro-batch showed: W after it (s, None while undefined), its emissions and too-late rows."""

    watermark: float | None
    panes: list[tuple] = field(default_factory=list)
    too_late: list[tuple] = field(default_factory=list)


class _Panes:
    """Every (key, window)'s panes (``core/panes.WindowPanes``) and the result rows they emit."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.aggs = cfg.window.aggregations
        # One pane per value input (``core/aggregates.value_inputs``: a column, its squares...), read together.
        self.inputs = cfg.window.value_inputs
        self.panes = WindowPanes(self.inputs, AccumulationMode(cfg.window.accumulation), cfg.early)

    def _rows(self, emitted: list[tuple[tuple, list[list[Emission]]]]) -> list[tuple]:
        out = []
        for (key, start, end), per_input in emitted:
            for e, values in WindowPanes.emitted(per_input):
                flat = [e.value.n, *[x for v in values for x in v.parts[1:]]]  # every input's partial
                results = [partials.output(a.func, flat, input_index(self.inputs, a), a.fraction) for a in self.aggs]
                out.append((key, start / 1e6, end / 1e6, str(e.kind), e.revision, e.value.n,
                            *[v if v is None or isinstance(v, list) else float(v) for v in results]))
        return out

    def admit(self, win: tuple, row: dict, at: tuple[int, int] = (0, 0)) -> None:
        self.panes.admit(win, row, at)

    def late(self, win: tuple, row: dict, at: tuple[int, int] = (0, 0)) -> list[tuple]:
        return self._rows(self.panes.late(win, row, at))

    def fire_due(self, w_us: float) -> list[tuple]:
        """Fire every open window whose end ``w_us`` has reached (``inf``: the drain)."""
        return self._rows(self.panes.fire(w_us))

    def early(self) -> list[tuple]:
        return self._rows(self.panes.early())


def _who(cfg: PipelineConfig, log, i: int) -> tuple:  # noqa: ANN001
    """(source, partition, event_time) of log row ``i``, as a too-late row names it."""
    src = next(x for x in cfg.sources if x.name == log.source[i])
    return (log.source[i] if cfg.named_sources else "default", log.partition[i], float(log.rows[i][src.event_time]))


def _batches_of_steps(s: Scenario, steps_take: list[dict[str, int]], log_source: list[str],
                      log_offset: list[int]) -> np.ndarray:
    """The step number of each valid log row, from how many rows of each source each step takes."""
    bounds: dict[str, list[int]] = {}
    for src in s.input:
        acc = np.cumsum([st.get(src, 0) for st in steps_take])
        bounds[src] = acc.tolist()
    return np.array([int(np.searchsorted(bounds[src], off, side="right"))
                     for src, off in zip(log_source, log_offset, strict=True)], dtype=np.int64)


def run_core(s: Scenario, cuts: list[int] | None = None) -> Observed:
    """Run the log through the core, drained: one batch, or cut at ``cuts`` (positions in arrival order)."""
    return run(s, cuts)[0]


def run(s: Scenario, cuts: list[int] | None = None,
        steps: list[dict[str, int]] | None = None) -> tuple[Observed, list[StepOut]]:
    """Run the log through the core, drained, as :func:`run_core` or in ``steps``; also what each step showed."""
    cfg = s.pipeline()
    log = _log(s, cfg)
    n = len(log.rows)
    has_arrival = all(src.arrival_time for src in cfg.sources)
    offset = np.array(log.offset, dtype=np.int64)
    keys = np.array([f"{a}\x00{b}" for a, b in zip(log.source, log.partition, strict=True)], dtype=object)
    arrival = np.array(log.arrival, dtype=np.int64)
    if steps is not None:
        batch = _batches_of_steps(s, steps, log.source, log.offset)
        order = np.lexsort((arrival_order(n, arrival if has_arrival else None, keys, offset, [offset]).argsort(),
                            batch))
        n_batches = len(steps)
    else:
        order = arrival_order(n, arrival if has_arrival else None, keys, offset, [offset])
        pos = np.arange(n)
        bounds = sorted({c for c in cuts or [] if 0 < c < n})
        batch = np.zeros(n, dtype=np.int64)
        batch[order] = np.searchsorted(bounds, pos, side="right")
        n_batches = len(bounds) + 1
    tracker = WatermarkTracker(cfg.strategies)
    panes = _Panes(cfg)
    any_marker = any(src.marker for src in cfg.sources)
    results: list[tuple] = []
    too_late: list[tuple] = []
    too_late_windows: list[tuple] = []
    totals: dict[str, int] = defaultdict(int)
    w_rows: list[int] = []
    event_rows: list[int] = []
    steps_out: list[StepOut] = []
    for b in range(n_batches):
        idx = order[batch[order] == b]
        out = StepOut(None)
        if len(idx):
            j = judge(tracker, cfg.window.assigner(), cfg.window.allowed_lateness_us,
                      np.array(log.partition, dtype=object)[idx], np.array(log.event, dtype=np.int64)[idx],
                      arrival[idx] if has_arrival else None,
                      sources=np.array(log.source, dtype=object)[idx] if cfg.named_sources else None,
                      markers=np.array(log.marker, dtype=bool)[idx] if any_marker else None)
            for k, v in account(j, 0).as_dict().items():
                totals[k] += v
            totals["markers"] += j.markers
            data = idx if j.data is None else idx[j.data]
            by_row = np.argsort(j.pairs.row, kind="stable")
            pair_at = np.searchsorted(j.pairs.row[by_row], np.arange(len(data) + 1))
            for k, i in enumerate(data.tolist()):
                out.panes += panes.fire_due(int(j.watermark_us[k]))
                row = log.rows[i]
                at = (int(j.event_us[k]), len(w_rows) + k)  # (event, arrival position): a by-time input's order
                key = "|".join(str(row[c]) for c in cfg.window.key)
                for p in by_row[pair_at[k]:pair_at[k + 1]].tolist():
                    win = (key, int(j.pairs.start[p]), int(j.pairs.end[p]))
                    if j.verdict[p] == Lateness.ON_TIME:
                        panes.admit(win, row, at)
                    elif j.verdict[p] == Lateness.LATE_UPDATE:
                        out.panes += panes.late(win, row, at)
                    else:
                        too_late_windows.append((*_who(cfg, log, i), win[1] / 1e6, win[2] / 1e6,
                                                 int(j.watermark_us[k]) / 1e6))
                if j.row_verdict[k] == Lateness.TOO_LATE:
                    out.too_late.append(_who(cfg, log, i))
            w_rows += [int(w) for w in j.watermark_us]
            event_rows += [int(e) for e in j.event_us]
        out.panes += panes.early()
        w = tracker.watermark_us
        out.panes += panes.fire_due(w)
        out.watermark = None if w <= NEG_INF else w / 1e6
        results += out.panes
        too_late += out.too_late
        out.panes.sort(key=_sort_key)
        out.too_late.sort()
        steps_out.append(out)
    results += panes.fire_due(float("inf"))
    totals["dead_letter"] = len(log.dead)
    totals["rows"] += len(log.dead)
    ordered = (np.array(log.partition, dtype=object)[order], np.array(log.event, dtype=np.int64)[order],
               arrival[order] if has_arrival else None)
    results.sort(key=_sort_key)
    observed = Observed(
        results=results,
        too_late=sorted(too_late),
        counts={**totals, "regressions": tracker.state.regressions_ignored},
        dead_letters=sorted(log.dead),
        too_late_windows=sorted(too_late_windows),
        watermarks=w_rows,
        lateness=_lateness_trajectory(cfg, *ordered, np.array(log.source, dtype=object)[order]
                                      if cfg.named_sources else None,
                                      np.array(log.marker, dtype=bool)[order] if any_marker else None),
        emit_latency=emit_latencies([r[2] * 1e6 for r in results if r[3] == "final"], np.array(event_rows),
                                    np.append(np.array(w_rows[1:], dtype=np.int64), tracker.watermark_us)),
    )
    return observed, steps_out


def _relanded(s: Scenario, how: str, seed: int) -> Scenario:
    """The scenario with each source's rows landed in another order (reversed or shuffled)."""
    rng = random.Random(seed)
    inputs = {}
    for name, rows in s.input.items():
        rows = list(reversed(rows)) if how == "reversed" else rng.sample(rows, len(rows))
        inputs[name] = rows
    return replace(s, input=inputs)


def replays(t: Transcript, seed: int = 0) -> dict[str, Observed]:
    """The transcript's replays through the core, by name (``recut/...``, ``reversed``, ``shuffled/<seed>``)."""
    s = t.scenario
    out: dict[str, Observed] = {}
    if "recut" in t.replay:
        n = sum(len(rows) for rows in s.input.values())
        rng = random.Random(seed)
        out["recut/every-row"] = run_core(s, cuts=list(range(1, n)))
        for k in range(3):
            out[f"recut/random-{k}"] = run_core(s, cuts=sorted(rng.sample(range(1, max(n, 2)), min(n - 1, 1 + k * 3)))
                                                if n > 1 else [])
    if "reversed" in t.replay:
        out["reversed"] = run_core(_relanded(s, "reversed", seed))
    if "shuffled" in t.replay:
        for k in range(2):
            out[f"shuffled/{seed + k}"] = run_core(_relanded(s, "shuffled", seed + k))
    return out
