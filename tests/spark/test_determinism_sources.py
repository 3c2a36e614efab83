"""SEMANTICS.md §8 on Spark with several sources: each source cut into files on its own gives the same answer.

Three sources with their own generators -- bounded (two partitions),
punctuated (marker rows), adaptive -- all with an arrival-time column. Each
source's log is cut at random places chosen independently (one source in one
file, another in many), the files landed as micro-batches
(``lowwater.testing.scenario_spark.run_spark``: batch ``i`` holds the
``i``-th file of every source that has one) and drained. Results, too-late
rows and counts must equal the one-batch run and the pure core's replay: the
arrival frontier (core/frontier.py) holds back rows another source may still
precede.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowwater.testing.scenario_files import Observed, Scenario
from lowwater.testing.scenario_spark import run_spark
from lowwater.testing.transcript_core import run_core

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "partition STRING, event_time DOUBLE, arrival_time DOUBLE, key STRING, amount DOUBLE"
WATERMARKS = {
    "bounded": {"strategy": "bounded", "max_out_of_orderness": "3s"},
    "cdc": {"strategy": "punctuated", "marker": "is_marker"},
    "mobile": {"strategy": "adaptive", "target_quantile": 0.9, "over": "10s", "min_lateness": "1s",
               "max_lateness": "8s"},
}


def _source(name: str) -> dict:
    schema = SCHEMA.replace("key STRING", "is_marker INT, key STRING") if name == "cdc" else SCHEMA
    return {"name": name, "format": "jsonl", "path": f"landing/{name}", "partition": "partition",
            "event_time": "event_time", "arrival_time": "arrival_time", "schema": schema,
            "watermark": WATERMARKS[name]}


@st.composite
def source_log(draw, name: str) -> list[dict]:  # noqa: ANN001
    """One source's rows in its arrival order ``(arrival, partition, offset)``; cdc has marker rows."""
    n = draw(st.integers(8, 18))
    parts = ["0", "1"] if name == "bounded" else ["0"]
    rows = []
    for _ in range(n):
        arrival = draw(st.integers(0, 60))
        delay = draw(st.one_of(st.integers(0, 2), st.integers(0, 25)))
        row = {"partition": draw(st.sampled_from(parts)), "event_time": float(arrival - delay),
               "arrival_time": float(arrival), "key": draw(st.sampled_from(["a", "b"])),
               "amount": float(draw(st.integers(1, 9)))}
        if name == "cdc":
            marker = draw(st.integers(0, 3)) == 0  # a marker proves a timestamp (a regression now and then)
            row["is_marker"] = int(marker)
            if marker:
                row.update(key=None, amount=None, event_time=float(arrival - draw(st.integers(0, 6))))
        rows.append(row)
    rows.sort(key=lambda r: (r["arrival_time"], r["partition"]))  # the files hold the log in arrival order
    return rows


@st.composite
def cases(draw) -> tuple[Scenario, dict[str, list[int]]]:  # noqa: ANN001
    inputs = {name: draw(source_log(name)) for name in WATERMARKS}
    config = {
        "source": [_source(name) for name in WATERMARKS],
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": draw(st.sampled_from(["0s", "5s"])),
                   "key": ["key"], "aggregations": {"total": "sum(amount)", "high": "max(amount)"}},
        "late": {"policy": "side_output"},
        "output": {"path": "out"},
    }
    # One source in one file, one in many, one in a few: which is which is drawn too.
    names = draw(st.permutations(list(WATERMARKS)))
    cuts: dict[str, list[int]] = {names[0]: []}
    many = len(inputs[names[1]])
    cuts[names[1]] = sorted(set(draw(st.lists(st.integers(1, many - 1), min_size=3, max_size=5))))
    few = len(inputs[names[2]])
    cuts[names[2]] = sorted(set(draw(st.lists(st.integers(1, few - 1), min_size=1, max_size=2))))
    return Scenario("random", "", config, inputs, [{}], {}), cuts


def _same(got: Observed, want: Observed, label: str) -> None:
    assert got.results == want.results, f"{label}: results"
    assert got.too_late == want.too_late, f"{label}: too-late rows"
    for k, v in want.counts.items():
        if k in got.counts:
            assert got.counts[k] == v, f"{label}: {k}"


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=cases())
def test_sources_cut_independently_give_identical_results(spark, tmp_path_factory, case):
    s, cuts = case
    # The reference is the core's replay of the whole log (one batch, milliseconds), not a one-batch Spark run:
    # the cut run must equal it, which is what equal to a one-batch run that equals the core came to.
    core = run_core(s)
    cut = run_spark(spark, s, cuts, workdir=tmp_path_factory.mktemp("cut"))
    _same(cut, core, f"cut {cuts} vs the core's one batch")
    # Every row is accounted for: data rows (markers are not rows), markers counted apart.
    n_markers = sum(r.get("is_marker", 0) for r in s.input["cdc"])
    assert cut.counts["markers"] == n_markers
    assert cut.counts["rows"] == sum(len(v) for v in s.input.values()) - n_markers
    assert cut.counts["rows"] == sum(cut.counts[k] for k in ("on_time", "late_updates", "too_late", "dead_letter"))
