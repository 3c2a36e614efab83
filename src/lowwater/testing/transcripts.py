"""Scenario transcripts: plain YAML rows and expectations (as Beam's ``trigger_transcripts.yaml``).

A transcript is one YAML document (a file may hold several, separated by
``---``). Rows and expectations are YAML mappings -- nothing is parsed by
hand::

    name: late_revision                 # optional (default: the file's stem, then -1, -2, ...)
    description: what the scenario shows and why
    config: {source: [...], window: {...}, output: {path: out}}   # the TOML as a mapping
    input:                              # each source's rows in its landing order
      clicks:
        - {partition: 0, event_time: 1, arrival_time: 1, key: a, amount: 1}
    cuts:                               # cuttings the Spark path runs (per source: where a new file starts)
      - {}
      - {clicks: [2, 5]}
    replay: [reversed, shuffled, recut] # core replays that must give the same results (default below)
    order_sensitive: true               # opt-out: only ``recut`` (landing order decides ties)
    steps:                              # optional: the input as micro-batches, each with what it must show
      - input: {clicks: 3}              # the next 3 rows of clicks (sources not named: none)
        expect:
          watermark: 9                  # W after the step, seconds (null: still undefined)
          panes:                        # the emissions of this step, as in expect.results
            - {key: a, window: [0, 10], kind: final, revision: 0, count: 2, total: 2}
          too_late: []                  # the too-late rows of this step
    expect:                             # the whole run, drained (every part optional)
      results:
        - {key: a, window: [0, 10], kind: final, revision: 0, count: 2, total: 2}
      too_late:                         # window and watermark (W(r)) optional: checked when every row has them
        - {source: clicks, partition: 0, event_time: 3, window: [0, 10], watermark: 9}
      counts: {rows: 3, on_time: 2, late_updates: 0, too_late: 1, dead_letter: 0}
      dead_letters:
        - {source: clicks, reason: missing event_time (event_time)}

or, for a configuration that must be refused::

    name: no_key
    config: {...}
    error: window.key            # parsing the config raises with a message containing this

A result row names the key, the window ``[start, end]`` in seconds, the
``kind`` (provisional, final, revision, retraction), ``revision``, ``count``
and each aggregation of ``window.aggregations``. ``too_late`` rows name the
source (``default`` for an unnamed one), partition and event time, and may
name the window the row missed and the ``W(r)`` that judged it (one entry per
missed window then, as in the late output).

Replays (core only, ``testing/transcript_core.py``): ``recut`` runs the log cut
into other micro-batches (every result identical, SEMANTICS.md §8);
``reversed`` and ``shuffled`` land each source's rows in another order, which
changes nothing when arrival times decide the order. The default is all
three when every source has an ``arrival_time``, no two rows of a partition
share one (a tie is broken by landing order) and ``order_sensitive`` is not
set, else ``recut`` only.

:func:`load_all` reads a file into :class:`Transcript` objects; each carries
a :class:`~lowwater.testing.scenario_files.Scenario` so both runners (core and
Spark) take it as they took the table files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lowwater.testing.scenario_files import Observed, Scenario, _agg_names, _num

REPLAYS = ("reversed", "shuffled", "recut")


@dataclass
class Step:
    """One micro-batch of a transcript: how many rows of each source it takes, and what it must show."""

    take: dict[str, int]
    watermark: float | None | str = "unchecked"  # seconds; None: W still undefined
    panes: list[tuple] | None = None
    too_late: list[tuple] | None = None


@dataclass
class Transcript:
    """A scenario with its steps, replays, or the error its configuration must raise."""

    scenario: Scenario
    steps: list[Step] = field(default_factory=list)
    replay: tuple[str, ...] = ()
    error: str | None = None

    @property
    def name(self) -> str:
        return self.scenario.name


def _source_names(config: dict[str, Any]) -> list[str]:
    sources = config.get("source") or {}
    return [s["name"] for s in sources] if isinstance(sources, list) else [sources.get("name", "default")]


def _order_free(config: dict[str, Any], inputs: dict[str, list[dict]]) -> bool:
    """Whether arrival times alone decide the order: every source has them, no two rows of a partition tie.

    A tie is broken by the landing order (the offset), which a reversed or shuffled landing changes.
    """
    sources = config.get("source") or {}
    sources = sources if isinstance(sources, list) else [sources]
    if not all(s.get("arrival_time") for s in sources):
        return False
    for s in sources:
        rows = inputs.get(s.get("name", "default"), [])
        seen = [(r.get(s.get("partition", "")), r.get(s["arrival_time"])) for r in rows]
        if len(set(seen)) != len(seen):
            return False
    return True


def result_row(r: dict[str, Any], aggs: list[str]) -> tuple:
    """A result mapping as the runners' tuple: (key, start, end, kind, revision, count, *aggs)."""
    start, end = r["window"]
    values = [None if r.get(a) is None else _num(float(r[a])) for a in aggs]
    return (str(r["key"]), float(start), float(end), r["kind"], int(r["revision"]), int(r["count"]), *values)


def _results(rows: list[dict] | None, aggs: list[str]) -> list[tuple]:
    return sorted((result_row(r, aggs) for r in rows or []), key=lambda t: tuple((x is None, x) for x in t))


def _too_late(rows: list[dict] | None) -> list[tuple]:
    return sorted((str(r["source"]), str(r["partition"]), float(r["event_time"])) for r in rows or [])


