"""SEMANTICS.md §8 on Spark: the same log, cut into micro-batches of random sizes,
gives identical results, revisions, late rows and counts (only *when* may differ)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowwater.testing.scenario import base_config, run_scenario

pytestmark = pytest.mark.spark

TOTALS = ("rows", "on_time", "late_updates", "too_late")


@st.composite
def random_logs(draw):
    n = draw(st.integers(10, 40))
    parts = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    arrivals = draw(st.lists(st.integers(0, 120), min_size=n, max_size=n))
    # The files hold the log in arrival order, (arrival_time, partition, offset) (SEMANTICS.md §1):
    # rows arriving at the same instant are in partition order, so no cut can reorder a tie.
    arrivals, parts = (list(x) for x in zip(*sorted(zip(arrivals, parts, strict=True)), strict=True))
    delays = draw(st.lists(st.one_of(st.integers(0, 3), st.integers(0, 40)), min_size=n, max_size=n))
    rows = [
        {
            "partition": str(p),
            "offset": i,
            "event_time": float(a - d),
            "arrival_time": float(a),
            "key": draw(st.sampled_from(["a", "b"])),
            "amount": float(draw(st.integers(1, 9))),
        }
        for i, (p, a, d) in enumerate(zip(parts, arrivals, delays, strict=True))
    ]
    window = draw(
        st.sampled_from([{"type": "tumbling", "size": "10s"}, {"type": "hopping", "size": "10s", "slide": "5s"}])
    )
    window["allowed_lateness"] = draw(st.sampled_from(["0s", "4s", "15s"]))
    watermark = {"max_out_of_orderness": draw(st.sampled_from(["0s", "2s", "5s"]))}
    if draw(st.booleans()):
        watermark["idle_timeout"] = "8s"
    cfg = base_config(
        source={"arrival_time": "arrival_time", "offset": "offset"},
        watermark=watermark,
        window={**window, "aggregations": {"total": "sum(amount)", "low": "min(amount)", "high": "max(amount)"}},
    )
    cuts = sorted(set(draw(st.lists(st.integers(1, n - 1), min_size=1, max_size=3))))
    return cfg, rows, cuts


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=random_logs())
def test_random_cuts_give_identical_results(spark, case):
    cfg, rows, cuts = case
    whole = run_scenario(spark, cfg, rows)
    cut = run_scenario(spark, cfg, rows, cuts=cuts)
    assert whole.summary["balanced"] and cut.summary["balanced"]
    assert cut.emissions() == whole.emissions()
    assert cut.late_rows() == whole.late_rows()
    for k in ("rows", "on_time", "late_updates", "too_late", "dead_letter", "windows_fired", "revisions"):
        assert cut.summary[k] == whole.summary[k], k
    # Every valid row is accounted for, and each revision follows a late update.
    assert whole.summary["rows"] == len(rows)
    assert whole.summary["revisions"] >= whole.summary["late_updates"]


def test_a_step_reuses_the_code_of_a_step_of_the_same_shape(spark):
    """A step's code depends on its shape, not on its values (ADR 0050): the same log shifted by whole
    windows (every watermark, bound and processing time new) compiles no new Java class."""
    delay = [60 if i % 11 == 10 else 25 if i % 7 == 3 else i % 3 for i in range(36)]  # too late, late, on time
    rows = [
        {"partition": str(i % 2), "offset": i // 2, "event_time": float(3 * i - d), "arrival_time": float(3 * i),
         "key": "ab"[i % 2], "amount": float(i % 5 + 1)}
        for i, d in enumerate(delay)
    ]
    cfg = base_config(
        source={"arrival_time": "arrival_time", "offset": "offset"},
        watermark={"max_out_of_orderness": "2s", "idle_timeout": "8s"},
        window={"type": "tumbling", "size": "10s", "allowed_lateness": "15s",
                "aggregations": {"total": "sum(amount)", "high": "max(amount)"}},
    )
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()  # noqa: SLF001
    first = run_scenario(spark, cfg, rows, cuts=[12, 24])
    before = compiled.getCount()
    shift = 10_000.0  # 1,000 windows later
    moved = [{**r, "event_time": r["event_time"] + shift, "arrival_time": r["arrival_time"] + shift} for r in rows]
    again = run_scenario(spark, cfg, moved, cuts=[12, 24])
    assert compiled.getCount() - before == 0
    assert first.summary["late_updates"] > 0 and first.summary["too_late"] > 0  # both late paths ran
    assert {k: again.summary[k] for k in TOTALS} == {k: first.summary[k] for k in TOTALS}
    assert len(again.emissions()) == len(first.emissions())