def _too_late_windows(rows: list[dict] | None) -> list[tuple] | None:
    """The too-late rows with their window and ``W(r)``, when every row states them (else not checked)."""
    if not rows or not all("window" in r and "watermark" in r for r in rows):
        return None
    return sorted((str(r["source"]), str(r["partition"]), float(r["event_time"]), float(r["window"][0]),
                   float(r["window"][1]), float(r["watermark"])) for r in rows)


def _step(data: dict[str, Any], aggs: list[str]) -> Step:
    e = data.get("expect") or {}
    return Step(
        take={str(k): int(v) for k, v in (data.get("input") or {}).items()},
        watermark=(None if e["watermark"] is None else float(e["watermark"])) if "watermark" in e else "unchecked",
        panes=_results(e["panes"], aggs) if "panes" in e else None,
        too_late=_too_late(e["too_late"]) if "too_late" in e else None,
    )


def parse(data: dict[str, Any], name: str) -> Transcript:
    """One transcript document (a mapping) as a :class:`Transcript`."""
    unknown = set(data) - {"name", "description", "config", "input", "cuts", "replay", "order_sensitive", "steps",
                           "expect", "error"}
    if unknown:
        msg = f"transcript {name}: unknown keys {sorted(unknown)}"
        raise ValueError(msg)
    config = data["config"]
    inputs = {str(k): list(v or []) for k, v in (data.get("input") or {}).items()}
    for src in _source_names(config):
        inputs.setdefault(src, [])
    s = Scenario(data.get("name", name), data.get("description", ""), config, inputs, data.get("cuts") or [{}],
                 data.get("expect") or {})
    if "replay" in data:
        replay = tuple(data["replay"] or ())
    elif data.get("order_sensitive") or not _order_free(config, inputs):
        replay = ("recut",)
    else:
        replay = REPLAYS
    bad = set(replay) - set(REPLAYS)
    if bad:
        msg = f"transcript {name}: replay {sorted(bad)} is not one of {', '.join(REPLAYS)}"
        raise ValueError(msg)
    if data.get("order_sensitive") and set(replay) & {"reversed", "shuffled"}:
        msg = f"transcript {name}: order_sensitive with a reversed or shuffled replay"
        raise ValueError(msg)
    steps = [_step(st, _agg_names(s)) for st in data.get("steps") or []]
    t = Transcript(s, steps, replay, data.get("error"))
    if steps:
        _check_steps(t)
    return t


def _check_steps(t: Transcript) -> None:
    """Steps must take every row of every source, exactly once."""
    for src, rows in t.scenario.input.items():
        taken = sum(st.take.get(src, 0) for st in t.steps)
        if taken != len(rows):
            msg = f"transcript {t.name}: steps take {taken} rows of {src}, it has {len(rows)}"
            raise ValueError(msg)


def step_cuts(t: Transcript) -> dict[str, list[int]] | None:
    """The steps as a per-source cutting (where each new file starts), when one source has rows (else None).

    The Spark path lands micro-batch ``i`` as the ``i``-th file of every source, so the steps map onto
    files only for one source.
    """
    with_rows = [src for src, rows in t.scenario.input.items() if rows]
    if not t.steps or len(with_rows) != 1:
        return None
    src = with_rows[0]
    bounds = [sum(st.take.get(src, 0) for st in t.steps[: i + 1]) for i in range(len(t.steps) - 1)]
    if any(st.take.get(src, 0) == 0 for st in t.steps):
        return None
    return {src: bounds}


def step_problems(t: Transcript, got: list[tuple]) -> list[str]:
    """Differences between the transcript's steps and ``got``: (W after, result rows, too-late rows) per step."""
    if len(got) != len(t.steps):
        return [f"{len(got)} micro-batches ran, the transcript has {len(t.steps)} steps"]
    problems = []
    for i, (want, (w, panes, too_late)) in enumerate(zip(t.steps, got, strict=True)):
        if want.watermark != "unchecked" and w != want.watermark:
            problems.append(f"step {i}: watermark {w}, want {want.watermark}")
        if want.panes is not None and panes != want.panes:
            problems.append(f"step {i}: panes\n  got  {panes}\n  want {want.panes}")
        if want.too_late is not None and too_late != want.too_late:
            problems.append(f"step {i}: too-late rows\n  got  {too_late}\n  want {want.too_late}")
    return problems


def load_all(path: str | Path) -> list[Transcript]:
    """Every transcript of a YAML file (documents separated by ``---``)."""
    p = Path(path)
    docs = [d for d in yaml.safe_load_all(p.read_text()) if d]
    names = [p.stem] if len(docs) == 1 else [f"{p.stem}-{i}" for i in range(1, len(docs) + 1)]
    return [parse(d, n) for d, n in zip(docs, names, strict=True)]


def load(path: str | Path) -> Scenario:
    """The scenario of a one-transcript file (what the multi-run tests change and re-run)."""
    (t,) = load_all(path)
    return t.scenario


def expected(s: Scenario) -> Observed:
    """The ``expect`` section as an :class:`Observed` (a part not given is not checked)."""
    e = s.expect
    dead = None
    if "dead_letters" in e:
        dead = sorted((str(d["source"]), str(d["reason"])) for d in e["dead_letters"] or [])
    return Observed(
        _results(e["results"], _agg_names(s)) if "results" in e else None,  # type: ignore[arg-type]
        _too_late(e["too_late"]) if "too_late" in e else None,  # type: ignore[arg-type]
        dict(e.get("counts") or {}),
        dead,
        too_late_windows=_too_late_windows(e.get("too_late")),
    )
